"""How the coordinator's state topic (``NS.S.coordinator-state``) names its records: the
format the coordinator writes (coordinator/state_store.py) and others read (the audit's
follower reads the ``meta`` part to know how far the coordinator got). docs/state.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

MANIFEST_MAGIC = b"\x00sluicegate-chunked\x00"
"""A manifest's value starts with this; a JSON part never starts with a NUL byte."""

ALIVE_PART = "alive"
"""A part that never exists: the active coordinator writes tombstones of it outside its
transactions while one of them is slow, so that the state topic's end moves for the
standbys (coordinator/silence.py ``mark_due``). A reader of the state deletes a part
nobody wrote, which changes nothing, in this version and in every earlier one."""


RELEASED_PART = "released"
"""``{"epoch": E}``: the coordinator of epoch E stopped because its host ended (a Spark
query stopped, a reader shut down), after its last commit: nobody serves the source. A
host that finds it naming the epoch of the last ``meta`` takes the source over at once,
where it would otherwise wait out a silence (coordinator/embedded.py). A successor's
``meta`` has a higher epoch, so the part is stale from then on and nobody deletes it."""


HOST_PART = "host"
"""``{"epoch": E, "process": {...}}``: the process that hosts the coordinator of epoch E
(coordinator/host_process.py), written once it serves. A host that starts on the same
machine and finds that process gone takes the source over at once (a killed query's
next run), where it would otherwise wait out a silence."""


def host_record(source: str, epoch: int, process: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The state record that names the process hosting the coordinator of ``epoch``."""
    return state_key(source, HOST_PART), orjson.dumps({"epoch": epoch, "process": dict(process)})


def host_of_last(parts: Mapping[str, Any]) -> Any:
    """The process the state ``parts`` name as their last coordinator's host (as written),
    or None when they name none or an earlier epoch's."""
    host = parts.get(HOST_PART)
    meta = parts.get("meta")
    if not isinstance(host, dict) or meta is None or host.get("epoch") != meta["epoch"]:
        return None
    return host.get("process")


def released_record(source: str, epoch: int) -> tuple[bytes, bytes]:
    """The state record that says the coordinator of ``epoch`` released ``source``."""
    return state_key(source, RELEASED_PART), orjson.dumps({"epoch": epoch})


def released_by_last(parts: Mapping[str, Any]) -> bool:
    """Whether the state ``parts`` say their last coordinator released the source."""
    released = parts.get(RELEASED_PART)
    meta = parts.get("meta")
    return isinstance(released, dict) and meta is not None and released.get("epoch") == meta["epoch"]


def state_key(source: str, part: str) -> bytes:
    """The key of a state part (``meta``, ``enumerator``, ``slot/<subtask>``) of ``source``."""
    return f"{source}/{part}".encode()


def chunk_key(source: str, part: str, digest: str) -> bytes:
    """The key of one chunk of a chunked part."""
    return f"{source}/{part}#{digest}".encode()
