"""End-to-end latency at a fixed produce rate: Spark's own Kafka source (tuned) against format("sluicegate").

    .venv/bin/python benchmarks/kafka_latency.py                                   # 50,000 records/s for 120 s
    .venv/bin/python benchmarks/kafka_latency.py --rate 5000 --duration 20 --warmup 5   # a smoke run

For each side in turn (``native-tuned`` and every available sluicegate read path, as
kafka_source.py names them; ``--sides`` chooses), on the same settings:

1. a fresh topic of ``--partitions`` partitions (deleted afterwards);
2. the streaming query starts (its own process and SparkSession, ``local[2]``):
   ``startingOffsets=earliest`` on the empty topic (sluicegate: a coordinator with
   ``starting_offsets=earliest`` and no stopping offsets), ``trigger(processingTime="0
   seconds")``, into a ``foreachBatch`` sink;
3. once the query has run its first trigger, a producer process (confluent-kafka,
   ``linger.ms=5``, ``acks=all``) writes one warm-up record per partition and waits until
   the query has read them (that first data batch starts the Python workers), then writes
   ``--rate`` records/s for ``--duration`` s (record i: key ``%010d`` of i, partition
   i % P, ``--record-bytes`` of key + value), paced every millisecond, CreateTime set by
   librdkafka when the producer hands it the record;
4. the sink, per micro-batch, collects the batch's ``unix_millis(timestamp)`` and keys as
   one Arrow table into the driver (``DataFrame.toArrow``), then reads the wall clock:
   each row's latency is that sink time minus its record timestamp. So a row counts as
   arrived when its whole micro-batch has been read and handed to the sink, the moment
   a ``foreachBatch`` consumer could act on it. The collect is the Spark job that reads the
   batch's records from Kafka (Spark plans the batch before, and runs it lazily inside
   the sink), so its time is part of every latency, alike for every side. Latencies go
   into a histogram in 1 ms bins keyed by the record's second, so nothing per row is kept;
5. the query stops once it has seen every produced record.

Records of the first ``--warmup`` seconds of the paced writing are left out of the figures
too. "rows/batch" and "sink job ms" are medians over the data batches; "sink job ms" is the
time of that job (reading the batch and collecting it), the rest of a latency being the wait
for the next trigger, the planning and the time in Kafka. Prints p50/p90/p99/max per side.
Exit code 1 if a side did not see exactly the produced records (count, and the sum of their
keys), or the producer fell behind its schedule by more than a second.

Producer and query share the machine's cores: the figures are for a comparison on one
machine, not absolute. Results are saved as JSON (``--results``) and drawn (``--plot``),
with kafka_source.py's ``plot``; ``kafka_source.py --replot`` combines them with
throughput results.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_clients import KEY_BYTES, VALUE_BYTES, bench_broker, filler
from kafka_source import (
    DEFAULT_PLOT,
    JVM_SIDE,
    NATIVE_DEFAULTS,
    NATIVE_MODULE,
    NATIVE_SIDES,
    NATIVE_TUNED,
    NATIVE_TUNED_SIDE,
    READ_PATH_ENV,
    READ_PATHS,
    REPO,
    RESULTS_DIR,
    HelpFormatter,
    WorkerMemory,
    available_read_paths,
    is_planned_by_sluicegate,
    kill_tree,
    machine_info,
    native_settings,
    parse_settings,
    plot,
    save_results,
    sluicegate_parallelism,
    sluicegate_side,
    spark_extra_conf,
    start_coordinator,
    stop_process,
    stream_reader,
)

#: The producer may run this far behind its schedule before the run counts as failed.
MAX_BEHIND_S = 1.0


# --- the producer process -----------------------------------------------------------------------


def producer(spec: dict[str, Any]) -> int:
    """Write ``rate`` records/s for ``duration`` s to ``topic``; the outcome as JSON into ``out``."""
    from confluent_kafka import Producer

    from sluicegate.kafka.security import current_security

    rate, partitions, topic = int(spec["rate"]), int(spec["partitions"]), spec["topic"]
    total = int(rate * spec["duration"])
    tail = filler(int(spec["value_bytes"]))
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    prod = Producer(
        {
            "bootstrap.servers": spec["bootstrap"],
            **current_security().librdkafka_config(),
            "linger.ms": 5,
            "acks": "all",
            "compression.type": "none",
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    produce = prod.produce
    # Warm-up: one record per partition (keys after the measured ones), then wait until the
    # query has read them (its first data batch starts the Python workers).
    for p in range(partitions):
        key = b"%010d" % (total + p)
        produce(topic, value=key + tail, key=key, partition=p, on_delivery=on_delivery)
    prod.flush(30)
    deadline = time.monotonic() + 300
    while not Path(spec["go"]).exists():
        if time.monotonic() > deadline:
            print("    producer: the query did not read the warm-up records within 300 s", flush=True)
            return 1
        time.sleep(0.05)
    start_wall_ms = time.time() * 1000
    started = time.monotonic()
    i, behind, last_print = 0, 0.0, started
    while i < total:
        now = time.monotonic()
        due = min(total, int((now - started) * rate) + 1)
        behind = max(behind, (due - i) / rate)
        while i < due:
            key = b"%010d" % i
            try:
                produce(topic, value=key + tail, key=key, partition=i % partitions, on_delivery=on_delivery)
            except BufferError:
                prod.poll(0.01)
                continue
            i += 1
        prod.poll(0)
        if now - last_print >= 10:
            last_print = now
            print(f"    producer: {i:,} / {total:,} records", flush=True)
        time.sleep(0.001)
    remaining = prod.flush(60)
    seconds = time.monotonic() - started
    out = {
        "start_wall_ms": start_wall_ms,
        "produced": i,
        "seconds": seconds,
        "max_behind_s": behind,
        "undelivered": remaining,
        "errors": errors[:5],
    }
    Path(spec["out"]).write_text(json.dumps(out), encoding="utf-8")
    print(
        f"    producer: {i:,} records in {seconds:.1f} s ({i / seconds:,.0f}/s), at most {behind:.3f} s behind",
        flush=True,
    )
    return 0 if not errors and not remaining else 1


# --- the query process --------------------------------------------------------------------------


PROGRESS_KEPT = "spark.sql.streaming.numRecentProgressUpdates"
"""Spark keeps the last 100 batches' progress by default: the run has more."""


def child(spec: dict[str, Any]) -> int:
    """Run the query until it saw ``expected`` records; its latency histogram as JSON into ``out``."""
    import numpy as np
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from sluicegate.spark.job import spark_session

    side, expected, warmup_records = spec["side"], int(spec["expected"]), int(spec["warmup_records"])
    spark = spark_session(
        f"kafka-latency-{side}",
        spec["master"],
        quiet=True,
        extra_conf=spark_extra_conf(side, spec["read_path"], {PROGRESS_KEPT: "100000", **spec["spark_conf"]}),
    )
    df = stream_reader(spark, {**spec, "bounded": False}).load()
    rows = df.select(F.unix_millis("timestamp").alias("t"), F.col("key").cast("string").cast("long").alias("k"))
    state: dict[str, Any] = {"rows": 0, "key_sum": 0, "bad_keys": 0, "hist": Counter(), "batches": []}

    def sink(batch: Any, batch_id: int) -> None:
        began = time.time()
        table = batch.toArrow()
        sink_ms = time.time() * 1000
        n = table.num_rows
        state["batches"].append([batch_id, n, round(sink_ms - began * 1000, 1), sink_ms])
        if n == 0:
            return
        t = table.column("t").to_numpy()
        k = table.column("k")
        state["rows"] += n
        state["key_sum"] += int(pc.sum(k).as_py() or 0)
        state["bad_keys"] += int(pc.sum(pc.or_(pc.less(k, 0), pc.greater_equal(k, expected))).as_py() or 0)
        latency = np.maximum(np.rint(sink_ms - t), 0).astype(np.int64)
        keys = (t // 1000).astype(np.int64) * 10_000_000 + np.minimum(latency, 9_999_999)
        values, counts = np.unique(keys, return_counts=True)
        hist = state["hist"]
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            hist[value] += count

    checkpoint = str(Path(spec["workdir"]) / f"checkpoint-latency-{side}")
    query = (
        rows.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    started = time.monotonic()
    while query.lastProgress is None and query.isActive and time.monotonic() - started < 120:
        time.sleep(0.2)
    Path(spec["started"]).write_text("started", encoding="utf-8")
    print(f"    {side}: query running ({time.monotonic() - started:.1f} s to its first trigger)", flush=True)
    while state["rows"] < warmup_records and query.isActive and time.monotonic() - started < 300:
        time.sleep(0.05)
    Path(spec["ready"]).write_text("ready", encoding="utf-8")
    print(f"    {side}: warm-up records read ({time.monotonic() - started:.1f} s after the start)", flush=True)
    deadline = time.monotonic() + spec["timeout"]
    last_print = time.monotonic()
    while state["rows"] < expected and query.isActive:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
        if time.monotonic() - last_print >= 10:
            last_print = time.monotonic()
            print(f"    {side}: {state['rows']:,} / {expected:,} records at the sink", flush=True)
    failure = str(query.exception()) if query.exception() is not None else ""
    phases = [dict(p.durationMs) for p in query.recentProgress if p.numInputRows > 0]
    query.stop()
    spark.stop()
    out = {
        "rows": state["rows"],
        "key_sum": state["key_sum"],
        "bad_keys": state["bad_keys"],
        "hist": [[key // 10_000_000, key % 10_000_000, count] for key, count in state["hist"].items()],
        "batches": state["batches"],
        "phases": phases,
        "failure": failure,
    }
    Path(spec["out"]).write_text(json.dumps(out), encoding="utf-8")
    return 0


# --- the parent -----------------------------------------------------------------------------------


def percentiles(hist: Sequence[Sequence[int]], from_second: int) -> dict[str, float | int | None]:
    """p50/p90/p99/max latency (ms) of the records whose timestamp's second is >= ``from_second``."""
    counts: Counter[int] = Counter()
    for second, latency, count in hist:
        if second >= from_second:
            counts[latency] += count
    total = sum(counts.values())
    result: dict[str, float | int | None] = {"measured_rows": total}
    if not total:
        return {**result, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(counts.items())
    for name, q in (("p50_ms", 0.50), ("p90_ms", 0.90), ("p99_ms", 0.99)):
        need, seen = q * total, 0
        for latency, count in ordered:
            seen += count
            if seen >= need:
                result[name] = latency
                break
    result["max_ms"] = ordered[-1][0]
    return result


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    from sluicegate.kafka.security import current_security

    return AdminClient({"bootstrap.servers": bootstrap, **current_security().librdkafka_config(), "log_level": 4})


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # held: the futures fail if the client is collected first
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result()


def delete_topic(bootstrap: str, topic: str) -> None:
    try:
        admin = _admin(bootstrap)
        admin.delete_topics([topic])[topic].result()
    except Exception as exc:  # best effort: a left-over topic only takes disk
        print(f"    (could not delete {topic}: {exc})", flush=True)


def run_side(side: str, args: argparse.Namespace, bootstrap: str, workdir: Path) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    topic = f"sluicegate-latency-{stamp}-{side}-{secrets.token_hex(2)}"
    # the executors' read path of the sluicegate sides that read in Python workers
    read_path = side.removeprefix("sluicegate-") if side.startswith("sluicegate-") and side != JVM_SIDE else None
    paced = int(args.rate * args.duration)
    expected = paced + args.partitions  # and one warm-up record per partition
    result: dict[str, Any] = {"side": side, "topic": topic, "expected": expected, "ok": False, "error": ""}
    spec: dict[str, Any] = {
        "side": side,
        "read_path": read_path,
        "bootstrap": bootstrap,
        "topic": topic,
        "master": args.master,
        "max_per_trigger": args.max_per_trigger or None,
        "arrow_batch_rows": args.arrow_batch_rows,
        "parallelism": sluicegate_parallelism(args),
        "parallelism_given": bool(args.parallelism),
        "workdir": str(workdir),
        "expected": expected,
        "timeout": args.duration + args.timeout,
        "out": str(workdir / f"latency-{side}.json"),
        "started": str(workdir / f"started-{side}"),
        "ready": str(workdir / f"ready-{side}"),
        "warmup_records": args.partitions,
        "source": "",
        "client_settings": parse_settings(args.client_setting),
        "spark_conf": parse_settings(args.spark_conf),
        "native_settings": native_settings(side, args),
    }
    prod_spec = {
        "bootstrap": bootstrap,
        "topic": topic,
        "rate": args.rate,
        "duration": args.duration,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "out": str(workdir / f"producer-{side}.json"),
        "go": spec["ready"],
    }
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    env.pop(READ_PATH_ENV, None)
    if read_path is not None:
        env[READ_PATH_ENV] = read_path
    coordinator = query = prod = None
    memory = WorkerMemory()
    try:
        create_topic(bootstrap, topic, args.partitions)
        if is_planned_by_sluicegate(side):
            spec["source"] = f"klat-{secrets.token_hex(3)}"
            log = workdir / f"coordinator-{spec['source']}.log"
            coordinator = start_coordinator(
                spec["source"], topic, bootstrap, args.parallelism or args.partitions, log, bounded=False
            )
        err = (workdir / f"spark-latency-{side}.log").open("wb")
        query = subprocess.Popen([sys.executable, __file__, "--child", json.dumps(spec)], env=env, stderr=err)
        deadline = time.monotonic() + 180
        while not Path(spec["started"]).exists():
            if query.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the query did not start; see {err.name}")
            time.sleep(0.2)
        prod = subprocess.Popen([sys.executable, __file__, "--producer", json.dumps(prod_spec)], env=env)
        deadline = time.monotonic() + args.duration + args.timeout + 60
        while query.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the query process did not end")
            memory.sample(query.pid)
            time.sleep(0.25)
        prod.wait(120)
        if query.returncode != 0 or not Path(spec["out"]).is_file():
            tail = "\n".join(Path(err.name).read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"the query process failed (exit {query.returncode}), {err.name}:\n{tail}")
        produced = json.loads(Path(prod_spec["out"]).read_text())
        got = json.loads(Path(spec["out"]).read_text())
        warm_from = int((produced["start_wall_ms"] + args.warmup * 1000) // 1000) + 1
        result.update(percentiles(got["hist"], warm_from))
        sizes = [b[1] for b in got["batches"] if b[1] > 0]
        collects = sorted(b[2] for b in got["batches"] if b[1] > 0)
        result.update(
            rows=got["rows"],
            produced=produced["produced"],
            producer_rate=produced["produced"] / produced["seconds"],
            producer_max_behind_s=produced["max_behind_s"],
            data_batches=len(sizes),
            median_batch_rows=sorted(sizes)[len(sizes) // 2] if sizes else 0,
            median_sink_job_ms=collects[len(collects) // 2] if collects else None,
            median_phase_ms=median_phases(got.get("phases", [])),
            worker_rss_mb=memory.worker_rss_mb,
            workers_pss_mb=memory.workers_pss_mb,
        )
        want_sum = expected * (expected - 1) // 2
        problems = []
        if produced["produced"] != paced or produced["undelivered"] or produced["errors"]:
            problems.append(f"the producer wrote {produced['produced']:,} of {paced:,} ({produced['errors']})")
        if produced["max_behind_s"] > MAX_BEHIND_S:
            problems.append(f"the producer fell {produced['max_behind_s']:.1f} s behind its schedule")
        if got["rows"] != expected or got["key_sum"] != want_sum or got["bad_keys"]:
            problems.append(
                f"the sink saw {got['rows']:,} records (key sum {got['key_sum']:,}, {got['bad_keys']} out of range), "
                f"expected {expected:,} (key sum {want_sum:,})"
            )
        if got["failure"]:
            problems.append(f"the query failed: {got['failure']}")
        result["error"] = "; ".join(problems)
        result["ok"] = not problems
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for proc in (prod, query):
            if proc is not None and proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait()
        if coordinator is not None:
            stop_process(coordinator)
        delete_topic(bootstrap, topic)
    return result


PHASES = ("latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution")
"""Spark's durationMs parts of a micro-batch, in the order they run (triggerExecution: all)."""


def median_phases(phases: Sequence[dict[str, int]]) -> dict[str, float]:
    """The median ms of each of Spark's micro-batch phases over the batches that read rows."""
    out: dict[str, float] = {}
    for name in PHASES:
        values = sorted(p[name] for p in phases if name in p)
        if values:
            out[name] = float(values[len(values) // 2])
    return out


def fmt_ms(value: Any) -> str:
    return "-" if value is None else f"{value:,.0f}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog="See the module docstring and benchmarks/README.md for the method.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--rate", type=int, default=50_000, help="records/s the producer writes")
    parser.add_argument("--duration", type=float, default=120, help="seconds the producer writes, per side")
    parser.add_argument(
        "--warmup", type=float, default=10, help="seconds of records at the start left out of the figures"
    )
    parser.add_argument("--partitions", type=int, default=8, help="partitions of each fresh topic")
    parser.add_argument(
        "--parallelism",
        type=int,
        default=0,
        help="the sluicegate sides' reader subtasks (default: none given, the query's default: the partitions, "
        "at most the task slots of --master)",
    )
    parser.add_argument(
        "--record-bytes", type=int, default=KEY_BYTES + VALUE_BYTES, help="bytes of key + value a record"
    )
    parser.add_argument(
        "--sides",
        default="",
        help="comma-separated subset of native-defaults, native-tuned, sluicegate-python, sluicegate-native, "
        f"{JVM_SIDE} (default: native-tuned and every available sluicegate read path)",
    )
    parser.add_argument(
        "--max-per-trigger", type=int, default=0, help="maxOffsetsPerTrigger / maxRecordsPerTrigger (0: no limit)"
    )
    parser.add_argument("--arrow-batch-rows", type=int, default=65_536, help="sluicegate's arrowBatchRows")
    parser.add_argument(
        "--tuned", action="append", default=[], metavar="KEY=VALUE", help="an option of native-tuned, repeatable"
    )
    parser.add_argument(
        "--client-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting of sluicegate's consumers",
    )
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting of every query"
    )
    parser.add_argument("--master", default="local[2]", help="Spark master of every query")
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""),
        help="an existing broker (default: $KAFKA_BOOTSTRAP_SERVERS, else the kept local bench broker)",
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds a query may lag behind the producer's end")
    parser.add_argument(
        "--results",
        default="",
        help=f"the results JSON (default: {RESULTS_DIR.relative_to(REPO)}/kafka-latency-<config>-<UTC time>.json)",
    )
    parser.add_argument(
        "--plot",
        default=str(DEFAULT_PLOT.with_name("kafka-source-latency.png")),
        help="the PNG to draw ('' for none); kafka_source.py --replot combines it with throughput results",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if bad := [kv for kv in [*args.client_setting, *args.tuned, *args.spark_conf] if "=" not in kv]:
        parser.error(f"--client-setting, --tuned and --spark-conf take KEY=VALUE, not {bad[0]!r}")
    if args.warmup >= args.duration:
        parser.error("--warmup must be shorter than --duration")
    args.value_bytes = args.record_bytes - KEY_BYTES
    args.native_tuned = {**NATIVE_TUNED, **parse_settings(args.tuned)}
    args.variants = {}
    paths = available_read_paths()
    all_sides = [*NATIVE_SIDES, *(sluicegate_side(p) for p in READ_PATHS)]
    if args.sides:
        args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
        if bad := [s for s in args.sides if s not in all_sides]:
            parser.error(f"unknown side {bad[0]!r}: --sides is a subset of {', '.join(all_sides)}")
        if sluicegate_side("native") in args.sides and "native" not in paths:
            parser.error(f"sluicegate-native needs the module {NATIVE_MODULE}, which does not import here")
        if JVM_SIDE in args.sides and "jvm" not in paths:
            parser.error(f"{JVM_SIDE} needs the JVM read path's jar: make install builds it")
    else:
        args.sides = [NATIVE_TUNED_SIDE, *(sluicegate_side(p) for p in paths)]
    return args


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child(json.loads(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "--producer":
        return producer(json.loads(sys.argv[2]))
    args = parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-kafka-latency-"))
    machine = machine_info()
    results = []
    with bench_broker(args.bootstrap_servers) as bootstrap:
        print(
            f"Kafka {bootstrap}; work directory {workdir}; {args.rate:,} records/s for {args.duration:g} s per side, "
            f"first {args.warmup:g} s left out; load average {machine['load_average'][0]:.1f}",
            flush=True,
        )
        if NATIVE_TUNED_SIDE in args.sides:
            print(f"native-tuned: {', '.join(f'{k}={v}' for k, v in args.native_tuned.items())}", flush=True)
        for n, side in enumerate(args.sides, 1):
            print(f"\n[{n}/{len(args.sides)}] {side}", flush=True)
            result = run_side(side, args, bootstrap, workdir)
            results.append(result)
            print(
                f"  -> {side}: p50 {fmt_ms(result.get('p50_ms'))} ms, p99 {fmt_ms(result.get('p99_ms'))} ms"
                + (f"; {result['error']}" if result["error"] else ""),
                flush=True,
            )
    machine["load_average_end"] = list(os.getloadavg())
    print(
        f"\nlatency, record timestamp -> foreachBatch sink, {args.rate:,} records/s of {args.record_bytes} B over "
        f"{args.partitions} partitions, {args.duration:g} s, first {args.warmup:g} s left out\n"
    )
    header = (
        f"{'side':<18} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'rows measured':>14} "
        f"{'batches':>8} {'rows/batch':>11} {'sink job ms':>11} {'worker RSS MB':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        rss = f"{r.get('worker_rss_mb', 0):,.0f}" if r.get("worker_rss_mb") else "-"
        print(
            f"{r['side']:<18} {fmt_ms(r.get('p50_ms')):>8} {fmt_ms(r.get('p90_ms')):>8} {fmt_ms(r.get('p99_ms')):>8} "
            f"{fmt_ms(r.get('max_ms')):>8} {r.get('measured_rows', 0):>14,} {r.get('data_batches', 0):>8} "
            f"{r.get('median_batch_rows', 0):>11,} {fmt_ms(r.get('median_sink_job_ms')):>11} {rss:>13}"
        )
    print("\nmedian ms per micro-batch that read rows (Spark's durationMs)\n")
    print(f"{'side':<18} " + " ".join(f"{name:>16}" for name in PHASES))
    for r in results:
        medians = r.get("median_phase_ms") or {}
        print(f"{r['side']:<18} " + " ".join(f"{fmt_ms(medians.get(name)):>16}" for name in PHASES))
    print()
    base = next((r for r in results if r["side"] == NATIVE_TUNED_SIDE), None) or next(
        (r for r in results if r["side"] == NATIVE_DEFAULTS), None
    )
    if base and base.get("p50_ms"):
        for r in results:
            if r["side"].startswith("sluicegate-") and r.get("p50_ms") is not None:
                print(
                    f"{r['side']} / {base['side']}: p50 {r['p50_ms'] / max(base['p50_ms'], 1):.2f}x, "
                    f"p99 {r['p99_ms'] / max(base['p99_ms'], 1):.2f}x"
                )
    print()
    code = 0
    for r in results:
        print(f"{r['side']}: {'OK' if r['ok'] else 'WRONG'}" + (f" ({r['error']})" if r["error"] else ""))
        code = code if r["ok"] else 1
    config = {
        "rate": args.rate,
        "duration": args.duration,
        "warmup": args.warmup,
        "partitions": args.partitions,
        "record_bytes": args.record_bytes,
        "sides": args.sides,
        "max_per_trigger": args.max_per_trigger,
        "native_tuned": args.native_tuned,
        "parallelism": sluicegate_parallelism(args),
        "parallelism_given": bool(args.parallelism),
        "client_settings": parse_settings(args.client_setting),
        "spark_conf": parse_settings(args.spark_conf),
        "master": args.master,
    }
    data = {"kind": "latency", "config": config, "machine": machine, "sides": results, "exit_code": code}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"kafka-latency-{args.rate}ps-{args.record_bytes}b-{args.partitions}p-{stamp}.json"
    save_results(data, Path(args.results) if args.results else RESULTS_DIR / name, quiet=False)
    if args.plot:
        plot([data], Path(args.plot))
    if args.keep_logs or code != 0:
        print(f"\nlogs kept in {workdir}")
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
