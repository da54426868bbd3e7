"""Spark as users run it: a standalone cluster (a master and two one-core workers,
tests/support/spark_cluster.py, run by the Spark of a venv the built wheel was installed into
with ``[spark]``) whose executors get sluicegate only from ``spark.archives``: that venv packed
with venv-pack, without PySpark (the executors' Python workers import the workers' own), as
Spark's "Python Package Management" guide ships a venv (``PACK#environment``, the executors'
Python ``./environment/bin/python``). The driver is that venv's Python, run from outside the
checkout with nothing of it on any path (tests/support/cluster_wheel_job.py); the wheel's jar
is in its ``spark.jars``.

A Kafka topic (Spark's Kafka options) and a Parquet directory (the ``files`` connector, the
default read path) are read at once, each ``Trigger.AvailableNow`` in several batches into
Parquet overwritten per batch id; a worker is SIGKILLed with its executor and Python workers
once both have committed two of their five batches, while a task of the Kafka stream runs on
it (Spark runs it again on the other worker). Every record and every row is in the output exactly once,
and the audits of both sources, coordinated in the driver over Kafka, are clean.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka_data import DataWriter, create_topic
from processes import Proc
from spark_cluster import SparkCluster, kill_group, spark_standalone
from wheel_install import Installed

from sluicegate.audit.commands import run_audit

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(600)]

CHECKOUT = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parents[1] / "support"
PARTITIONS, PER_PARTITION = 2, 2_500
"""Five batches of the job's maxOffsetsPerTrigger (1,000)."""
FILES, FILE_ROWS = 5, 2_000
"""Five batches of the job's maxFilesPerTrigger (1)."""
BEFORE_KILL = 2
"""Batches each stream commits before the worker dies, of five: the kill lands mid-run. The
job holds both streams there until the test has killed it (tests/support/cluster_wheel_job.py):
the files stream between batches, the Kafka stream inside the tasks of its third batch, one
on each executor, so that the worker dies with a Kafka task running on it."""
SITE = "lib/python3.11/site-packages"
NOT_PACKED = ("pyspark/*", "pyspark-*", "py4j/*", "py4j-*", "pip/*", "pip-*", "setuptools/*")
NOT_PACKED_ARROW = ("pyarrow/include/*", "pyarrow/tests/*", "pyarrow/*flight*")
"""Left out of the pack: PySpark (the workers' Spark brings its own), pip, and what of
pyarrow nothing here imports (headers, tests, Flight)."""


def without_checkout(env: dict[str, str]) -> dict[str, str]:
    """``env`` with nothing of the checkout on PATH (the checkout's venv may be active)."""
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not Path(p).is_relative_to(CHECKOUT)]
    return {**env, "PATH": os.pathsep.join(path), "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture(scope="module")
def pack(with_spark: Installed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``[spark]`` venv packed for the executors (venv-pack, gzip level 1)."""
    out = tmp_path_factory.mktemp("pack") / "sluicegate-venv.tar.gz"
    venv_pack = Path(sys.executable).parent / "venv-pack"
    assert venv_pack.exists(), (
        f"no {venv_pack}: the dev extra has it (pip install -e '.[dev]' or pip install venv-pack)"
    )
    excluded = [a for p in (*NOT_PACKED, *NOT_PACKED_ARROW) for a in ("--exclude", f"{SITE}/{p}")]
    started = time.monotonic()
    packed = subprocess.run(
        [
            str(venv_pack),
            "-p",
            str(with_spark.venv),
            "-o",
            str(out),
            "--compress-level",
            "1",
            "-q",
            *excluded,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert packed.returncode == 0, packed.stdout + packed.stderr
    print(f"venv-pack: {out.stat().st_size / 1e6:.0f} MB in {time.monotonic() - started:.1f} s")
    return out


@pytest.fixture
def cluster(with_spark: Installed, kafka_bootstrap: str, tmp_path: Path) -> Iterator[SparkCluster]:
    """The cluster of the installed venv's Spark, in its environment (no PYSPARK_PYTHON, no
    PYTHONPATH). The test kills a worker: the cluster is its own."""
    env = without_checkout(with_spark.env(kafka_bootstrap))
    with spark_standalone(tmp_path / "cluster", spark_class=str(with_spark.venv / "bin" / "spark-class"), env=env) as c:
        yield c


def _batches(job: Proc) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {"kafka": [], "files": []}
    for name, batch in re.findall(r"^BATCH (\w+) id=(\d+)$", job.log(), re.MULTILINE):
        found[name].append(int(batch))
    return found


def _gated(hold: Path, attempt: int) -> list[str]:
    """The partitions of the Kafka stream's held batch whose task ``attempt`` reached the gate."""
    return [m.name.split(".")[-2] for m in hold.parent.glob(f"{hold.name}.gated.*.{attempt}")]


def _running_tasks(worker_dir: Path) -> set[str]:
    """The tasks an executor of the worker started and did not finish (from its log)."""
    started: set[str] = set()
    finished: set[str] = set()
    for log in worker_dir.glob("app-*/*/stderr"):
        text = log.read_text(errors="replace")
        started |= set(re.findall(r"Running task \S+ in stage \S+ \((TID \d+)\)", text))
        finished |= set(re.findall(r"Finished task \S+ in stage \S+ \((TID \d+)\)", text))
    return started - finished


def _reported(job: Proc, tag: str) -> Any:
    return json.loads(job.lines_with(f"{tag} ")[-1].split(f"{tag} ", 1)[1])


def _outside_checkout(where: str, cwd: str, paths: list[str]) -> None:
    """No path of ``paths`` (relative ones are ``cwd``'s) is in the checkout."""
    inside = [p for p in paths if (Path(cwd) / p).resolve().is_relative_to(CHECKOUT)]
    assert not inside, f"{where} has the checkout on its path: {inside}"


def test_executors_with_a_packed_venv_read_kafka_and_files_exactly_once_through_a_killed_worker(
    with_spark: Installed, pack: Path, cluster: SparkCluster, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    topic = f"{unique_source}-in"
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    writer = DataWriter(kafka_bootstrap, topic, PARTITIONS)
    writer.produce(PER_PARTITION)
    writer.flush()
    files = tmp_path / "files"
    files.mkdir()
    for k in range(FILES):
        pq.write_table(
            pa.table({"id": pa.array(range(k * FILE_ROWS, (k + 1) * FILE_ROWS), pa.int64())}), files / f"{k}.parquet"
        )
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "environment").symlink_to(with_spark.venv)  # the driver's Python workers plan the sources
    script = shutil.copy(SUPPORT / "cluster_wheel_job.py", driver / "job.py")  # run from outside the checkout
    kafka_source, files_source = f"{unique_source}-kafka", f"{unique_source}-files"
    args = [str(with_spark.python), str(script), cluster.master_url, kafka_bootstrap, topic, kafka_source]
    args += [str(files), files_source, str(pack), str(tmp_path), str(tmp_path / "worker-killed")]  # the hold
    log_path = tmp_path / "job.log"
    with log_path.open("ab") as handle:
        popen = subprocess.Popen(
            args,
            cwd=driver,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=without_checkout(with_spark.env(kafka_bootstrap)),
            start_new_session=True,
        )
    job = Proc("cluster-wheel-job", popen, log_path, args)
    try:
        _run(job, cluster, with_spark, writer, kafka_source, files_source, kafka_bootstrap, tmp_path)
    finally:
        if job.popen.poll() is None:
            kill_group(job)


def _run(
    job: Proc,
    cluster: SparkCluster,
    installed: Installed,
    writer: DataWriter,
    kafka_source: str,
    files_source: str,
    bootstrap: str,
    tmp_path: Path,
) -> None:
    # both streams have committed two batches, and the Kafka stream's next batch has a task
    # running on each executor, held: then a worker dies
    hold = tmp_path / "worker-killed"
    deadline = time.monotonic() + 240
    while min(len(b) for b in _batches(job).values()) < BEFORE_KILL or len(_gated(hold, attempt=0)) < 2:
        assert job.popen.poll() is None, f"the job ended early:\n{job.tail(60)}\n{cluster.describe()}"
        assert time.monotonic() < deadline, f"no batches committed:\n{job.tail(60)}\n{cluster.describe()}"
        time.sleep(0.2)
    running = _running_tasks(cluster.work_dir / "worker-1")
    assert running, f"no task runs on worker 1:\n{cluster.describe()}"
    cluster.kill_worker(1)
    at_kill = _batches(job)
    hold.touch()  # the streams go on: the Kafka batch's lost task runs again on worker 0
    assert not job.lines_with("DONE "), f"a query finished before the worker was killed: {at_kill}"

    assert job.wait(300) == 0, f"{job.tail(80)}\n{cluster.describe()}"
    assert job.lines_with("Lost executor"), job.tail(60)  # the driver went on without it
    assert cluster.master.lines_with("Removing worker"), cluster.master.tail(30)
    done = _batches(job)
    assert all(max(done[name]) > max(at_kill[name]) for name in done), f"batches {done}, {at_kill} at the kill"
    assert _gated(hold, attempt=1), f"the task lost with worker 1 ({running}) did not run again"

    # the driver's sluicegate is the installed venv's; an executor's is the pack's, unpacked
    # in its work dir; nothing of the checkout is on either's path
    where = _reported(job, "WHERE")
    assert Path(where["driver"]).is_relative_to(installed.venv), where["driver"]
    _outside_checkout("the driver", where["driver_cwd"], [where["driver"], *where["driver_path"]])
    for executor in where["executors"]:
        environment = Path(executor["prefix"])
        assert environment.name == "environment" and environment.is_relative_to(cluster.work_dir), executor
        assert Path(executor["executable"]) == environment / "bin" / "python", executor
        for module in ("sluicegate", "native"):
            assert Path(executor[module]).is_relative_to(environment), executor
        _outside_checkout(
            "an executor", executor["cwd"], [executor["sluicegate"], executor["pyspark"], *executor["path"]]
        )

    out = tmp_path / "out"
    records = pq.read_table(out / "kafka").to_pylist()
    copies = Counter((r["topic"], r["partition"], r["offset"]) for r in records)
    assert set(copies) == set(writer.expected) and max(copies.values()) == 1, (
        f"{len(records)} rows for {len(writer.expected)} records; "
        f"{sum(n > 1 for n in copies.values())} repeated, {len(set(writer.expected) - set(copies))} missing"
    )
    wrong = [r for r in records if writer.expected[(r["topic"], r["partition"], r["offset"])] != (r["key"], r["value"])]
    assert not wrong, wrong[:5]
    ids = pq.read_table(out / "files").column("id").to_pylist()
    assert sorted(ids) == list(range(FILES * FILE_ROWS)), f"{len(ids)} rows, {len(set(ids))} ids"

    # both sources were coordinated in the driver over Kafka; the files are bounded, each finished
    for source, splits, finished in ((kafka_source, PARTITIONS, 0), (files_source, FILES, FILES)):
        audit = asyncio.run(run_audit(bootstrap, source))
        assert audit.ok, f"audit of {source}: {audit.first_violation}"
        assert (audit.summary.splits_assigned, audit.summary.splits_finished) == (splits, finished), audit.summary
