"""A real Spark standalone cluster on 127.0.0.1 for the test session: a master and two
workers, each a separate JVM started with the venv's ``spark-class`` (pyspark's pip
package carries the whole Spark distribution), torn down at the end.

Each process runs in its own session (process group), so a test can SIGKILL a
worker together with the executor JVM and the Python workers it started, as when
its machine dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from processes import Proc

from sluicegate.devtools.broker.local import free_port

WORKERS = 2
WORKER_MEMORY = "1g"
START_TIMEOUT_S = 120.0


def spark_bin(name: str) -> str:
    """A Spark script of this interpreter's environment (``spark-class``, ``spark-submit``)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            raise RuntimeError(f"{name} not found next to {sys.executable} nor on PATH (pip install pyspark)")
        return found
    return str(path)


def spark_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Every Spark process binds 127.0.0.1 and runs Python workers with this interpreter."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYTHONUNBUFFERED="1")
    env.pop("SPARK_HOME", None)
    env.update(extra or {})
    return env


@dataclass
class SparkCluster:
    master_url: str
    master: Proc
    workers: list[Proc]
    work_dir: Path

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` and everything it started (executor JVM, Python workers)."""
        kill_group(self.workers[index])

    def describe(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.tail(15)}" for p in [self.master, *self.workers])


def kill_group(proc: Proc) -> None:
    """Proc.kill_group, tolerating a process that is slow to exit (a worker's JVM)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.kill_group()


def _spark_class(name: str, log_dir: Path, args: list[str], spark_class: str, env: dict[str, str]) -> Proc:
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as handle:
        popen = subprocess.Popen(
            [spark_class, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return Proc(name, popen, log_path, args)


@contextlib.contextmanager
def spark_standalone(
    run_dir: Path, workers: int = WORKERS, spark_class: str | None = None, env: dict[str, str] | None = None
) -> Iterator[SparkCluster]:
    """The cluster, its processes run by ``spark_class`` (default: this interpreter's) in
    ``env`` (default: ``spark_env()``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spark_class = spark_class or spark_bin("spark-class")
    env = spark_env() if env is None else env
    port = free_port()
    master = _spark_class(
        "spark-master",
        run_dir,
        [
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port(frozenset({port})))),
        ],
        spark_class,
        env,
    )
    procs = [master]
    try:
        master.wait_for_log("I have been elected leader", timeout_s=START_TIMEOUT_S)
        url = f"spark://127.0.0.1:{port}"
        started: list[Proc] = []
        for k in range(workers):
            work_dir = run_dir / f"worker-{k}"
            worker = _spark_class(
                f"spark-worker-{k}",
                run_dir,
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    *("--host", "127.0.0.1", "--cores", "1", "--memory", WORKER_MEMORY),
                    *("--webui-port", str(free_port()), "--work-dir", str(work_dir)),
                ],
                spark_class,
                env,
            )
            procs.append(worker)
            started.append(worker)
        for worker in started:
            worker.wait_for_log("Successfully registered with master", timeout_s=START_TIMEOUT_S)
        yield SparkCluster(url, master, started, run_dir)
    finally:
        for proc in reversed(procs):
            kill_group(proc)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone master and two one-core workers on 127.0.0.1 for the session. A test
    that kills a worker leaves the cluster with one: such a test is the last user."""
    with spark_standalone(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster
