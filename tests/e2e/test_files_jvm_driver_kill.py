"""A files query on ``readPath=jvm`` survives a SIGKILL of its driver: sluicegate's planning
in the driver's Python, Spark's own Parquet reader on the executors, Spark's offset log.

The query is written the Spark way (``format("sluicegate")``, ``option("format",
"parquet")``, ``.schema(...)``, ``load(dir)``, ``maxFilesPerTrigger``,
``ignoreCorruptFiles``) over a directory of Parquet files and one that is not Parquet.
Nothing else is started: the driver coordinates its source itself, and dies with it. It
runs in a process of its own (this file as a script), ``Trigger.AvailableNow`` into a
``foreachBatch`` sink that writes each batch into its own directory (a replayed batch
overwrites it: exactly once at the sink). The process is SIGKILLed at a random point after
its first batch with data and started again on the same checkpoint. Every row must be in
the output exactly once, the audit of the control topics clean, and the bad file
dead-lettered.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dead_letters import dead_letters
from jvm_read_path import require_jvm_read_path
from processes import Proc, ProcessGroup, support_pythonpath

from sluicegate.audit.commands import run_audit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420), pytest.mark.spark]

FILES = 12
ROWS = 4_000
FILES_PER_TRIGGER = 2
BATCH_PAUSE_S = 0.7
"""Each batch's sink call waits this long, so that the kill lands mid-run."""
SCHEMA = "id BIGINT, name STRING, amount DOUBLE"
BAD_FILE = "0005-torn.parquet"


def write_files(root: Path) -> None:
    for k in range(FILES):
        ids = list(range(k * ROWS, (k + 1) * ROWS))
        table = pa.table({"id": ids, "name": [f"n{i}" for i in ids], "amount": [i / 4 for i in ids]})
        pq.write_table(table, root / f"{k:04d}.parquet", row_group_size=ROWS // 2)
        os.utime(root / f"{k:04d}.parquet", (1_700_000_000 + k, 1_700_000_000 + k))  # Spark's order: oldest first
    (root / BAD_FILE).write_bytes(b"PAR1 torn in the middle of a copy")


def start_job(procs: ProcessGroup, name: str, source: str, data: Path, workdir: Path) -> Proc:
    args = [__file__, "--source", source, "--data", str(data), "--workdir", str(workdir)]
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as handle:
        popen = subprocess.Popen(
            [sys.executable, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=dict(
                os.environ,
                KAFKA_BOOTSTRAP_SERVERS=procs.bootstrap,
                PYTHONPATH=support_pythonpath(),
                PYTHONUNBUFFERED="1",
            ),
            start_new_session=True,
        )
    proc = Proc(name, popen, log_path, args)
    procs.procs.append(proc)
    return proc


def batches_with_rows(proc: Proc) -> int:
    """Batches the sink wrote that had rows (a query's first batch reads none: its files
    arrive in it and are read from the next one)."""
    return len([line for line in proc.lines_with("wrote batch ") if not line.endswith("rows=0")])


def test_a_killed_driver_on_the_jvm_read_path_restarts_without_loss_or_duplicate(
    procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    require_jvm_read_path()
    data = tmp_path / "in"
    data.mkdir()
    write_files(data)
    first = start_job(procs, "job-1", unique_source, data, tmp_path)
    deadline = time.monotonic() + 180
    while batches_with_rows(first) < 1:
        assert first.popen.poll() is None, f"the job ended early:\n{first.tail(60)}"
        assert time.monotonic() < deadline, f"the job made no progress:\n{first.tail(60)}"
        time.sleep(0.2)
    time.sleep(random.uniform(0.0, 2 * BATCH_PAUSE_S))  # land anywhere in a batch
    first.kill_group()
    assert not first.lines_with("DONE"), "the job ended before it was killed"
    assert first.lines_with(f"source {unique_source}: readPath=jvm, Spark's Parquet reader"), first.tail(60)

    second = start_job(procs, "job-2", unique_source, data, tmp_path)
    assert second.wait(300) == 0, second.tail(60)
    assert second.lines_with("DONE"), second.tail(20)
    assert second.lines_with("restored at checkpoint"), second.tail(60)

    out = pq.read_table([str(f) for f in sorted((tmp_path / "out").rglob("*.parquet"))])
    ids = out.column("id").to_pylist()
    copies = Counter(ids)
    assert set(copies) == set(range(FILES * ROWS)) and len(ids) == FILES * ROWS, (
        f"{len(ids)} rows, {len(copies)} ids, {sum(1 for n in copies.values() if n > 1)} twice"
    )
    assert out.column("name").to_pylist() == [f"n{i}" for i in ids], "each row whole"
    result = asyncio.run(run_audit(kafka_bootstrap, unique_source))
    assert result.ok, f"audit: {result.first_violation}"
    assert result.summary.splits_assigned == FILES + 1 and result.summary.splits_finished == FILES + 1
    origins = [h["sluicegate.origin.topic"] for h in dead_letters(kafka_bootstrap, unique_source)]
    assert origins == [str(data / BAD_FILE)], "the bad file skipped (ignoreCorruptFiles) and dead-lettered once"


# -- the job (this file run as a script) ---------------------------------------------------


def job_main() -> int:
    """Run the query to its end (``DONE``), printing ``wrote batch N rows=R`` per batch."""
    from sluicegate.spark.datasource import register
    from sluicegate.spark.job import spark_session

    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args()
    spark = spark_session(f"sluicegate-files-jvm-{args.source}", quiet=True)
    register(spark)
    out = args.workdir / "out"

    def write(batch: object, batch_id: int) -> None:
        time.sleep(BATCH_PAUSE_S)
        batch.write.mode("overwrite").parquet(str(out / f"batch_id={batch_id}"))  # type: ignore[attr-defined]
        print(f"wrote batch {batch_id} rows={batch.count()}", flush=True)  # type: ignore[attr-defined]

    try:
        query = (
            spark.readStream.format("sluicegate")
            .option("format", "parquet")
            .schema(SCHEMA)
            .option("readPath", "jvm")
            .option("source", args.source)
            .option("maxFilesPerTrigger", str(FILES_PER_TRIGGER))
            .option("ignoreCorruptFiles", "true")
            .load(args.data)
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(args.workdir / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            print(f"FAILED {query.exception()}", flush=True)
            return 1
        print("DONE", flush=True)
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(job_main())
