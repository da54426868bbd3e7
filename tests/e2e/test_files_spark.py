"""The ``files`` connector end to end through Spark: a real coordinator process
(``sluicegate coordinator --connector files``) and a running Spark query
(``readStream.format("sluicegate")``, local[2], memory sink) over a local directory
that grows while it runs (Parquet, CSV and JSON Lines files). The query's rows are
exactly the files' rows: every id once, with its name and time; the audit is clean.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from dead_letters import dead_letters
from processes import Proc, ProcessGroup

from sluicegate.audit.commands import run_audit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300), pytest.mark.spark]

PARALLELISM = 2
ROWS = 5_000
FIRST_FILES = 6
LATER_FILES = 10
SUFFIXES = (".parquet", ".csv", ".jsonl")
SCHEMA = "id BIGINT, name STRING, ts TIMESTAMP"


def write_file(root: Path, k: int) -> None:
    ids = list(range(k * ROWS, (k + 1) * ROWS))
    data = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "ts": pa.array([1_700_000_000_000 + i for i in ids], pa.timestamp("ms", tz="UTC")),
        }
    )
    name = f"{k:04d}{SUFFIXES[k % len(SUFFIXES)]}"
    staging = root / f".{name}"  # hidden until renamed: a file appears whole
    if name.endswith(".parquet"):
        pq.write_table(data, staging, row_group_size=ROWS // 2)
    elif name.endswith(".csv"):
        pacsv.write_csv(data, staging)
    else:
        staging.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in data.to_pylist()))
    os.rename(staging, root / name)


@pytest.fixture(scope="module")
def spark(kafka_bootstrap: str) -> Iterator[Any]:
    from sluicegate.spark.job import spark_session

    session = spark_session("sluicegate-files-e2e", quiet=True)
    yield session
    session.stop()


def coordinator(procs: ProcessGroup, source: str, options: dict[str, str]) -> Proc:
    args = ["coordinator", "--source", source, "--connector", "files", "--max-parallelism", str(PARALLELISM)]
    for key, value in options.items():
        args += ["--option", f"{key}={value}"]
    proc = procs.start(f"coordinator-{source}", args)
    proc.wait_for_log("is serving", timeout_s=90)
    return proc


def test_a_growing_directory_is_read_exactly_once_by_a_running_query(
    spark: Any, procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    root = tmp_path / "in"
    root.mkdir()
    for k in range(FIRST_FILES):
        write_file(root, k)
    (root / "0000-bad.parquet").write_bytes(b"PAR1 not parquet")  # skipped: dead-lettered by the driver
    options = {
        "path": str(root),
        "schema": SCHEMA,
        "event_time_column": "ts",
        "discovery_interval_ms": "300",
        "on_bad_file": "skip",
    }
    coordinator(procs, unique_source, options)
    reader = (
        spark.readStream.format("sluicegate")
        .option("source", unique_source)
        .option("connector", "files")
        .option("parallelism", str(PARALLELISM))
        .option("kafka.bootstrap.servers", kafka_bootstrap)
    )
    for key, value in options.items():
        reader = reader.option(f"option.{key}", value)
    view = f"files_{unique_source.replace('-', '_')}"
    query = reader.load().writeStream.format("memory").queryName(view).trigger(processingTime="1 second").start()

    def wait_for_rows(rows: int, timeout_s: float) -> None:
        started = time.monotonic()
        while True:
            assert query.isActive, f"the query stopped: {query.exception()}"
            if spark.sql(f"SELECT count(*) FROM {view}").collect()[0][0] >= rows:
                return
            assert time.monotonic() - started < timeout_s, f"fewer than {rows} rows after {timeout_s} s"
            time.sleep(0.5)

    started = time.monotonic()
    try:
        wait_for_rows(ROWS, 120)
        print(f"{time.monotonic() - started:5.1f} s  the first rows")
        for k in range(FIRST_FILES, FIRST_FILES + LATER_FILES):
            write_file(root, k)
            time.sleep(0.2)
        files = FIRST_FILES + LATER_FILES
        wait_for_rows(files * ROWS, 120)
        print(f"{time.monotonic() - started:5.1f} s  every row")
        time.sleep(2.0)  # a batch or two more: nothing is read twice
    finally:
        query.stop()

    table = spark.table(view).toArrow()
    assert table.schema.names == ["id", "name", "ts"]
    ids = table.column("id").to_pylist()
    copies = Counter(ids)
    assert len(ids) == files * ROWS and set(copies) == set(range(files * ROWS)), "every row exactly once"
    names = table.column("name").to_pylist()
    times = table.column("ts").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
    assert all(n == f"n{i}" and t == 1_700_000_000_000 + i for i, n, t in zip(ids, names, times, strict=True))
    result = asyncio.run(run_audit(kafka_bootstrap, unique_source))
    assert result.ok, f"audit: {result.first_violation}"
    assert result.summary.splits_assigned == files + 1
    assert [h["sluicegate.origin.topic"] for h in dead_letters(kafka_bootstrap, unique_source)] == [
        str(root / "0000-bad.parquet")
    ]
