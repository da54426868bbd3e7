"""Per-split event time -> the reader's watermark, and watermark alignment.

The reader's watermark is the minimum, over the splits it owns and has not
finished, of the largest event time seen in each split. A split in which no
event time has been seen yet does not count; when no split has shown one the
watermark is ``None`` (the coordinator then does not let this reader hold the
source's low watermark back; docs/protocol.md semantics 5).

With alignment on (a ``max_allowed_watermark`` announced), splits whose own
watermark is past the bound are paused until the bound catches up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sluicegate.api.reader import Record


@dataclass(frozen=True)
class AlignmentChange:
    to_pause: list[str] = field(default_factory=list)
    to_resume: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.to_pause or self.to_resume)


class SplitWatermarks:
    def __init__(self) -> None:
        self._max: dict[str, int | None] = {}
        self._paused: set[str] = set()

    def add(self, split_ids: Iterable[str]) -> None:
        for split_id in split_ids:
            self._max.setdefault(split_id, None)

    def remove(self, split_ids: Iterable[str]) -> None:
        for split_id in split_ids:
            self._max.pop(split_id, None)
            self._paused.discard(split_id)

    def clear(self) -> None:
        self._max.clear()
        self._paused.clear()

    def observe(self, records: Iterable[Record]) -> None:
        for record in records:
            t = record.event_time_ms
            if t is None:
                continue
            if record.split_id not in self._max:
                continue  # not a split this reader owns (or already finished)
            current = self._max[record.split_id]
            if current is None or t > current:
                self._max[record.split_id] = t

    def split_watermark(self, split_id: str) -> int | None:
        return self._max.get(split_id)

    @property
    def split_ids(self) -> list[str]:
        return list(self._max)

    @property
    def paused(self) -> frozenset[str]:
        return frozenset(self._paused)

    def current(self) -> int | None:
        seen = [t for t in self._max.values() if t is not None]
        return min(seen) if seen else None

    def align(self, max_allowed_watermark: int | None) -> AlignmentChange:
        """Which splits to pause (past the bound) and which to resume (back within it)."""
        if max_allowed_watermark is None:
            beyond: set[str] = set()
        else:
            beyond = {s for s, t in self._max.items() if t is not None and t > max_allowed_watermark}
        change = AlignmentChange(to_pause=sorted(beyond - self._paused), to_resume=sorted(self._paused - beyond))
        self._paused = beyond
        return change
