"""The ``files`` connector over real Kafka and real processes: a coordinator process
and ``sluicegate reader`` processes copying a growing directory to ``kafka:OUT``.

The oracle is the input: file ``k`` holds the rows with ids ``k*ROWS .. (k+1)*ROWS - 1``
(Parquet, CSV and JSON Lines in turn), and OUT read ``read_committed`` must hold every
id exactly once, from the split of the file that holds it. The same test runs on the
local filesystem and on an S3 endpoint (moto's server, tests/support/s3_fixture.py)
through s3fs. The audit of the control topics is clean.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from dead_letters import dead_letters
from kafka_data import COORDINATOR_TIMEOUTS, READER_TIMING, OutputReader, audit_ok, create_topic, option_args
from processes import Proc, ProcessGroup
from s3_fixture import SECRET_KEY, S3Endpoint, s3_endpoint

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]
__all__ = ["s3_endpoint"]

SCHEMA = "id BIGINT, name STRING, ts TIMESTAMP"
ROWS = 2_000
FIRST_FILES = 12
LATER_FILES = 18
AFTER_RESTART_FILES = 4
READERS = 3
SUFFIXES = (".parquet", ".csv", ".jsonl")


def table(k: int) -> pa.Table:
    ids = list(range(k * ROWS, (k + 1) * ROWS))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "ts": pa.array([1_700_000_000_000 + i for i in ids], pa.timestamp("ms", tz="UTC")),
        }
    )


def encode(name: str, data: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    if name.endswith(".parquet"):
        pq.write_table(data, sink, row_group_size=ROWS // 4)
    elif name.endswith(".csv"):
        pacsv.write_csv(data, sink)
    else:
        return b"".join(orjson.dumps(r) + b"\n" for r in data.to_pylist())
    return bytes(sink.getvalue().to_pybytes())


class DataDir:
    """Where the test writes files (each appears whole: a local file is renamed into
    place, an S3 object exists once its upload completes) and the connector options to
    read them."""

    def __init__(self, url: str, put: Callable[[str, bytes], None], storage: dict[str, str]) -> None:
        self.url = url
        self._put = put
        self.storage = storage

    def write(self, name: str, data: bytes) -> None:
        self._put(name, data)

    def write_file(self, k: int) -> None:
        name = f"{k:04d}{SUFFIXES[k % len(SUFFIXES)]}"
        self.write(name, encode(name, table(k)))

    def options(self, **more: str) -> dict[str, str]:
        return {"path": self.url, "schema": SCHEMA, "event_time_column": "ts", **self.storage, **more}


@pytest.fixture(params=["local", "s3"])
def data_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DataDir]:
    if request.param == "local":
        root = tmp_path / "in"
        root.mkdir()

        def put_local(name: str, data: bytes) -> None:
            staging = root / f".{name}.tmp"  # hidden: not listed until renamed
            staging.write_bytes(data)
            os.rename(staging, root / name)

        yield DataDir(str(root), put_local, {})
        return
    endpoint: S3Endpoint = request.getfixturevalue("s3_endpoint")
    bucket = endpoint.new_bucket()
    fs = endpoint.filesystem()

    def put_s3(name: str, data: bytes) -> None:
        fs.pipe(f"{bucket}/in/{name}", data)

    yield DataDir(f"s3://{bucket}/in", put_s3, endpoint.storage_options())


def coordinator(procs: ProcessGroup, source: str, options: dict[str, str]) -> Proc:
    args = [
        *("coordinator", "--source", source, "--connector", "files", "--max-parallelism", str(READERS)),
        *option_args(options),
        *COORDINATOR_TIMEOUTS,
    ]
    proc = procs.start(f"coordinator-{len(procs.procs)}", args)
    proc.wait_for_log("is serving", timeout_s=90)
    return proc


def reader(procs: ProcessGroup, source: str, subtask: int, options: dict[str, str], out: str) -> Proc:
    args = [
        *("reader", "--source", source, "--subtask", str(subtask), "--connector", "files"),
        *("--output", f"kafka:{out}", "--output-format", "envelope"),
        *option_args(options),
        *READER_TIMING,
    ]
    return procs.start(f"reader-{subtask}-{len(procs.procs)}", args)


def check_exactly_once(rows: list[dict[str, Any]], files: int) -> None:
    copies = Counter(row["value"]["id"] for row in rows)
    twice = sorted(i for i, n in copies.items() if n > 1)
    missing = sorted(set(range(files * ROWS)) - copies.keys())
    foreign = sorted(copies.keys() - set(range(files * ROWS)))
    wrong = [
        row["split_id"]
        for row in rows
        if not row["split_id"].rsplit("/", 1)[-1].startswith(f"{row['value']['id'] // ROWS:04d}.")
        or row["event_time_ms"] != 1_700_000_000_000 + row["value"]["id"]
    ]
    assert not (twice or missing or foreign or wrong), (
        f"{len(missing)} ids missing (e.g. {missing[:5]}), {len(twice)} twice (e.g. {twice[:5]}), "
        f"{len(foreign)} foreign, {len(wrong)} from the wrong split or with the wrong event time (e.g. {wrong[:3]})"
    )


def test_a_growing_directory_is_copied_exactly_once_through_kills_and_a_coordinator_restart(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, data_dir: DataDir
) -> None:
    source, out = unique_source, f"{unique_source}.out"
    create_topic(kafka_bootstrap, out, 4)
    for k in range(FIRST_FILES):
        data_dir.write_file(k)
    options = data_dir.options(discovery_interval_ms="300")
    coordinator(procs, source, options)
    readers = {s: reader(procs, source, s, options, out) for s in range(READERS)}
    output = OutputReader(kafka_bootstrap, out)

    def write_later() -> None:
        for k in range(FIRST_FILES, FIRST_FILES + LATER_FILES):
            data_dir.write_file(k)
            time.sleep(0.15)

    writer = threading.Thread(target=write_later, daemon=True)
    writer.start()
    try:
        started = time.monotonic()
        output.wait_for(FIRST_FILES * ROWS // 3, 90, list(readers.values()), "before the kill")
        victim = next(s for s, r in readers.items() if r.lines_with(" splits (seq "))
        readers[victim].kill()
        time.sleep(0.5)
        readers[victim] = reader(procs, source, victim, options, out)
        writer.join(60)
        total = (FIRST_FILES + LATER_FILES) * ROWS
        output.wait_for(total, 120, list(readers.values()), "after the kill")

        print(f"{time.monotonic() - started:5.1f} s  every row of {FIRST_FILES + LATER_FILES} files copied")
        # a successor coordinator must not take a finished file again: only the new ones
        procs.procs[0].kill()
        successor = coordinator(procs, source, options)
        for k in range(FIRST_FILES + LATER_FILES, FIRST_FILES + LATER_FILES + AFTER_RESTART_FILES):
            data_dir.write_file(k)
        files = FIRST_FILES + LATER_FILES + AFTER_RESTART_FILES
        output.wait_for(files * ROWS, 90, [*readers.values(), successor], "after the coordinator restart")
        discovered = [int(m.group(1)) for m in re.finditer(r"discovered (\d+) files", successor.log())]
        assert sum(discovered) == AFTER_RESTART_FILES, f"the successor took finished files again:\n{successor.tail()}"
        print(f"{time.monotonic() - started:5.1f} s  and those written after the coordinator restart")
        time.sleep(1.0)  # a wrongly re-read file would be copied within a few discovery intervals
        output.read_all()
    finally:
        output.close()
    check_exactly_once(output.rows, files)
    summary = audit_ok(kafka_bootstrap, source)
    assert summary.splits_finished == files and summary.splits_owned == 0
    for proc in procs.procs:
        assert SECRET_KEY not in proc.log(), f"{proc.name} logged the storage secret"


def test_bad_files_are_dead_lettered_and_counted_with_skip_and_stop_the_reader_with_fail(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    root = tmp_path / "in"
    root.mkdir()
    for k, name in [(0, "0000.parquet"), (1, "0001.jsonl")]:
        (root / name).write_bytes(encode(name, table(k)))
    (root / "0002-bad.parquet").write_bytes(b"PAR1 not parquet at all")
    (root / "0003-wrong.csv").write_bytes(b"id,name\n1,x\n")  # no ts: not of the schema
    base = {"path": str(root), "schema": SCHEMA, "event_time_column": "ts"}

    source, out = unique_source, f"{unique_source}.out"
    create_topic(kafka_bootstrap, out, 1)
    skip = {**base, "on_bad_file": "skip"}
    coordinator(procs, source, skip)
    first = reader(procs, source, 0, skip, out)
    assert first.wait(90) == 0, first.tail()
    output = OutputReader(kafka_bootstrap, out)
    try:
        output.read_all()
    finally:
        output.close()
    check_exactly_once(output.rows, 2)
    assert first.lines_with("2 dead-lettered"), first.tail()
    letters = dead_letters(kafka_bootstrap, source)
    assert sorted(Path(h["sluicegate.origin.topic"]).name for h in letters) == ["0002-bad.parquet", "0003-wrong.csv"]
    assert all(h["sluicegate.error.kind"] == "bad-file" for h in letters)
    assert (
        "'ts'"
        in next(h for h in letters if h["sluicegate.origin.topic"].endswith("0003-wrong.csv"))[
            "sluicegate.error.reason"
        ]
    )

    failing = f"{source}-fail"
    coordinator(procs, failing, base)
    second = reader(procs, failing, 0, base, f"{source}.out")
    code = second.wait(90)
    log = second.log()
    assert code not in (None, 0), log
    assert "0002-bad.parquet" in log and "on_bad_file=fail" in log, log
    assert "Traceback" not in log, log
