"""Per-split event time -> the reader's watermark, split idleness, and watermark alignment.

The reader's watermark is the minimum, over the splits it owns and has not
finished, of the largest event time seen in each split. A split in which no
event time has been seen yet does not count; when no split has shown one the
watermark is ``None`` (the coordinator then does not let this reader hold the
source's low watermark back; docs/protocol.md semantics 5).

Split idleness (FLIP-182 / FLIP-217): with ``idle_timeout_ms`` > 0, a split that
gave no record for that long stops counting in the reader's watermark, so a quiet
split (an empty partition, a paused producer) does not hold the whole source back;
its next record makes it count again. When every split is idle the reader reports
itself idle. A split paused for alignment is never idle: it is quiet because it is
*ahead*, and letting it go idle could leave every reader idle with the bound stuck
(FLINK-32496); it gets a fresh timeout when it is resumed.

With alignment on (a ``max_allowed_watermark`` announced), splits whose own
watermark is past the bound are paused until the bound catches up.

Every method that depends on time takes ``now_ms`` (any monotonic clock in ms).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sluicegate.api.reader import Record


@dataclass(frozen=True)
class AlignmentChange:
    to_pause: list[str] = field(default_factory=list)
    to_resume: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.to_pause or self.to_resume)


class SplitWatermarks:
    def __init__(self, idle_timeout_ms: int = 0) -> None:
        if idle_timeout_ms < 0:
            raise ValueError(f"idle_timeout_ms must be >= 0 (0: off), got {idle_timeout_ms}")
        self.idle_timeout_ms = idle_timeout_ms
        """0: splits never go idle."""
        self._max: dict[str, int | None] = {}
        self._last_active_ms: dict[str, int] = {}
        self._paused: set[str] = set()

    def add(self, split_ids: Iterable[str], now_ms: int = 0) -> None:
        # a new split gets a full timeout to show its first record before it is idle
        for split_id in split_ids:
            self._max.setdefault(split_id, None)
            self._last_active_ms[split_id] = now_ms

    def remove(self, split_ids: Iterable[str]) -> None:
        for split_id in split_ids:
            self._max.pop(split_id, None)
            self._last_active_ms.pop(split_id, None)
            self._paused.discard(split_id)

    def clear(self) -> None:
        self._max.clear()
        self._last_active_ms.clear()
        self._paused.clear()

    def observe(self, records: Iterable[Record], now_ms: int = 0, *, active: bool = True) -> None:
        """Records read: raise their splits' watermarks; any record (even one without an
        event time, or an out-of-order one) is data, so its split is active again.
        ``active=False``: event times known without new data (a host that re-reports a
        position that did not move) raise the watermarks but leave the idle clocks alone."""
        for record in records:
            self.advance(record.split_id, record.event_time_ms, now_ms, active)

    def observe_event_times(self, event_times: Mapping[str, int | None], now_ms: int = 0) -> None:
        """A batch read: each split that gave records, with its greatest event time in it."""
        for split_id, event_time_ms in event_times.items():
            self.advance(split_id, event_time_ms, now_ms, True)

    def advance(self, split_id: str, event_time_ms: int | None, now_ms: int, active: bool) -> None:
        """One split's event time known now (None: none), with data read (``active``) or
        not; a split this reader does not own is left alone."""
        if split_id not in self._max:
            return  # not a split this reader owns (or already finished)
        if active:
            self._last_active_ms[split_id] = now_ms
        if event_time_ms is None:
            return
        current = self._max[split_id]
        if current is None or event_time_ms > current:
            self._max[split_id] = event_time_ms

    def split_watermark(self, split_id: str) -> int | None:
        return self._max.get(split_id)

    @property
    def split_ids(self) -> list[str]:
        return list(self._max)

    @property
    def paused(self) -> frozenset[str]:
        return frozenset(self._paused)

    def is_idle(self, split_id: str, now_ms: int) -> bool:
        if self.idle_timeout_ms == 0 or split_id not in self._max or split_id in self._paused:
            return False
        return now_ms - self._last_active_ms[split_id] >= self.idle_timeout_ms

    def idle_splits(self, now_ms: int) -> list[str]:
        return sorted(s for s in self._max if self.is_idle(s, now_ms))

    def all_idle(self, now_ms: int) -> bool:
        """Every owned split is idle (False with no split: having none is not this)."""
        return bool(self._max) and all(self.is_idle(s, now_ms) for s in self._max)

    def current(self, now_ms: int = 0) -> int | None:
        """The reader's watermark: the minimum over active splits with an event time.

        When every split is idle, the minimum over all of them: the reader then reports
        itself idle, so this value holds nothing back; it only keeps the coordinator's
        record of this reader where the reader really is.
        """
        if self.all_idle(now_ms):
            counted = [t for t in self._max.values() if t is not None]
        else:
            counted = [t for s, t in self._max.items() if t is not None and not self.is_idle(s, now_ms)]
        return min(counted) if counted else None

    def align(self, max_allowed_watermark: int | None, now_ms: int = 0) -> AlignmentChange:
        """Which splits to pause (past the bound) and which to resume (back within it)."""
        if max_allowed_watermark is None:
            beyond: set[str] = set()
        else:
            beyond = {s for s, t in self._max.items() if t is not None and t > max_allowed_watermark}
        change = AlignmentChange(to_pause=sorted(beyond - self._paused), to_resume=sorted(self._paused - beyond))
        for split_id in change.to_resume:
            self._last_active_ms[split_id] = now_ms  # quiet while paused is not idle: a fresh timeout
        self._paused = beyond
        return change
