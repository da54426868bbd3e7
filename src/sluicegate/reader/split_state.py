"""Per-split state of a stateful user function: what it keeps, when it is saved, and the
rule that it always belongs to the position its split is read from.

A stateful function (reader/processing.py) gets, besides each record, a JSON-ready dict
for the record's split (a running count per key, say). The dicts live here while the
reader owns the splits, and are saved on ``NS.S.split-state`` (compacted, key = split id)
*in the checkpoint's transaction*, beside the ``CheckpointAck`` that carries the splits'
positions. So a saved state and the acknowledged position of its split are one commit:

- a reader restored from its checkpoint, or the next owner of a split (after a failover
  or a rebalance), starts the split at the acknowledged position with the state saved
  with it: every record counts once in the state, as in the output;
- a state is saved again whenever it changed or its split's position moved (a split can
  move without records reaching the function: transaction markers, compaction gaps), so
  the saved position is always the acknowledged one. A split arriving at another
  position than its state's is refused loudly (``SplitStateMismatch``), never merged;
- a finished split's state is deleted (a tombstone) in the checkpoint that finishes it;
- a checkpoint that does not commit leaves nothing: ``discard`` drops the working dicts,
  and they are loaded again from what was committed.

This module is pure: the Kafka side (reading the topic up to date) is
reader/kafka_split_state.py; the host moves records between them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson

from sluicegate.api.errors import SourceError
from sluicegate.api.split import WireSplit

STATE_VERSION = 1

SplitState = MutableMapping[str, Any]
"""What a stateful function gets for a split: a dict of JSON-ready values."""


class SplitStateMismatch(SourceError):
    """A split arrived at another position than the one its state was saved with."""


class SplitStateUnsaveable(SourceError):
    """A function put a value in its state that JSON cannot hold."""


@dataclass(frozen=True)
class SavedState:
    """One record of the split-state topic: the state and the split (with its position)
    it was saved with."""

    split: WireSplit
    state: dict[str, Any]

    def encode(self) -> bytes:
        return orjson.dumps({"v": STATE_VERSION, "split": self.split, "state": self.state})

    @classmethod
    def decode(cls, raw: bytes) -> SavedState:
        data = orjson.loads(raw)
        if not isinstance(data, dict) or data.get("v") != STATE_VERSION:
            raise ValueError(f"not a split-state record of version {STATE_VERSION}")
        split, state = data.get("split"), data.get("state")
        if not isinstance(split, dict) or not isinstance(state, dict):
            raise ValueError("a split-state record needs a 'split' and a 'state' object")
        return cls(split, state)


@dataclass(frozen=True)
class StateWrite:
    """A record to write in the checkpoint's transaction: a state, or a deletion (None)."""

    split_id: str
    saved: SavedState | None


@dataclass
class _Working:
    state: dict[str, Any]
    saved_json: bytes | None
    """The state as last saved (None: never saved), to tell a changed one."""
    saved_split: WireSplit | None


def _same_split(a: WireSplit, b: WireSplit) -> bool:
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)


class SplitStates:
    """The working states of the splits this reader owns, and the last committed record of
    every split it has seen on the topic."""

    def __init__(self) -> None:
        self._committed: dict[str, bytes] = {}
        """split id -> the latest committed record (read from the topic, or written here)."""
        self._working: dict[str, _Working] = {}
        self._pending: list[StateWrite] = []

    # -- what the topic holds ---------------------------------------------------------

    def saw(self, records: Iterable[tuple[str, bytes | None]]) -> None:
        """Committed records read from the topic, in its order (None: deleted)."""
        for split_id, raw in records:
            if raw is None:
                self._committed.pop(split_id, None)
            else:
                self._committed[split_id] = raw

    # -- splits arriving and leaving ----------------------------------------------------

    def is_loaded(self, split_id: str) -> bool:
        return split_id in self._working

    def load(self, split_id: str, arrived: WireSplit) -> None:
        """A split this reader now reads, at ``arrived``'s position: its state as saved with
        that position (an empty one if none was saved)."""
        raw = self._committed.get(split_id)
        if raw is None:
            self._working[split_id] = _Working({}, None, None)
            return
        try:
            saved = SavedState.decode(raw)
        except ValueError as exc:
            raise SplitStateMismatch(f"the saved state of split {split_id} cannot be read ({exc})") from None
        if not _same_split(saved.split, arrived):
            raise SplitStateMismatch(
                f"split {split_id} arrived as {orjson.dumps(arrived).decode()} but its state was saved with "
                f"{orjson.dumps(saved.split).decode()}: applying it would count records twice or not at all, "
                "so the reader stops (a bug to report, with both records)"
            )
        self._working[split_id] = _Working(saved.state, orjson.dumps(saved.state), saved.split)

    def state(self, split_id: str) -> SplitState:
        """The working state of an owned split (loaded first)."""
        return self._working[split_id].state

    def views(self, split_ids: Iterable[str]) -> dict[str, SplitState]:
        return {split_id: self._working[split_id].state for split_id in split_ids}

    def loaded(self) -> Iterator[str]:
        return iter(self._working)

    # -- checkpoints ----------------------------------------------------------------------

    def plan(self, splits: Iterable[WireSplit], finished: Iterable[str]) -> list[StateWrite]:
        """What the checkpoint of ``splits`` (the unfinished splits at their positions,
        those given back included) and ``finished`` writes: each state that changed or
        whose split moved, and a deletion for each finished split that had one. Nothing
        changes here until ``committed``."""
        writes: list[StateWrite] = []
        for split in splits:
            working = self._working.get(split["split_id"])
            if working is None:
                continue
            try:
                text = orjson.dumps(working.state)
            except TypeError as exc:
                raise SplitStateUnsaveable(
                    f"the state of split {split['split_id']} cannot be saved as JSON ({exc}): keep only "
                    "text, numbers, booleans, None, lists and dicts with text keys in it"
                ) from None
            if working.saved_split is None:
                if not working.state:
                    continue  # nothing saved and nothing to save: no record
            elif text == working.saved_json and _same_split(split, working.saved_split):
                continue
            writes.append(StateWrite(split["split_id"], SavedState(dict(split), orjson.loads(text))))
        for split_id in finished:
            if split_id in self._working or split_id in self._committed:
                writes.append(StateWrite(split_id, None))
        self._pending = writes
        return writes

    def committed(self, gone: Iterable[str]) -> None:
        """The planned writes are committed; the splits in ``gone`` (finished, given back)
        are no longer this reader's."""
        for write in self._pending:
            if write.saved is None:
                self._committed.pop(write.split_id, None)
                continue
            raw = write.saved.encode()
            self._committed[write.split_id] = raw
            working = self._working.get(write.split_id)
            if working is not None:
                working.saved_json = orjson.dumps(write.saved.state)
                working.saved_split = write.saved.split
        self._pending = []
        for split_id in gone:
            self._working.pop(split_id, None)

    def discard(self) -> None:
        """What was processed since the last committed checkpoint will be read again: every
        working state goes, to be loaded again from what was committed."""
        self._working.clear()
        self._pending = []
