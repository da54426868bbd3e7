"""Rows/s through the sluicegate Spark source into a no-op sink, and per-batch planning overhead.

    .venv/bin/python benchmarks/spark_source.py                       # 64 splits x 200,000 = 12.8M rows
    .venv/bin/python benchmarks/spark_source.py --splits 64 --records-per-split 200000 \\
        --max-records-per-trigger 4000000 --parallelism 4 --bootstrap-servers 127.0.0.1:9092

A real coordinator process (``sluicegate coordinator``), a local Kafka broker (unless
``--bootstrap-servers`` / ``KAFKA_BOOTSTRAP_SERVERS``), Spark in local mode
(``local[2]`` by default), ``format("sluicegate")`` -> ``writeStream.format("noop")``
with ``Trigger.AvailableNow``. Reports, from Spark's progress events:

- rows/s over the whole run and in steady state (from the end of the first batch
  that read data, which pays for starting the Python workers, to the end);
- per batch: Spark's ``latestOffset`` time (our planning, including the wait for
  the coordinator's first assignment), ``queryPlanning``, ``walCommit``, and the
  total trigger time of batches that read no data (the fixed cost of a batch);
- the source's own planning cost measured in-process: ``plan_next`` +
  ``ranges_between`` for the same number of splits.

Exit code 1 if the row count is not exactly splits x records_per_split.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_ROWS_PER_S = 1_000_000


def _start_coordinator(source: str, args: argparse.Namespace, bootstrap: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "sluicegate",
        "coordinator",
        "--source",
        source,
        "--connector",
        "sequence",
        "--max-parallelism",
        str(args.parallelism),
        "--option",
        f"splits={args.splits}",
        "--option",
        f"records_per_split={args.records_per_split}",
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
    raise RuntimeError(f"the coordinator did not start:\n{log.read_text(errors='replace')[-3000:]}")


def _planning_cost(splits: int, parallelism: int, rounds: int = 50) -> float:
    """Milliseconds per batch for plan_next + ranges_between over ``splits`` splits."""
    from sluicegate.spark.offsets import OwnedSplit, SourceOffset, SubtaskView, plan_next, ranges_between

    views = {
        s: SubtaskView(
            1,
            1,
            1,
            False,
            tuple(
                OwnedSplit(
                    f"seq-{k:05d}",
                    {"split_id": f"seq-{k:05d}", "start": k * 10**9, "end": (k + 1) * 10**9, "position": k * 10**9},
                    1,
                    k * 10**9,
                    (k + 1) * 10**9,
                )
                for k in range(s, splits, parallelism)
            ),
        )
        for s in range(parallelism)
    }
    offset = plan_next(SourceOffset(1), views, None, lambda o, base: base + 1000)
    started = time.perf_counter()
    for _ in range(rounds):
        nxt = plan_next(offset, views, 10**6, lambda o, base: base + 1000)
        ranges_between(offset, nxt)
        SourceOffset.from_json(nxt.to_json())
        offset = nxt
    return (time.perf_counter() - started) / rounds * 1000


def run(args: argparse.Namespace) -> int:
    from sluicegate.devtools.broker.local import LocalKafkaBroker
    from sluicegate.spark.job import spark_session

    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-spark-bench-"))
    source = f"bench-{secrets.token_hex(3)}"
    total = args.splits * args.records_per_split
    broker = None
    bootstrap = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    coordinator = None
    spark = None
    try:
        if not bootstrap:
            broker = LocalKafkaBroker(run_dir=workdir / "broker", die_with_parent=True)
            bootstrap = broker.start(timeout_s=180)
        print(f"Kafka {bootstrap}; source {source}: {args.splits} splits x {args.records_per_split:,} = {total:,} rows")
        coordinator = _start_coordinator(source, args, bootstrap, workdir / "coordinator.log")
        spark = spark_session("sluicegate-bench", args.master, quiet=True)
        reader = (
            spark.readStream.format("sluicegate")
            .option("source", source)
            .option("parallelism", str(args.parallelism))
            .option("kafka.bootstrap.servers", bootstrap)
            .option("option.splits", str(args.splits))
            .option("option.records_per_split", str(args.records_per_split))
            .option("arrowBatchRows", str(args.arrow_batch_rows))
        )
        if args.max_records_per_trigger:
            reader = reader.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
        started = time.monotonic()
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(args.timeout)
        elapsed = time.monotonic() - started
        if query.isActive:
            query.stop()
            raise RuntimeError(f"the query did not finish within {args.timeout} s")
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        progress: list[dict[str, Any]] = list(query.recentProgress)
    finally:
        if spark is not None:
            spark.stop()
        if coordinator is not None and coordinator.poll() is None:
            coordinator.send_signal(signal.SIGTERM)
            try:
                coordinator.wait(20)
            except subprocess.TimeoutExpired:
                coordinator.kill()
        if broker is not None:
            broker.stop()
    return report(args, progress, elapsed, total)


def report(args: argparse.Namespace, progress: list[dict[str, Any]], elapsed: float, total: int) -> int:
    rows = sum(int(p.get("numInputRows") or 0) for p in progress)
    data = [p for p in progress if int(p.get("numInputRows") or 0) > 0]
    empty = [p for p in progress if int(p.get("numInputRows") or 0) == 0]

    def ms(p: dict[str, Any], key: str) -> float:
        return float((p.get("durationMs") or {}).get(key, 0))

    def end_s(p: dict[str, Any]) -> float:
        from datetime import datetime

        stamp = datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()
        return stamp + ms(p, "triggerExecution") / 1000

    print(f"\n{len(progress)} batches ({len(data)} with data), {rows:,} rows in {elapsed:.1f} s (query start to end)")
    print(f"overall: {rows / elapsed:,.0f} rows/s")
    if len(data) >= 2:
        steady_rows = sum(int(p["numInputRows"]) for p in data[1:])
        steady_s = end_s(data[-1]) - end_s(data[0])
        print(
            f"steady state (after the first data batch): {steady_rows:,} rows in {steady_s:.1f} s = "
            f"{steady_rows / steady_s:,.0f} rows/s"
        )
        per_batch = [int(p["numInputRows"]) / (ms(p, "triggerExecution") / 1000) for p in data[1:]]
        print(f"per data batch: median {statistics.median(per_batch):,.0f} rows/s, max {max(per_batch):,.0f} rows/s")
    for key in (
        "latestOffset",
        "queryPlanning",
        "walCommit",
        "getBatch",
        "commitOffsets",
        "addBatch",
        "triggerExecution",
    ):
        values = [ms(p, key) for p in data[1:] or data]
        if values:
            print(f"  {key:>16}: median {statistics.median(values):7.0f} ms, max {max(values):7.0f} ms (data batches)")
    if empty:
        values = [ms(p, "triggerExecution") for p in empty]
        print(f"  batches without data: {len(empty)}, median trigger {statistics.median(values):.0f} ms")
    print(
        f"source planning in-process (plan_next + ranges_between + JSON) for {args.splits} splits: "
        f"{_planning_cost(args.splits, args.parallelism):.2f} ms/batch"
    )
    ok = rows == total
    print(f"rows: {rows:,} of {total:,} expected -> {'OK' if ok else 'WRONG'}")
    if len(data) >= 2:
        goal = "met" if steady_rows / steady_s >= GOAL_ROWS_PER_S else "missed"
        print(f"goal >= {GOAL_ROWS_PER_S:,} rows/s in steady state: {goal}")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", type=int, default=64)
    parser.add_argument("--records-per-split", type=int, default=200_000)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--max-records-per-trigger", type=int, default=2_000_000)
    parser.add_argument("--arrow-batch-rows", type=int, default=65_536)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap-servers", default="")
    parser.add_argument("--timeout", type=float, default=900)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
