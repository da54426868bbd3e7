"""The windowed job on a Spark standalone cluster: a master and two one-core workers as
separate processes on this machine (tests/support/spark_cluster.py), the job submitted
with ``spark-submit --master spark://...`` against the session broker and a coordinator
process. A worker is SIGKILLed (with its executor and Python workers) once the first
batches are committed; Spark runs the lost tasks again on the other worker, and the
window table is still exact and the audit clean.

Before it, a ``readPath=jvm`` query on the same cluster: each of its parts runs on one
executor in every batch, and the two parts on two.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_data import DataWriter, create_topic
from processes import Proc, ProcessGroup
from spark_cluster import SparkCluster, kill_group, spark_bin, spark_cluster, spark_env

import sluicegate.spark.job
from sluicegate.audit.commands import run_audit
from sluicegate.devtools.broker.local import free_port

__all__ = ["spark_cluster"]

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420), pytest.mark.spark]

PARALLELISM = 2
SPLITS = 8
RECORDS_PER_SPLIT = 10_000
TOTAL = SPLITS * RECORDS_PER_SPLIT
OPTIONS = {"splits": str(SPLITS), "records_per_split": str(RECORDS_PER_SPLIT)}
MAX_RECORDS_PER_TRIGGER = 8_000
"""About ten data batches, so that the kill lands mid-run."""
PLACED_RECORDS = 40_000
"""About ten batches of the JVM path's query (maxOffsetsPerTrigger 4,000)."""


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    yield group
    for proc in group.procs:
        if proc.popen.poll() is None:
            kill_group(proc)


def _submit(group: ProcessGroup, cluster: SparkCluster, source: str, tmp_path: Path) -> Proc:
    args = [
        spark_bin("spark-submit"),
        "--master", cluster.master_url,
        "--conf", "spark.executor.memory=512m",
        "--conf", "spark.executor.cores=1",
        "--conf", f"spark.pyspark.python={sys.executable}",
        sluicegate.spark.job.__file__,
        "--source", source,
        "--output", str(tmp_path / "windows"),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--parallelism", str(PARALLELISM),
        "--max-records-per-trigger", str(MAX_RECORDS_PER_TRIGGER),
        "--progress-interval", "0.5",
        "--check",
        "--quiet",
    ]  # fmt: skip
    for key, value in OPTIONS.items():
        args += ["--option", f"{key}={value}"]
    log_path = tmp_path / "spark-submit.log"
    with log_path.open("ab") as handle:
        popen = subprocess.Popen(
            args,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=spark_env({"KAFKA_BOOTSTRAP_SERVERS": group.bootstrap}),
            start_new_session=True,
        )
    proc = Proc("spark-submit", popen, log_path, args)
    group.procs.append(proc)
    return proc


def _batches(proc: Proc) -> list[tuple[int, int]]:
    return [(int(b), int(r)) for b, r in re.findall(r"progress batch=(-?\d+) rows=(\d+)", proc.log())]


def test_on_the_jvm_path_each_part_runs_on_its_own_executor_batch_after_batch(
    spark_cluster: SparkCluster, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    """readPath=jvm runs a Spark task per planned part; on a cluster each part prefers an
    executor of its own (PartPlacement.java), so that a subtask's ranges are read where its
    cached consumers are, batch after batch, and two parts do not queue on one executor.
    (Runs before the test that kills a worker: it needs both.)"""
    create_topic(kafka_bootstrap, unique_source, 8)
    writer = DataWriter(kafka_bootstrap, unique_source, 8)
    writer.produce(PLACED_RECORDS // 8)
    writer.flush()
    job = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parents[1] / "support" / "jvm_placement_job.py"),
            *(spark_cluster.master_url, kafka_bootstrap, unique_source, str(tmp_path / "checkpoint")),
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        env=spark_env(),
        timeout=300,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    report = json.loads(job.stdout.strip().splitlines()[-1])
    assert report["rows"] == PLACED_RECORDS, report
    data_batches = [stage for stage in report["stages"] if len(stage) == PARALLELISM]
    assert len(data_batches) >= 5, report
    places = {index: {stage[index] for stage in data_batches} for index in data_batches[0]}
    assert all(len(executors) == 1 for executors in places.values()), f"a part moved between executors: {places}"
    assert len({next(iter(e)) for e in places.values()}) == PARALLELISM, f"two parts on one executor: {places}"


def test_the_job_on_a_standalone_cluster_survives_a_killed_worker_exactly_once(
    spark_cluster: SparkCluster, procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    procs.coordinator(unique_source, PARALLELISM, OPTIONS)
    job = _submit(procs, spark_cluster, unique_source, tmp_path)

    # both executors are up and the first batches are committed: then a worker dies
    deadline = time.monotonic() + 180
    while not any(batch >= 2 and rows > 0 for batch, rows in _batches(job)):
        assert job.popen.poll() is None, f"the job ended early:\n{job.tail(60)}"
        assert time.monotonic() < deadline, f"no batch committed:\n{job.tail(60)}\n{spark_cluster.describe()}"
        time.sleep(0.2)
    killed_at = _batches(job)[-1][1]
    spark_cluster.kill_worker(1)
    assert killed_at < TOTAL and not job.lines_with("RESULT "), "the job finished before the worker was killed"

    assert job.wait(300) == 0, f"{job.tail(80)}\n{spark_cluster.describe()}"
    result: dict[str, Any] = json.loads(job.lines_with("RESULT ")[-1].split("RESULT ", 1)[1])
    assert result["ok"], result
    assert (result["count"], result["sum"]) == (TOTAL, TOTAL * (TOTAL - 1) // 2)
    # the driver lost the executor of the killed worker and went on without it
    assert job.lines_with("Lost executor"), job.tail(60)
    assert spark_cluster.master.lines_with("Removing worker"), spark_cluster.master.tail(30)
    audit = asyncio.run(run_audit(kafka_bootstrap, unique_source))
    assert audit.ok, f"audit: {audit.first_violation}"
    assert audit.summary.splits_finished == SPLITS
    assert audit.summary.splits_owned == 0
