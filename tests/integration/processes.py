"""Real processes for integration tests: the coordinator and reader hosts run as
`python -m sluicegate ...` subprocesses, so failure tests can SIGKILL them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    args: list[str] = field(default_factory=list)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, text: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.popen.returncode} before logging {text!r}:\n{self.tail()}"
                )
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not log {text!r} within {timeout_s} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def terminate(self, timeout_s: float = 20.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        return self.popen.returncode

    def wait(self, timeout_s: float) -> int:
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout_s} s:\n{self.tail()}") from None


class ProcessGroup:
    """Starts sluicegate sub-commands with logs in a directory; stops them all at the end."""

    def __init__(self, log_dir: Path, bootstrap: str) -> None:
        self.log_dir = log_dir
        self.bootstrap = bootstrap
        self.procs: list[Proc] = []

    def start(self, name: str, args: Sequence[str]) -> Proc:
        log_path = self.log_dir / f"{name}.log"
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=self.bootstrap, PYTHONUNBUFFERED="1", COLUMNS="200")
        handle = log_path.open("ab")
        popen = subprocess.Popen(
            [sys.executable, "-m", "sluicegate", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        handle.close()
        proc = Proc(name, popen, log_path, list(args))
        self.procs.append(proc)
        return proc

    def coordinator(self, source: str, max_parallelism: int, options: dict[str, str], *extra: str) -> Proc:
        args = ["coordinator", "--source", source, "--connector", "sequence", "--max-parallelism", str(max_parallelism)]
        for key, value in options.items():
            args += ["--option", f"{key}={value}"]
        proc = self.start(f"coordinator-{source}-{len(self.procs)}", [*args, *extra])
        proc.wait_for_log("is serving", timeout_s=90)
        return proc

    def reader(self, source: str, subtask: int, options: dict[str, str], output: Path, *extra: str) -> Proc:
        args = [
            "reader",
            "--source",
            source,
            "--subtask",
            str(subtask),
            "--connector",
            "sequence",
            "--output",
            f"jsonl:{output}",
        ]
        for key, value in options.items():
            args += ["--option", f"{key}={value}"]
        return self.start(f"reader-{source}-{subtask}-{len(self.procs)}", [*args, *extra])

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate(timeout_s=15)
