"""Kafka -> Kafka exactly-once copying at a fixed input rate: end-to-end latency, sluicegate against Quix.

    .venv/bin/python benchmarks/stream_latency.py                  # 20,000 records/s for 30 s, identity vs quix
    .venv/bin/python benchmarks/stream_latency.py --rate 5000 --seconds 20 --sides sluicegate-batch,quix

Reuses stream_processor.py (its broker, topics, coordinator, Quix child and venv, functions).
For each side, one at a time: a fresh input topic IN (``--partitions``, 8) and a fresh OUT
(``message.timestamp.type=LogAppendTime``), then the processing side is started and waits:

- ``sluicegate-identity`` / ``sluicegate-batch``: ``sluicegate coordinator --connector kafka``
  on an UNBOUNDED source (``starting_offsets=earliest``, no ``stopping_offsets``) and one
  ``sluicegate reader --output kafka:OUT --checkpoint-interval-ms`` (100 by default: its
  output is committed at each checkpoint, so the interval bounds the latency); ready once the
  reader logged "got N splits" (N > 0);
- ``quix``: stream_processor's Quix child (``processing_guarantee="exactly-once"``) with its
  ``QUIX_SETTINGS`` but ``commit_interval`` 0.1 s (``--quix-commit-interval``; Quix accepts
  it: its EOS transaction is committed at each commit), ``app.run(count=N)``; ready once its
  log says the consumer got its partitions (else after 20 s).

Then the input is produced at ``--rate`` records/s for ``--seconds`` (a token bucket over one
confluent_kafka Producer, ``linger.ms`` 5, ``acks=all``): record i goes to partition i % P with
key ``%010d`` of i and a value of ``--value-bytes`` (100) starting with the produce time in
ms as 13 ASCII digits (also the record's CreateTime). Once OUT holds N records
read_committed (or ``--drain-timeout`` passed) the side is stopped (SIGTERM: the reader
leaves gracefully) and OUT is read read_committed to its end: latency of a record = its
OUT LogAppendTime - the produce time in its value. The first ``--warmup-seconds`` (5) of
input are left out of the percentiles; the check wants N records, N distinct keys.
Topics and control topics are deleted afterwards. Results go to ``--results`` (default
``benchmarks/results/stream-latency-<rate>-<UTC time>.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import stream_processor as sp  # noqa: E402  # type: ignore[import-not-found, unused-ignore]

LATENCY_SIDES = ("sluicegate-identity", "sluicegate-batch", sp.QUIX)
STAMP_DIGITS = 13
GOT_SPLITS = re.compile(r"got (\d+) splits")
QUIX_READY = re.compile(r"assign|waiting for incoming", re.IGNORECASE)


@dataclass
class Latency:
    side: str
    records: int
    produced_s: float = 0.0
    produced_rate: float = 0.0
    out_records: int = 0
    distinct_keys: int = 0
    measured: int = 0
    """Records after the warm-up, in the percentiles."""
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    max_ms: float = float("nan")
    drain_s: float = float("nan")
    """From the last produce to OUT holding N records read_committed."""
    ok: bool = False
    error: str = ""
    logs: list[str] = field(default_factory=list)


def create_input_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    client = sp.admin(bootstrap)
    client.create_topics([NewTopic(topic, partitions, 1)])[topic].result()


def wait_for(log: Path, proc: subprocess.Popen[bytes], ready: Any, timeout_s: float) -> bool:
    """Wait until ``ready(log text)``; False on timeout, an exception if the process exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready(log.read_text(errors="replace")):
            return True
        if proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode} before it was ready:\n{tail(log)}")
        time.sleep(0.1)
    return False


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def got_splits(text: str) -> bool:
    return any(int(m.group(1)) > 0 for m in GOT_SPLITS.finditer(text))


def produce(bootstrap: str, topic: str, rate: int, seconds: float, partitions: int, value_bytes: int) -> float:
    """Produce rate * seconds records at ``rate``/s; returns the epoch second of the last produce."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 3, "enable.idempotence": True}
    )
    total = int(rate * seconds)
    pad = b"x" * (value_bytes - STAMP_DIGITS)
    start = time.monotonic()
    i = 0
    while i < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        while i < due:
            now_ms = time.time_ns() // 1_000_000
            value = b"%013d" % now_ms + pad
            while True:
                try:
                    producer.produce(topic, value, b"%010d" % i, partition=i % partitions, timestamp=now_ms)
                    break
                except BufferError:
                    producer.poll(0.01)
            i += 1
        producer.poll(0)
        time.sleep(0.0005)
    last = time.time()
    if producer.flush(60) != 0:
        raise RuntimeError("the producer did not deliver everything within 60 s")
    return last


def consumer(bootstrap: str, eof: bool) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "log_level": 3,
            "group.id": f"sluicegate-latency-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": eof,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def wait_for_output(bootstrap: str, topic: str, records: int, timeout_s: float) -> bool:
    """Count OUT's records read_committed until there are ``records`` (True) or the time is up."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, eof=False)
    try:
        partitions = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen = 0
        deadline = time.monotonic() + timeout_s
        while seen < records and time.monotonic() < deadline:
            seen += sum(1 for m in c.consume(10_000, timeout=0.2) if m.error() is None)
        return seen >= records
    finally:
        c.close()


def measure(bootstrap: str, topic: str, records: int, warmup_end_ms: int, res: Latency) -> None:
    """Read OUT read_committed to its end: the check and the latencies (LogAppendTime - value's stamp)."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, TopicPartition

    c = consumer(bootstrap, eof=True)
    seen = bytearray(records)
    latencies: list[int] = []
    try:
        partitions = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 300
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} did not reach its end within 300 s")
            for m in c.consume(10_000, timeout=1.0):
                error = m.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {error}")
                    at_end.add(m.partition())
                    continue
                res.out_records += 1
                i = int(m.key())
                if 0 <= i < records and not seen[i]:
                    seen[i] = 1
                    res.distinct_keys += 1
                kind, appended = m.timestamp()
                if kind != TIMESTAMP_LOG_APPEND_TIME:
                    raise RuntimeError(f"{topic} has no LogAppendTime timestamps")
                produced = int(m.value()[:STAMP_DIGITS])
                if produced >= warmup_end_ms:
                    latencies.append(appended - produced)
    finally:
        c.close()
    res.measured = len(latencies)
    if latencies:
        latencies.sort()
        res.p50_ms = float(latencies[len(latencies) // 2])
        res.p99_ms = float(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))])
        res.max_ms = float(latencies[-1])
    res.ok = res.out_records == records and res.distinct_keys == records


def start(cmd: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as handle:
        return subprocess.Popen(cmd, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd)


def run_side(side: str, args: argparse.Namespace, bootstrap: str, workdir: Path) -> Latency:
    records = int(args.rate * args.seconds)
    res = Latency(side, records)
    run = f"{side}-{uuid.uuid4().hex[:8]}"
    topic_in, topic_out = f"splat-in-{run}", f"splat-out-{run}"
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(workdir), os.environ.get("PYTHONPATH", "")) if p)
    log = workdir / f"{run}.log"
    res.logs.append(str(log))
    coordinator: subprocess.Popen[bytes] | None = None
    proc: subprocess.Popen[bytes] | None = None
    source = ""
    try:
        create_input_topic(bootstrap, topic_in, args.partitions)
        sp.create_output_topic(bootstrap, topic_out, args.partitions)
        if side == sp.QUIX:
            settings = json.loads(json.dumps(sp.QUIX_SETTINGS))
            settings["commit_interval"] = args.quix_commit_interval
            spec = {
                "bootstrap": bootstrap,
                "group": f"splat-{run}",
                "input": topic_in,
                "output": topic_out,
                "records": records,
                "partitions": args.partitions,
                "idle_timeout_s": args.seconds + args.drain_timeout + 60,
                "settings": settings,
            }
            proc = start([args.quix_python, sp.__file__, "--quix-child", json.dumps(spec)], env, log, workdir)
            if not wait_for(log, proc, QUIX_READY.search, 20):
                print("  (quix: no assignment line in its log within 20 s: a fixed 20 s warm-up)", flush=True)
            time.sleep(2)
        else:
            source = f"splat-{uuid.uuid4().hex[:10]}"
            options = [f"topics={topic_in}", f"bootstrap_servers={bootstrap}", "starting_offsets=earliest"]
            option_args = [a for o in options for a in ("--option", o)]
            coordinator_log = workdir / f"{run}-coordinator.log"
            res.logs.append(str(coordinator_log))
            coordinator = sp.start_coordinator(source, 1, option_args, bootstrap, coordinator_log, workdir)
            cmd = [sys.executable, "-m", "sluicegate", "reader", "--source", source, "--subtask", "0"]
            cmd += ["--connector", "kafka", *option_args, "--output", f"kafka:{topic_out}"]
            cmd += ["--max-batch", str(args.max_batch), "--checkpoint-interval-ms", str(args.checkpoint_interval_ms)]
            if side in sp.PROCESS_FUNCTIONS:
                cmd += ["--process", sp.PROCESS_FUNCTIONS[side]]
            proc = start(cmd, env, log, workdir)
            if not wait_for(log, proc, got_splits, 120):
                raise RuntimeError(f"the reader got no splits within 120 s:\n{tail(log)}")
            time.sleep(1)
        started = time.time()
        warmup_end_ms = int((started + args.warmup_seconds) * 1000)
        last = produce(bootstrap, topic_in, args.rate, args.seconds, args.partitions, args.value_bytes)
        res.produced_s = last - started
        res.produced_rate = records / res.produced_s if res.produced_s > 0 else float("nan")
        if wait_for_output(bootstrap, topic_out, records, args.drain_timeout):
            res.drain_s = time.time() - last
        else:
            res.error = f"OUT did not hold {records:,} records within {args.drain_timeout} s"
        if proc.poll() is None:
            sp.stop_process(proc)
        if proc.returncode not in (0, None) and side != sp.QUIX:
            res.error = res.error or f"the reader exited {proc.returncode}:\n{tail(log)}"
        measure(bootstrap, topic_out, records, warmup_end_ms, res)
        res.ok = res.ok and not res.error
    except Exception as exc:
        res.error = res.error or f"{type(exc).__name__}: {exc}"
    finally:
        for p in (proc, coordinator):
            if p is not None:
                sp.stop_process(p)
        with contextlib.suppress(Exception):
            doomed = [topic_in, topic_out]
            if source:
                from sluicegate.protocol.topics import ControlTopics

                doomed += ControlTopics.for_source(source).all()
            sp.delete_topics(bootstrap, doomed)
    return res


def report(results: list[Latency], args: argparse.Namespace) -> int:
    print(
        f"\n{args.rate:,} records/s x {args.seconds:g} s of {10 + args.value_bytes} B "
        f"over {args.partitions} partitions, "
        f"Kafka -> Kafka exactly once; latency = OUT LogAppendTime - produce time (ms), first "
        f"{args.warmup_seconds:g} s left out; sluicegate checkpoint {args.checkpoint_interval_ms} ms, "
        f"quix commit_interval {args.quix_commit_interval:g} s\n"
    )
    header = (
        f"{'side':<20} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'p50 x quix':>10} {'p99 x quix':>10} {'measured':>9} {'check':>28}"
    )
    print(header)
    print("-" * len(header))
    quix = next((r for r in results if r.side == sp.QUIX and r.ok), None)
    code = 0
    for r in results:
        check = f"{r.out_records:,} rec, {r.distinct_keys:,} keys {'OK' if r.ok else 'WRONG'}"
        r50 = f"{r.p50_ms / quix.p50_ms:.2f}x" if quix and quix.p50_ms > 0 else "-"
        r99 = f"{r.p99_ms / quix.p99_ms:.2f}x" if quix and quix.p99_ms > 0 else "-"
        print(
            f"{r.side:<20} {r.p50_ms:>8.0f} {r.p99_ms:>8.0f} {r.max_ms:>8.0f} "
            f"{r50:>10} {r99:>10} {r.measured:>9,} {check:>28}"
        )
        if not r.ok:
            code = 1
    print("\nx quix: the side's latency / Quix's (< 1: the side is faster)")
    for r in results:
        print(
            f"{r.side}: produced at {r.produced_rate:,.0f} records/s; "
            f"OUT complete {r.drain_s:.1f} s after the last produce"
        )
        if r.error:
            print(f"  FAILED: {r.error}")
    return code


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=20_000, help="input records per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of input")
    parser.add_argument(
        "--sides", default="sluicegate-identity,quix", help=f"comma-separated of {', '.join(LATENCY_SIDES)}"
    )
    parser.add_argument("--checkpoint-interval-ms", type=int, default=100, help="the sluicegate reader's")
    parser.add_argument("--quix-commit-interval", type=float, default=0.1, help="Quix's commit_interval (s)")
    parser.add_argument("--max-batch", type=int, default=10_000, help="the sluicegate reader's --max-batch")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes of each value (keys are 10 bytes)")
    parser.add_argument("--warmup-seconds", type=float, default=5.0, help="input seconds left out of the percentiles")
    parser.add_argument("--drain-timeout", type=float, default=120.0, help="seconds to wait for OUT after producing")
    parser.add_argument("--quix-python", default="", help="the quix side's interpreter (default: stream_processor's)")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    parser.add_argument("--results", default="", help="results JSON (default benchmarks/results/stream-latency-...)")
    args = parser.parse_args()
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if bad := [s for s in args.sides if s not in LATENCY_SIDES]:
        parser.error(f"unknown side {bad[0]!r}: --sides is a subset of {', '.join(LATENCY_SIDES)}")
    if args.value_bytes < STAMP_DIGITS:
        parser.error(f"--value-bytes is at least {STAMP_DIGITS}")
    return args


def main() -> int:
    args = parse_args()
    from kafka_clients import bench_broker  # type: ignore[import-not-found, unused-ignore]

    if sp.QUIX in args.sides:
        args.quix_python = args.quix_python or sp.default_quix_python()
        print(f"quix: quixstreams {sp.quix_version(args.quix_python)} with {args.quix_python}", flush=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(args.results) if args.results else sp.RESULTS_DIR / f"stream-latency-{args.rate}-{stamp}.json"
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-latency-bench-"))
    (workdir / "benchfns.py").write_text(sp.FUNCTIONS, encoding="utf-8")
    results: list[Latency] = []
    with bench_broker(args.bootstrap_servers) as bootstrap:
        print(f"Kafka {bootstrap}; sluicegate read path {sp.read_path()}; work directory {workdir}", flush=True)
        for side in args.sides:
            print(f"\n{side}: {args.rate:,} records/s for {args.seconds:g} s", flush=True)
            res = run_side(side, args, bootstrap, workdir)
            print(
                f"  -> p50 {res.p50_ms:.0f} ms, p99 {res.p99_ms:.0f} ms"
                + (f"; FAILED: {res.error}" if res.error else "")
            )
            results.append(res)
    code = report(results, args)
    config = {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list))}
    data = {
        "kind": "stream-latency",
        "config": config,
        "when": stamp,
        "load_average": list(os.getloadavg()),
        "results": [
            {k: (None if isinstance(v, float) and v != v else v) for k, v in asdict(r).items()} for r in results
        ],
        "exit_code": code,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    print(f"results saved to {path}")
    if code == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"logs kept in {workdir}")
    return code


if __name__ == "__main__":
    sys.exit(main())
