"""The process helpers moved to the connector test kit (``sluicegate.testing.processes``);
the tests keep importing them from here. ``support_pythonpath``, ``run_script`` and
``completed_checkpoints`` are this folder's own."""

import os
import re
import subprocess
import sys
from pathlib import Path

from sluicegate.testing.processes import *  # noqa: F403
from sluicegate.testing.processes import Proc

SUPPORT_DIR = Path(__file__).resolve().parent


def support_pythonpath() -> str:
    """PYTHONPATH for a process that imports the helpers of tests/support: a test file run
    as a script (a Spark query in a process of its own), a reader with record functions.
    pytest finds them through pyproject's ``pythonpath``; other processes need this."""
    return os.pathsep.join(p for p in (str(SUPPORT_DIR), os.environ.get("PYTHONPATH", "")) if p)


def run_script(script: str, args: list[str], log: Path, bootstrap: str, timeout_s: float) -> int:
    """Run a test file as a script (a Spark process of its own, with Spark's Kafka source on
    its classpath), its output into ``log``; returns its exit code."""
    with log.open("wb") as handle:
        done = subprocess.run(
            [sys.executable, script, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=dict(
                os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONPATH=support_pythonpath(), PYTHONUNBUFFERED="1"
            ),
            timeout=timeout_s,
            check=False,
        )
    return done.returncode


def completed_checkpoints(reader: Proc) -> int:
    """How many checkpoints a reader process has logged as done ("checkpoint N: ...", not a
    failed one nor a restore)."""
    return len(re.findall(r"sluicegate\.reader: checkpoint \d+: ", reader.log()))
