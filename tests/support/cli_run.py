"""Run a ``sluicegate`` command as a fresh process, as a newcomer does, and keep what a test
of a first-contact mistake checks: the exit code, the seconds it took, and its output as
one line (log handlers wrap long messages)."""

from __future__ import annotations

import subprocess
import sys
import time


def run_sluicegate(*args: str, timeout_s: float = 120) -> tuple[int, float, str]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sluicegate", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"},
    )
    return done.returncode, time.monotonic() - began, " ".join((done.stdout + done.stderr).split())
