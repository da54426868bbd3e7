"""What a micro-batch costs Spark for any Python streaming source: the floor under sluicegate's latency.

    .venv/bin/python benchmarks/python_source_floor.py                       # 50,000 rows/s, 60 s a side, 2 runs each
    .venv/bin/python benchmarks/python_source_floor.py --duration 20 --repetitions 1   # a smoke run

Two sources that make the same rows the same way, with no Kafka and no sluicegate code:

- ``jvm-rate``: Spark's own ``rate`` source (``rowsPerSecond``, ``numPartitions`` 2), in the JVM;
- ``python-rate``: a Python data source (``pyspark.sql.datasource``) that does what ``rate``
  does: its offset is the last whole second since the start (``rate``'s offsets are whole
  seconds too, so both make a micro-batch of ``--rate`` rows each second), a micro-batch
  covers its rows in 2 input partitions, and each partition's ``read`` yields them as one
  ``pyarrow.RecordBatch`` (``timestamp``, ``value``), each row stamped with the ms it
  stands for.

Each side in its own process and SparkSession (``local[2]``, made as kafka_latency.py makes
its sides', with Spark's local file system checkpoint manager as in its fastest runs), ``trigger(processingTime="0
seconds")``, into a ``foreachBatch`` sink that collects ``unix_millis(timestamp)`` as Arrow and
takes each row's latency as the sink's clock minus that stamp, as kafka_latency.py does. The
sides alternate, ``--repetitions`` runs each; the first ``--warmup`` seconds of each run are
left out. Prints per side p50/p99 latency and the median of Spark's own phases per batch
(``durationMs``), and the Python side's ratio and difference: what Spark's machinery for a
Python source adds to every micro-batch, whatever the source reads.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

SIDES = ("jvm-rate", "python-rate")
PHASES = ("latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution")
FS_CHECKPOINTS = {
    # Without Hadoop's native library, FileContext's rename forks a `readlink` per file
    # (benchmarks/README.md, kafka_latency.py): the same setting for both sides.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
}


# --- the Python source (what python-rate reads) -------------------------------------------------


def register_python_rate(spark: Any) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class RatePartition(InputPartition):
        """Rows ``first + index``, ``first + index + parts`` ... below ``last``: row r stands
        for ms ``origin_ms + r / per_ms`` (all decided on the driver: ``read`` runs on a copy
        of the reader made anew on the executor)."""

        def __init__(self, first: int, last: int, index: int, parts: int, origin_ms: int, per_ms: float) -> None:
            self.first, self.last, self.index, self.parts = first, last, index, parts
            self.origin_ms, self.per_ms = origin_ms, per_ms

    class PythonRateReader(DataSourceStreamReader):
        def __init__(self, rows_per_second: int) -> None:
            self.per_ms = rows_per_second / 1000
            self.started_ms = int(time.time() * 1000)

        def initialOffset(self) -> dict[str, Any]:
            return {"ms": self.started_ms, "origin_ms": self.started_ms}

        def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
            # everything up to the last whole second since the start, as Spark's rate source
            origin = start["origin_ms"]
            now = int(time.time() * 1000)
            return {"ms": origin + (now - origin) // 1000 * 1000, "origin_ms": origin}

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[Any]:
            origin = start["origin_ms"]
            first = int((start["ms"] - origin) * self.per_ms)
            last = int((end["ms"] - origin) * self.per_ms)
            return [RatePartition(first, last, i, 2, origin, self.per_ms) for i in range(2)]

        def read(self, partition: Any) -> Iterator[Any]:
            p = partition
            values = pa.array(range(p.first + p.index, p.last, p.parts), pa.int64())
            stamps_ms = pc.add(
                pc.cast(pc.floor(pc.divide(pc.cast(values, pa.float64()), p.per_ms)), pa.int64()), p.origin_ms
            )
            stamps = pc.cast(pc.multiply(stamps_ms, 1000), pa.timestamp("us", tz="UTC"))
            yield pa.RecordBatch.from_arrays([stamps, values], names=["timestamp", "value"])

        def commit(self, end: dict[str, Any]) -> None:
            pass

    class PythonRate(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python_rate"

        def schema(self) -> str:
            return "timestamp timestamp, value long"

        def streamReader(self, schema: Any) -> PythonRateReader:
            return PythonRateReader(int(self.options["rowsPerSecond"]))

    spark.dataSource.register(PythonRate)


# --- one side, in its own process ---------------------------------------------------------------


def child(spec: dict[str, Any]) -> int:
    import numpy as np
    from pyspark.sql import functions as F

    from sluicegate.spark.job import spark_session

    # the session kafka_latency.py's sides get (Python workers run this interpreter)
    spark = spark_session(f"python-source-floor-{spec['side']}", "local[2]", quiet=True, extra_conf=FS_CHECKPOINTS)
    rate = str(spec["rate"])
    if spec["side"] == "jvm-rate":
        df = spark.readStream.format("rate").option("rowsPerSecond", rate).option("numPartitions", "2").load()
    else:
        register_python_rate(spark)
        df = spark.readStream.format("python_rate").option("rowsPerSecond", rate).load()
    rows = df.select(F.unix_millis("timestamp").alias("t"))
    hist: Counter[int] = Counter()
    warm_until_ms = time.time() * 1000 + spec["warmup"] * 1000

    def sink(batch: Any, batch_id: int) -> None:
        table = batch.toArrow()
        sink_ms = time.time() * 1000
        if table.num_rows == 0:
            return
        t = table.column("t").to_numpy()
        latency = np.maximum(np.rint(sink_ms - t[t >= warm_until_ms]), 0).astype(np.int64)
        values, counts = np.unique(latency, return_counts=True)
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            hist[value] += count

    query = (
        rows.writeStream.foreachBatch(sink)
        .option("checkpointLocation", spec["checkpoint"])
        .trigger(processingTime="0 seconds")
        .start()
    )
    time.sleep(spec["warmup"] + spec["duration"])
    failure = str(query.exception()) if query.exception() is not None else ""
    phases = [
        dict(p.durationMs)
        for p in query.recentProgress
        if p.numInputRows > 0 and _epoch_ms(p.timestamp) >= warm_until_ms
    ]
    query.stop()
    spark.stop()
    out = {"hist": sorted(hist.items()), "phases": phases, "failure": failure}
    Path(spec["out"]).write_text(json.dumps(out), encoding="utf-8")
    return 0


def _epoch_ms(iso: str) -> float:
    """A progress report's ``timestamp`` (ISO 8601, UTC) in ms since the epoch."""
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


# --- the parent ---------------------------------------------------------------------------------


def run_side(side: str, args: argparse.Namespace, workdir: Path, run: int) -> dict[str, Any]:
    out = workdir / f"{side}-{run}.json"
    spec = {
        "side": side,
        "rate": args.rate,
        "duration": args.duration,
        "warmup": args.warmup,
        "checkpoint": str(workdir / f"checkpoint-{side}-{run}"),
        "out": str(out),
    }
    print(f"  {side}, run {run + 1}: {args.warmup + args.duration:.0f} s", flush=True)
    subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], check=True)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    if result["failure"]:
        raise SystemExit(f"{side}: the query failed: {result['failure']}")
    return result


def percentile(hist: Sequence[Sequence[int]], q: float) -> float | None:
    total = sum(count for _, count in hist)
    if total == 0:
        return None
    rank, seen = q * (total - 1), 0
    for value, count in sorted((v, c) for v, c in hist):
        seen += count
        if seen > rank:
            return float(value)
    return float(hist[-1][0])


def median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    hist: Counter[int] = Counter()
    phases: list[dict[str, int]] = []
    for result in results:
        for value, count in result["hist"]:
            hist[value] += count
        phases += result["phases"]
    pairs = sorted(hist.items())
    return {
        "rows": sum(hist.values()),
        "batches": len(phases),
        "p50": percentile(pairs, 0.50),
        "p99": percentile(pairs, 0.99),
        **{name: median([p[name] for p in phases if name in p]) for name in PHASES},
    }


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rate", type=int, default=50_000, help="rows per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured per run")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds left out at each run's start")
    parser.add_argument("--repetitions", type=int, default=2, help="runs per side, the sides alternating")
    parser.add_argument("--results", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    per_side: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="python-source-floor-") as tmp:
        for run in range(args.repetitions):
            order = SIDES if run % 2 == 0 else tuple(reversed(SIDES))
            for side in order:
                per_side[side].append(run_side(side, args, Path(tmp), run))
    figures = {side: summarize(results) for side, results in per_side.items()}
    print(f"\n{args.rate:,} rows/s, 2 partitions, local[2], {args.repetitions} x {args.duration:.0f} s a side")
    header = ["side", "rows", "batches", "p50 ms", "p99 ms", *PHASES]
    print("  ".join(f"{h:>16}" for h in header))
    for side, f in figures.items():
        cells = [side, f"{f['rows']:,}", f"{f['batches']:,}", fmt(f["p50"]), fmt(f["p99"])]
        cells += [fmt(f[name]) for name in PHASES]
        print("  ".join(f"{c:>16}" for c in cells))
    jvm, py = figures["jvm-rate"], figures["python-rate"]
    diffs = ["python - jvm", "", ""]
    for name in ("p50", "p99", *PHASES):
        a, b = jvm[name], py[name]
        diffs.append("-" if a is None or b is None else f"{b - a:+,.0f}")
    print("  ".join(f"{c:>16}" for c in diffs))
    if jvm["p50"] and py["p50"] and jvm["p99"] and py["p99"]:
        print(f"python-rate / jvm-rate: p50 {py['p50'] / jvm['p50']:.2f}x, p99 {py['p99'] / jvm['p99']:.2f}x")
    if args.results:
        args.results.write_text(json.dumps({"args": vars(args) | {"results": str(args.results)}, "figures": figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
