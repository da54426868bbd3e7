"""The low-watermark service of FLINK-4576, with Flink's watermark alignment bound."""

from __future__ import annotations

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
    """

    def __init__(self, max_drift_ms: int | None = None, low_watermark: int | None = None) -> None:
        self._max_drift_ms = max_drift_ms
        self._latest: dict[int, int | None] = {}
        self._idle: dict[int, bool] = {}
        self._low: int | None = low_watermark

    def update(self, subtask: int, watermark: int | None, idle: bool) -> bool:
        """Record a reader's report; returns True when the low watermark advanced."""
        previous = self._latest.get(subtask)
        if watermark is not None and previous is not None:
            watermark = max(watermark, previous)  # a reader's own watermark never goes back either
        self._latest[subtask] = watermark if watermark is not None else previous
        self._idle[subtask] = idle
        return self._recompute()

    def remove(self, subtask: int) -> bool:
        self._latest.pop(subtask, None)
        self._idle.pop(subtask, None)
        return self._recompute()

    def _recompute(self) -> bool:
        active = [wm for s, wm in self._latest.items() if wm is not None and not self._idle.get(s, False)]
        if not active:
            return False
        candidate = min(active)
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
