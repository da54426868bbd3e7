"""Which process hosts a coordinator, and whether that process is gone from this machine.

A coordinator names its process in the source's state when it starts serving
(state_records.HOST_PART). A host that starts later on the same machine and finds that
process gone (SIGKILLed: a Spark query's source process ends so when the query stops,
and a killed driver does too) takes the source over at once instead of waiting out a
silence (coordinator/embedded.py), as it does for a source released on purpose.

"Gone" is only ever said when it is known: the machine is this one (its host name, its
boot and its PID namespace: two containers that share a host name but not their PIDs
are two machines here) and no process with that pid runs, or the one that does started
at another time (a pid used again). Anything unsure answers "not gone", and the silence
decides as before. A wrong "gone" would cost a coordinator failover, never data: the
newcomer fences the live coordinator through the source's transactional id.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HostProcess:
    machine: str
    """Host name, boot id and PID namespace, as far as the system tells them."""
    pid: int
    started: str | None
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""

    def to_json(self) -> dict[str, Any]:
        return {"machine": self.machine, "pid": self.pid, "started": self.started}

    @classmethod
    def from_json(cls, value: Any) -> HostProcess | None:
        """The process a state part names, or None for a part this version cannot read."""
        if not isinstance(value, dict):
            return None
        machine, pid, started = value.get("machine"), value.get("pid"), value.get("started")
        if not isinstance(machine, str) or not isinstance(pid, int) or not isinstance(started, str | None):
            return None
        return cls(machine, pid, started)


def this_process() -> HostProcess:
    pid = os.getpid()
    return HostProcess(this_machine(), pid, start_time(pid))


def this_machine() -> str:
    boot = _read(Path("/proc/sys/kernel/random/boot_id"))
    try:
        pid_namespace: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_namespace = None
    return "/".join(part for part in (socket.gethostname(), boot, pid_namespace) if part)


def gone_from_here(process: HostProcess) -> bool:
    """Whether ``process`` ran on this machine and runs no more (known for sure)."""
    if process.machine != this_machine():
        return False
    try:
        os.kill(process.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a process of another user has the pid: its start time still tells
    except OSError:
        return False
    fields = _stat(process.pid)
    if fields is None:
        return False
    state, started = fields[0], fields[19]
    # a zombie (killed, not yet reaped by its parent) runs no more
    return state == "Z" or (process.started is not None and started != process.started)


def start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields is not None else None


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from the third on (after the command, which may
    hold spaces): [0] the state, [19] the start time (field 22)."""
    stat = _read(Path(f"/proc/{pid}/stat"))
    if stat is None or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields if len(fields) > 19 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
