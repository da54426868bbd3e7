"""The coordinator loop's time, injected: the wall clock stamps the core's steps and the
monotonic clock paces ticks and commits. Tests hand in their own and move it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch (what the core's deadlines count in)."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go back (what intervals are measured in)."""
        ...


class SystemClock:
    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()
