"""SplitAssignmentTracker: which subtask owns which split, and since which AddSplits.

Flink's tracker keeps assignments per checkpoint; here the unit is the AddSplits
``seq``. A subtask's CheckpointAck with ``applied_seq`` makes every assignment up
to it part of the subtask's durable state; a failure hands back the rest
(``take_uncheckpointed``). Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sluicegate.api.split import WireSplit


class SplitAlreadyOwnedError(RuntimeError):
    def __init__(self, split_id: str, owner: int, wanted_by: int) -> None:
        super().__init__(
            f"split {split_id!r} is owned by subtask {owner}; refusing to assign it to subtask {wanted_by}"
        )
        self.split_id = split_id


@dataclass(slots=True)
class OwnedSplit:
    split: WireSplit
    """The split as last known: as assigned, or with the position of the last checkpoint."""
    seq: int
    """The AddSplits seq that gave it to the subtask (0: restored, no seq known)."""


@dataclass(frozen=True, slots=True)
class CheckpointOutcome:
    missing: list[str]
    """Owned and covered by applied_seq, but absent from the checkpoint and not finished."""
    unknown: list[str]
    """In the checkpoint but not owned by the subtask (ignored)."""


class SplitAssignmentTracker:
    def __init__(self) -> None:
        self._owned: dict[int, dict[str, OwnedSplit]] = {}
        self._applied_seq: dict[int, int] = {}
        self._owner: dict[str, int] = {}

    # -- queries ------------------------------------------------------------

    def owner_of(self, split_id: str) -> int | None:
        return self._owner.get(split_id)

    def owned(self, subtask: int) -> list[WireSplit]:
        return [o.split for o in self._owned.get(subtask, {}).values()]

    def owned_ids(self, subtask: int) -> set[str]:
        return set(self._owned.get(subtask, ()))

    def owned_count(self, subtask: int) -> int:
        return len(self._owned.get(subtask, ()))

    def applied_seq(self, subtask: int) -> int:
        return self._applied_seq.get(subtask, 0)

    def total_owned(self) -> int:
        return len(self._owner)

    def uncheckpointed_count(self, subtask: int) -> int:
        applied = self.applied_seq(subtask)
        return sum(1 for o in self._owned.get(subtask, {}).values() if o.seq > applied)

    # -- changes ------------------------------------------------------------

    def check_assignable(self, subtask: int, split_ids: Iterable[str]) -> None:
        for split_id in split_ids:
            owner = self._owner.get(split_id)
            if owner is not None:
                raise SplitAlreadyOwnedError(split_id, owner, subtask)

    def record_assignment(self, subtask: int, seq: int, splits: Iterable[WireSplit]) -> None:
        owned = self._owned.setdefault(subtask, {})
        for split in splits:
            split_id = split["split_id"]
            owner = self._owner.get(split_id)
            if owner is not None:
                raise SplitAlreadyOwnedError(split_id, owner, subtask)
            owned[split_id] = OwnedSplit(split, seq)
            self._owner[split_id] = subtask

    def on_checkpoint(self, subtask: int, applied_seq: int, splits: Iterable[WireSplit]) -> CheckpointOutcome:
        """Record a durable reader checkpoint: positions of its splits up to ``applied_seq``."""
        owned = self._owned.setdefault(subtask, {})
        applied_seq = max(applied_seq, self.applied_seq(subtask))
        self._applied_seq[subtask] = applied_seq
        seen: set[str] = set()
        unknown: list[str] = []
        for split in splits:
            split_id = split["split_id"]
            entry = owned.get(split_id)
            if entry is None:
                unknown.append(split_id)
                continue
            seen.add(split_id)
            entry.split = split
        missing = [sid for sid, o in owned.items() if o.seq <= applied_seq and sid not in seen]
        return CheckpointOutcome(missing=missing, unknown=unknown)

    def finish(self, subtask: int, split_ids: Iterable[str]) -> list[str]:
        """Drop finished splits; returns the ids the subtask did not own."""
        owned = self._owned.setdefault(subtask, {})
        not_owned: list[str] = []
        for split_id in split_ids:
            if owned.pop(split_id, None) is None:
                not_owned.append(split_id)
            else:
                del self._owner[split_id]
        return not_owned

    def take_uncheckpointed(self, subtask: int) -> list[WireSplit]:
        """Release the splits assigned after the subtask's last checkpoint (attempt failure)."""
        applied = self.applied_seq(subtask)
        owned = self._owned.get(subtask, {})
        released = [sid for sid, o in owned.items() if o.seq > applied]
        return [self._release(subtask, sid) for sid in released]

    def take_all(self, subtask: int, positions: Mapping[str, WireSplit] | None = None) -> list[WireSplit]:
        """Release every split of the subtask, preferring the given positions."""
        positions = positions or {}
        released = []
        for split_id in list(self._owned.get(subtask, {})):
            split = self._release(subtask, split_id)
            released.append(positions.get(split_id, split))
        return released

    def take(self, subtask: int, split_ids: Iterable[str]) -> list[WireSplit]:
        owned = self._owned.get(subtask, {})
        return [self._release(subtask, sid) for sid in split_ids if sid in owned]

    def _release(self, subtask: int, split_id: str) -> WireSplit:
        entry = self._owned[subtask].pop(split_id)
        del self._owner[split_id]
        return entry.split

    # -- persistence ----------------------------------------------------------

    def snapshot_subtask(self, subtask: int) -> dict[str, Any]:
        owned = self._owned.get(subtask, {})
        return {"applied_seq": self.applied_seq(subtask), "owned": [[o.seq, o.split] for o in owned.values()]}

    def restore_subtask(self, subtask: int, data: Mapping[str, Any]) -> None:
        for split_id in list(self._owned.get(subtask, {})):
            self._release(subtask, split_id)
        for seq, split in data["owned"]:
            self.record_assignment(subtask, seq, [split])
        self._applied_seq[subtask] = data["applied_seq"]

    def subtasks(self) -> list[int]:
        return sorted(set(self._owned) | set(self._applied_seq))

    def snapshot(self) -> dict[str, Any]:
        return {str(s): self.snapshot_subtask(s) for s in self.subtasks()}

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> SplitAssignmentTracker:
        tracker = cls()
        for s, part in data.items():
            tracker.restore_subtask(int(s), part)
        return tracker
