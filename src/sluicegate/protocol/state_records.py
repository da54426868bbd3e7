"""How the coordinator's state topic (``NS.S.coordinator-state``) names its records: the
format the coordinator writes (coordinator/state_store.py) and others read (the audit's
follower reads the ``meta`` part to know how far the coordinator got). docs/state.md."""

from __future__ import annotations

MANIFEST_MAGIC = b"\x00sluicegate-chunked\x00"
"""A manifest's value starts with this; a JSON part never starts with a NUL byte."""

ALIVE_PART = "alive"
"""A part that never exists: the active coordinator writes tombstones of it outside its
transactions while one of them is slow, so that the state topic's end moves for the
standbys (coordinator/silence.py ``mark_due``). A reader of the state deletes a part
nobody wrote, which changes nothing, in this version and in every earlier one."""


def state_key(source: str, part: str) -> bytes:
    """The key of a state part (``meta``, ``enumerator``, ``slot/<subtask>``) of ``source``."""
    return f"{source}/{part}".encode()


def chunk_key(source: str, part: str, digest: str) -> bytes:
    """The key of one chunk of a chunked part."""
    return f"{source}/{part}#{digest}".encode()
