"""What a stop signal (SIGTERM, SIGINT) asks of a running host: the first a graceful stop,
another one later a stop at once.

A signal sent to a process and to its process group arrives twice at the same moment:
``timeout`` does so, as do supervisors that signal the group and a terminal's Ctrl-C
under a wrapper script. Those two are one request. Only a signal that comes
``AGAIN_AFTER_S`` or more after the first is the user's second one. Once the host has
stopped, its process ignores them: a copy that comes after the stop must not turn a
clean exit into a death by the signal.
"""

from __future__ import annotations

import enum

AGAIN_AFTER_S = 1.0


class StopRequest(enum.Enum):
    GRACEFUL = "graceful"
    AT_ONCE = "at once"
    SAME = "the same request"
    """A copy of the first signal (delivered to the process and its group): nothing new."""


class StopSignals:
    def __init__(self) -> None:
        self._first_s: float | None = None

    @property
    def stopping(self) -> bool:
        """A stop was asked for: the process is on its way out."""
        return self._first_s is not None

    def seen(self, now_s: float) -> StopRequest:
        """What a stop signal received at monotonic time ``now_s`` asks for."""
        if self._first_s is None:
            self._first_s = now_s
            return StopRequest.GRACEFUL
        if now_s - self._first_s < AGAIN_AFTER_S:
            return StopRequest.SAME
        return StopRequest.AT_ONCE
