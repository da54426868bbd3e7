"""How long a host waits before it starts a failed coordinator of a source again."""

from __future__ import annotations

RESTART_DELAY_S = 1.0
RESTART_DELAY_MAX_S = 60.0
STABLE_AFTER_S = 60.0
"""A runner that served this long before failing starts a new streak of restarts."""


class RestartBackoff:
    """Exponential, capped delays between restarts of a coordinator that keeps failing:
    1, 2, 4 ... 60 s. A coordinator whose commit cannot succeed (a record the broker
    refuses, a broker that refuses transactions) used to restart every second for ever."""

    def __init__(self, first_s: float = RESTART_DELAY_S, max_s: float = RESTART_DELAY_MAX_S) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.streak = 0

    def failed(self, served_s: float) -> float:
        """The delay before the next attempt, after one that served ``served_s`` seconds."""
        self.streak = 1 if served_s >= STABLE_AFTER_S else self.streak + 1
        return float(min(self.max_s, self.first_s * 2 ** (self.streak - 1)))
