"""Spark's native file stream source against the sluicegate ``files`` connector, same files.

    .venv/bin/python benchmarks/file_source.py                 # 200 Parquet files x 100,000 rows
    .venv/bin/python benchmarks/file_source.py --files 200 --rows-per-file 100000 --files-per-batch 20

Writes the files once into a temporary directory (columns ``id BIGINT, value DOUBLE,
name STRING, ts TIMESTAMP``), then runs two queries in one Spark session (``local[2]``
by default), each ``Trigger.AvailableNow`` into ``writeStream.format("noop")``:

1. native: ``spark.readStream.schema(...).parquet(dir)`` with ``maxFilesPerTrigger``;
2. sluicegate: ``readStream.format("sluicegate")`` with connector ``files`` (a real
   coordinator process, a local Kafka broker unless ``--bootstrap-servers``), with
   ``maxRecordsPerTrigger`` = files per batch x rows per file: the same batches.

Native runs first, so both find the Python workers of the session already started only
for sluicegate's second and later batches; the figures are steady state: from the end of
the first batch that read data to the end of the last (the first pays for starting the
Python workers, ~7 s). Prints rows/s of each and the ratio (sluicegate / native).
Exit code 1 if a query's row count is not files x rows per file.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

TARGET_RATIO = 0.8
SCHEMA_DDL = "id BIGINT, value DOUBLE, name STRING, ts TIMESTAMP"


def write_files(root: Path, files: int, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for k in range(files):
        ids = pa.array(range(k * rows, (k + 1) * rows), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "value": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
                "name": pc.binary_join_element_wise("n", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), ""),
                "ts": pc.cast(pc.add(ids, 1_700_000_000_000), pa.timestamp("ms", tz="UTC")),
            }
        )
        pq.write_table(table, root / f"part-{k:05d}.parquet")


def start_coordinator(source: str, options: dict[str, str], bootstrap: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "sluicegate", "coordinator", "--source", source, "--connector", "files"]
    cmd += ["--max-parallelism", options.pop("_parallelism")]
    for key, value in options.items():
        cmd += ["--option", f"{key}={value}"]
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


def run_query(stream: Any, checkpoint: Path, timeout_s: float) -> list[dict[str, Any]]:
    query = stream.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
    query = query.trigger(availableNow=True).start()
    query.awaitTermination(timeout_s)
    if query.isActive:
        query.stop()
        raise RuntimeError(f"the query did not finish within {timeout_s} s")
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    return list(query.recentProgress)


def steady(progress: list[dict[str, Any]]) -> tuple[int, float, float]:
    """(rows in all, steady-state rows/s, rows/s of the whole query)."""

    def end_s(p: dict[str, Any]) -> float:
        stamp = datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()
        return stamp + float((p.get("durationMs") or {}).get("triggerExecution", 0)) / 1000

    def start_s(p: dict[str, Any]) -> float:
        return datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()

    data = [p for p in progress if int(p.get("numInputRows") or 0) > 0]
    rows = sum(int(p["numInputRows"]) for p in data)
    if len(data) < 2:
        return rows, float("nan"), float("nan")
    steady_rows = sum(int(p["numInputRows"]) for p in data[1:])
    return rows, steady_rows / (end_s(data[-1]) - end_s(data[0])), rows / (end_s(data[-1]) - start_s(data[0]))


def run(args: argparse.Namespace) -> int:
    from sluicegate.devtools.broker.local import LocalKafkaBroker
    from sluicegate.spark.job import spark_session

    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-file-bench-"))
    data = workdir / "in"
    data.mkdir()
    total = args.files * args.rows_per_file
    started = time.monotonic()
    write_files(data, args.files, args.rows_per_file)
    print(f"{args.files} Parquet files x {args.rows_per_file:,} rows = {total:,} rows in {data}", end="")
    print(f" (written in {time.monotonic() - started:.1f} s)")
    broker = coordinator = spark = None
    bootstrap = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    try:
        if not bootstrap:
            broker = LocalKafkaBroker(run_dir=workdir / "broker", die_with_parent=True)
            bootstrap = broker.start(timeout_s=180)
        spark = spark_session("sluicegate-file-bench", args.master, quiet=True)
        schema = spark.createDataFrame([], SCHEMA_DDL).schema

        native_stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", str(args.files_per_batch))
        native = run_query(native_stream.parquet(str(data)), workdir / "native-checkpoint", args.timeout)

        source = f"bench-{secrets.token_hex(3)}"
        options = {"path": str(data), "schema": SCHEMA_DDL, "_parallelism": str(args.parallelism)}
        coordinator = start_coordinator(source, dict(options), bootstrap, workdir / "coordinator.log")
        stream = (
            spark.readStream.format("sluicegate")
            .option("source", source)
            .option("connector", "files")
            .option("parallelism", str(args.parallelism))
            .option("kafka.bootstrap.servers", bootstrap)
            .option("maxRecordsPerTrigger", str(args.files_per_batch * args.rows_per_file))
            .option("option.path", str(data))
            .option("option.schema", SCHEMA_DDL)
        )
        ours = run_query(stream.load(), workdir / "sluicegate-checkpoint", args.timeout)
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
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)  # 350 MB of files
    native_rows, native_rate, native_all = steady(native)
    our_rows, our_rate, our_all = steady(ours)
    print(f"native     ({len(native)} batches): {native_rows:,} rows; steady {native_rate:,.0f} rows/s", end="")
    print(f" (all batches {native_all:,.0f} rows/s)")
    print(f"sluicegate ({len(ours)} batches): {our_rows:,} rows; steady {our_rate:,.0f} rows/s", end="")
    print(f" (all batches {our_all:,.0f} rows/s)")
    for name, progress in (("native", native), ("sluicegate", ours)):
        data = [p for p in progress if int(p.get("numInputRows") or 0) > 0][1:]
        parts = []
        for key in ("latestOffset", "walCommit", "addBatch", "commitOffsets", "triggerExecution"):
            values = [float((p.get("durationMs") or {}).get(key, 0)) for p in data]
            if values:
                parts.append(f"{key} {statistics.median(values):.0f}")
        print(f"  {name} per steady batch, median ms: {', '.join(parts)}")
    ratio = our_rate / native_rate
    print(f"ratio sluicegate / native (steady state): {ratio:.2f} (target >= {TARGET_RATIO})")
    ok = native_rows == total and our_rows == total
    print(f"rows: native {native_rows:,}, sluicegate {our_rows:,} of {total:,} -> {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rows-per-file", type=int, default=100_000)
    parser.add_argument("--files-per-batch", type=int, default=20)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap-servers", default="")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (files, logs)")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
