"""Spark's own Kafka source against format("sluicegate") with the kafka connector, same topic, same settings.

    .venv/bin/python benchmarks/kafka_source.py                     # 10M records of 110 B over 8 partitions
    .venv/bin/python benchmarks/kafka_source.py --records 2000000   # smaller
    .venv/bin/python benchmarks/kafka_source.py --sides native --jobs noop --bootstrap-servers 127.0.0.1:9092

The topic is kafka_clients.py's (``fill_topic``: record i in partition i % P, key ``%010d``
of i, a 100-byte value, CreateTime ``2026-01-01T00:00Z + i // 10`` ms), written once and
reused while it holds exactly those records. Each run is its own Python process with its
own SparkSession (``spark_session``: ``local[2]``, 4 shuffle partitions, UTC), started one
after the other, never side by side:

- ``native``: ``readStream.format("kafka")`` (Spark's source, spark-sql-kafka 4.2.0 from
  ``sluicegate.devtools.broker.maven.ensure_spark_kafka_jars`` via ``spark.jars``),
  ``subscribe``, ``startingOffsets=earliest``, ``kafka.isolation.level=read_committed``,
  ``maxOffsetsPerTrigger``;
- ``sluicegate``: ``readStream.format("sluicegate")`` with ``connector=kafka``
  (``topics``, ``starting_offsets=earliest``, ``stopping_offsets=latest``), ``parallelism``
  = the topic's partitions, ``maxRecordsPerTrigger``, and a real coordinator process
  (``python -m sluicegate coordinator --connector kafka ...``) on a fresh source name.

Both read with ``Trigger.AvailableNow`` and the same per-batch limit (default 2,000,000), in
two jobs:

- ``noop``: the rows into ``writeStream.format("noop")``;
- ``windowed``: ``groupBy(window(timestamp, "1 minute")).agg(count, sum(length(value)))``
  (stateful, no watermark) into a ``memory`` sink in complete mode.

Figures come from Spark's progress events. "Steady state" runs from the end of the first
batch that read data (for sluicegate that batch starts the Python workers, ~4-7 s) to the
end of the last one; MiB/s counts key + value bytes (110 B a record). Exit code 1 if a
run's row count is not exactly the topic's, or a window's count or sum is not the
expected one.

Without ``--bootstrap-servers`` / ``KAFKA_BOOTSTRAP_SERVERS`` it runs the kept local broker
of ``<cache root>/bench-broker`` (as kafka_clients.py does).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_clients import (
    BASE_TS_MS,
    KEY_BYTES,
    RECORDS_PER_MS,
    VALUE_BYTES,
    bench_broker,
    default_topic,
    fill_topic,
)

WINDOW_MS = 60_000
SIDES = ("native", "sluicegate")
JOBS = ("noop", "windowed")


def expected_windows(records: int) -> dict[int, tuple[int, int]]:
    """{window start ms: (count, sum of value lengths)} of records 0..N-1."""
    per_window = WINDOW_MS * RECORDS_PER_MS  # BASE_TS_MS is on a minute boundary
    windows = {}
    for lo in range(0, records, per_window):
        count = min(records, lo + per_window) - lo
        windows[BASE_TS_MS + lo // RECORDS_PER_MS] = (count, count * VALUE_BYTES)
    return windows


# --- one run, in its own process ------------------------------------------------------------


def child(spec: dict[str, Any]) -> int:
    """Run one side x job, write its progress (and windows) to ``spec["out"]`` as JSON."""
    from pyspark.sql import functions as F

    from sluicegate.spark.job import spark_session

    side, job = spec["side"], spec["job"]
    extra: dict[str, str] = {}
    if side == "native":
        from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars

        extra["spark.jars"] = ",".join(str(p) for p in ensure_spark_kafka_jars())
    spark = spark_session(f"kafka-bench-{side}-{job}", spec["master"], quiet=True, extra_conf=extra)
    bootstrap, topic, limit = spec["bootstrap"], spec["topic"], str(spec["max_per_trigger"])
    if side == "native":
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("maxOffsetsPerTrigger", limit)
        )
    else:
        reader = (
            spark.readStream.format("sluicegate")
            .option("source", spec["source"])
            .option("connector", "kafka")
            .option("option.topics", topic)
            .option("option.bootstrap_servers", bootstrap)
            .option("option.starting_offsets", "earliest")
            .option("option.stopping_offsets", "latest")
            .option("parallelism", str(spec["parallelism"]))
            .option("maxRecordsPerTrigger", limit)
            .option("kafka.bootstrap.servers", bootstrap)
        )
        for key, value in spec["client_settings"].items():
            reader = reader.option(f"option.kafka.{key}", value)
    df = reader.load()
    checkpoint = str(Path(spec["workdir"]) / f"checkpoint-{side}-{job}")
    name = f"windows_{side}"
    if job == "noop":
        writer = df.writeStream.format("noop")
    else:
        windows = df.groupBy(F.window("timestamp", "1 minute").alias("window")).agg(
            F.count(F.lit(1)).alias("count"), F.sum(F.length("value")).alias("bytes")
        )
        writer = windows.writeStream.format("memory").queryName(name).outputMode("complete")
    started = time.monotonic()
    query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    rows_seen, last_batch = 0, -1
    deadline = started + spec["timeout"]
    while not query.awaitTermination(2):
        if time.monotonic() > deadline:
            query.stop()
            raise RuntimeError(f"the query did not finish within {spec['timeout']} s")
        progress = query.lastProgress
        if progress is not None and progress["batchId"] != last_batch:
            last_batch = progress["batchId"]
            rows_seen = sum(int(p["numInputRows"] or 0) for p in query.recentProgress)
            print(
                f"  [{side} {job}] {time.monotonic() - started:6.1f} s  batch {last_batch}: {rows_seen:,} rows so far",
                flush=True,
            )
    elapsed = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    rows_seen = sum(int(p["numInputRows"] or 0) for p in query.recentProgress)
    print(f"  [{side} {job}] {elapsed:6.1f} s  done: {rows_seen:,} rows", flush=True)
    result: dict[str, Any] = {
        "elapsed": elapsed,
        "progress": [json.loads(p.json) for p in query.recentProgress],
    }
    if job == "windowed":
        result["windows"] = [
            [int(r["start_ms"]), int(r["count"]), int(r["bytes"])]
            for r in spark.sql(f"SELECT unix_millis(window.start) AS start_ms, count, bytes FROM {name}").collect()
        ]
    spark.stop()
    Path(spec["out"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


# --- the parent -------------------------------------------------------------------------------


def _start_coordinator(source: str, topic: str, bootstrap: str, parallelism: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "sluicegate",
        "coordinator",
        "--source",
        source,
        "--connector",
        "kafka",
        "--max-parallelism",
        str(parallelism),
        "--option",
        f"topics={topic}",
        "--option",
        f"bootstrap_servers={bootstrap}",
        "--option",
        "starting_offsets=earliest",
        "--option",
        "stopping_offsets=latest",
    ]
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    with log.open("ab") as handle:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "is serving" in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    _stop(proc)
    raise RuntimeError(f"the coordinator did not start:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Result:
    side: str
    job: str
    rows: int = 0
    seconds: float = 0.0
    steady_rows: int = 0
    steady_s: float = 0.0
    first_batch_s: float = 0.0
    data_batches: int = 0
    add_batch_ms: float = 0.0
    error: str = ""
    windows_ok: bool | None = None

    @property
    def steady_rate(self) -> float:
        return self.steady_rows / self.steady_s if self.steady_s > 0 else float("nan")

    @property
    def steady_mib(self) -> float:
        return self.steady_rate * (KEY_BYTES + VALUE_BYTES) / 2**20


def _ms(p: dict[str, Any], key: str) -> float:
    return float((p.get("durationMs") or {}).get(key, 0))


def _end_s(p: dict[str, Any]) -> float:
    stamp = datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()
    return stamp + _ms(p, "triggerExecution") / 1000


def summarize(side: str, job: str, data: dict[str, Any], records: int) -> Result:
    progress = data["progress"]
    res = Result(side, job, seconds=float(data["elapsed"]))
    res.rows = sum(int(p.get("numInputRows") or 0) for p in progress)
    with_data = [p for p in progress if int(p.get("numInputRows") or 0) > 0]
    res.data_batches = len(with_data)
    if with_data:
        res.first_batch_s = _ms(with_data[0], "triggerExecution") / 1000
    if len(with_data) >= 2:
        res.steady_rows = sum(int(p["numInputRows"]) for p in with_data[1:])
        res.steady_s = _end_s(with_data[-1]) - _end_s(with_data[0])
        res.add_batch_ms = statistics.median(_ms(p, "addBatch") for p in with_data[1:])
    if "windows" in data:
        got = {start: (count, total) for start, count, total in data["windows"]}
        want = expected_windows(records)
        res.windows_ok = got == want
        if not res.windows_ok:
            bad = sorted(set(got) ^ set(want)) + sorted(k for k in set(got) & set(want) if got[k] != want[k])
            res.error = f"windows differ, first at {bad[:3]}: got {[got.get(k) for k in bad[:3]]}, " + (
                f"expected {[want.get(k) for k in bad[:3]]}"
            )
    return res


def run_one(side: str, job: str, args: argparse.Namespace, bootstrap: str, topic: str, workdir: Path) -> Result:
    print(f"\n=== {side} / {job} ===", flush=True)
    coordinator = None
    out = workdir / f"result-{side}-{job}.json"
    spec = {
        "side": side,
        "job": job,
        "bootstrap": bootstrap,
        "topic": topic,
        "master": args.master,
        "max_per_trigger": args.max_per_trigger,
        "parallelism": args.partitions,
        "workdir": str(workdir),
        "timeout": args.timeout,
        "out": str(out),
        "source": "",
        "client_settings": dict(kv.split("=", 1) for kv in args.client_setting),
    }
    try:
        if side == "sluicegate":
            spec["source"] = f"kbench-{secrets.token_hex(3)}"
            log = workdir / f"coordinator-{spec['source']}.log"
            print(f"  starting the coordinator for source {spec['source']} (log {log})", flush=True)
            coordinator = _start_coordinator(spec["source"], topic, bootstrap, args.partitions, log)
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
        stderr_log = workdir / f"spark-{side}-{job}.log"
        with stderr_log.open("wb") as err:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(spec)],
                env=env,
                stderr=err,
                check=False,
                timeout=args.timeout + 120,
            )
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join(stderr_log.read_text(errors="replace").splitlines()[-40:])
            return Result(side, job, error=f"the Spark process failed (exit {proc.returncode}), {stderr_log}:\n{tail}")
        return summarize(side, job, json.loads(out.read_text()), args.records)
    except Exception as exc:
        return Result(side, job, error=f"{type(exc).__name__}: {exc}")
    finally:
        if coordinator is not None:
            _stop(coordinator)


def report(results: list[Result], records: int) -> int:
    ok = True
    print(f"\n{records:,} records of {KEY_BYTES + VALUE_BYTES} B (key + value)\n")
    header = (
        f"{'job':<9} {'source':<11} {'rows':>11} {'seconds':>8} {'1st data batch s':>16} "
        f"{'steady rows/s':>14} {'steady MiB/s':>12} {'addBatch ms':>11} {'batches':>7}"
    )
    print(header)
    print("-" * len(header))
    by_key = {(r.job, r.side): r for r in results}
    for r in results:
        if r.error and not r.rows:
            print(f"{r.job:<9} {r.side:<11} FAILED")
            continue
        steady = (
            f"{r.steady_rate:>14,.0f} {r.steady_mib:>12.1f} {r.add_batch_ms:>11.0f}"
            if r.steady_s > 0
            else f"{'-':>14} {'-':>12} {'-':>11}"
        )
        print(
            f"{r.job:<9} {r.side:<11} {r.rows:>11,} {r.seconds:>8.1f} {r.first_batch_s:>16.1f} "
            f"{steady} {r.data_batches:>7}"
        )
    print()
    for job in JOBS:
        native, ours = by_key.get((job, "native")), by_key.get((job, "sluicegate"))
        if native and ours and native.rows and ours.rows and not (native.error or ours.error):
            print(
                f"{job}: sluicegate / native: steady rows/s {ours.steady_rate / native.steady_rate:.2f}x, "
                f"seconds {ours.seconds / native.seconds:.2f}x"
            )
    print()
    for r in results:
        verdict = "OK" if r.rows == records and not r.error else "WRONG"
        if r.rows != records or r.error:
            ok = False
        windows = "" if r.windows_ok is None else f", windows {'OK' if r.windows_ok else 'WRONG'}"
        print(f"{r.job} {r.side}: rows {r.rows:,} of {records:,}{windows} -> {verdict}")
        if r.error:
            print(f"  {r.error}")
    return 0 if ok else 1


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child(json.loads(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--topic", default="", help="default: sluicegate-bench-<records>r-<partitions>p-v1")
    parser.add_argument(
        "--max-per-trigger",
        type=int,
        default=2_000_000,
        help="maxOffsetsPerTrigger (native) and maxRecordsPerTrigger (sluicegate)",
    )
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument(
        "--client-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting of the sluicegate side's consumers (option.kafka.KEY), repeatable",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--keep-logs", action="store_true", help="keep the work directory (logs, checkpoints)")
    args = parser.parse_args()
    if bad := [kv for kv in args.client_setting if "=" not in kv]:
        parser.error(f"--client-setting takes KEY=VALUE, not {bad[0]!r}")
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if set(sides) - set(SIDES) or set(jobs) - set(JOBS):
        parser.error(f"--sides is a subset of {SIDES}, --jobs of {JOBS}")
    topic = args.topic or default_topic(args.records, args.partitions)
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-kafka-bench-"))
    results = []
    with bench_broker(args.bootstrap_servers) as bootstrap:
        print(f"Kafka {bootstrap}; work directory {workdir}", flush=True)
        if args.client_setting:
            print(f"sluicegate side's librdkafka settings: {', '.join(args.client_setting)}", flush=True)
        fill_topic(bootstrap, topic, args.records, args.partitions)
        if "native" in sides:
            from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars

            print(f"Spark's Kafka source: {', '.join(p.name for p in ensure_spark_kafka_jars())}", flush=True)
        for job in jobs:
            for side in sides:
                results.append(run_one(side, job, args, bootstrap, topic, workdir))
    code = report(results, args.records)
    if args.keep_logs or code != 0:
        print(f"\nlogs and checkpoints kept in {workdir}")
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
