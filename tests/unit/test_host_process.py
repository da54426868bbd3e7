"""Whether a coordinator's host process is gone from this machine (host_process.py), and
what the committed state then says (embedded.nobody_serves): only a process known to be
gone frees its source at once; anything unsure leaves it to the silence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace

from sluicegate.coordinator.embedded import nobody_serves
from sluicegate.coordinator.host_process import HostProcess, gone_from_here, this_process


def ended_child() -> HostProcess:
    """The identity of a child process that ran here and ended (reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    process = replace(this_process(), pid=child.pid, started=None)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    return process


def test_this_process_is_not_gone_and_a_killed_child_is() -> None:
    assert not gone_from_here(this_process())
    assert gone_from_here(ended_child())


def test_a_killed_child_not_yet_reaped_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        process = replace(this_process(), pid=child.pid, started=None)
        assert not gone_from_here(process), "alive"
        os.kill(child.pid, signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # a zombie now
        assert gone_from_here(process)
    finally:
        child.kill()
        child.wait(10)


def test_a_pid_used_again_is_gone_and_another_machine_is_never_known() -> None:
    here = this_process()
    assert here.started is not None, "Linux: /proc tells a process's start time"
    assert gone_from_here(replace(here, started=str(int(here.started) - 1))), "another process with that pid"
    assert not gone_from_here(replace(ended_child(), machine="elsewhere")), "not this machine: not known"


def test_the_state_frees_its_source_when_its_last_host_is_gone_or_released_it() -> None:
    def parts(epoch: int, host_epoch: int, process: HostProcess, released: int | None = None) -> dict[str, object]:
        out: dict[str, object] = {"meta": {"epoch": epoch}, "host": {"epoch": host_epoch, "process": process.to_json()}}
        if released is not None:
            out["released"] = {"epoch": released}
        return out

    gone, alive = ended_child(), this_process()
    assert nobody_serves(parts(3, 3, gone)) == f"its last coordinator's process (pid {gone.pid}, this machine) is gone"
    assert nobody_serves(parts(3, 2, gone)) is None, "epoch 3's host is not named: it may be alive"
    assert nobody_serves(parts(3, 3, alive)) is None
    assert nobody_serves(parts(3, 3, alive, released=3)) == "its last coordinator released it when its host ended"
    assert nobody_serves({"meta": {"epoch": 1}, "host": {"epoch": 1, "process": "garbage"}}) is None
    assert HostProcess.from_json(alive.to_json()) == alive
