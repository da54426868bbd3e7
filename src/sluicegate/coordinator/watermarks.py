"""The low-watermark service of FLINK-4576, with Flink's watermark alignment bound."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class WatermarkState:
    low_watermark: int | None
    max_allowed_watermark: int | None


class WatermarkAggregator:
    """Minimum of the latest watermarks of live, non-idle readers; never decreasing.

    A reader that has reported no event time yet (None) does not hold the low
    watermark back; a removed (failed, fenced, departed) reader stops counting at
    once; when every reader is idle the low watermark stays where it was.

    The counting watermarks are also kept in a heap (lazy deletion: an entry that no
    longer matches its subtask's counting watermark is dropped when it reaches the
    top), so a report costs O(log readers) amortised: with 10,000 readers a min over
    all of them on every heartbeat made a round of heartbeats quadratic (FLINK-32420
    is the same fix in Flink).
    """

    def __init__(self, max_drift_ms: int | None = None, low_watermark: int | None = None) -> None:
        self._max_drift_ms = max_drift_ms
        self._latest: dict[int, int | None] = {}
        self._counting: dict[int, int] = {}
        """The subtasks that hold the low watermark back (non-idle, with a number): their watermark."""
        self._heap: list[tuple[int, int]] = []
        """(watermark, subtask): every entry of ``_counting`` and some stale ones."""
        self._low: int | None = low_watermark

    def update(self, subtask: int, watermark: int | None, idle: bool) -> bool:
        """Record a reader's report; returns True when the low watermark advanced."""
        previous = self._latest.get(subtask)
        if watermark is None or (previous is not None and watermark < previous):
            watermark = previous  # a reader's own watermark never goes back either
        self._latest[subtask] = watermark
        counting = None if idle else watermark
        if self._counting.get(subtask) == counting:
            return False  # nothing that decides the minimum changed
        self._set_counting(subtask, counting)
        return self._recompute()

    def remove(self, subtask: int) -> bool:
        self._latest.pop(subtask, None)
        self._set_counting(subtask, None)
        return self._recompute()

    def _set_counting(self, subtask: int, watermark: int | None) -> None:
        if self._counting.get(subtask) == watermark:
            return
        if watermark is None:
            del self._counting[subtask]  # its heap entry goes stale
            return
        self._counting[subtask] = watermark
        heapq.heappush(self._heap, (watermark, subtask))
        if len(self._heap) > 2 * len(self._counting) + 64:  # too many stale entries: rebuild
            self._heap = [(wm, s) for s, wm in self._counting.items()]
            heapq.heapify(self._heap)

    def _minimum(self) -> int | None:
        heap, counting = self._heap, self._counting
        while heap and counting.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _recompute(self) -> bool:
        candidate = self._minimum()
        if candidate is None:
            return False
        if self._low is None or candidate > self._low:
            self._low = candidate
            return True
        return False

    @property
    def state(self) -> WatermarkState:
        bound = None
        if self._max_drift_ms is not None and self._low is not None:
            bound = self._low + self._max_drift_ms
        return WatermarkState(self._low, bound)

    def snapshot(self) -> dict[str, Any]:
        return {"low_watermark": self._low}
