"""Kafka clients repeat themselves: during a broker outage aiokafka logs every failed
connection attempt, about 10,000 lines a minute per process. ``RepeatFilter`` lets the
first record of each message pattern through and then one per window, saying how many
it held back, so an outage reads as a few lines a minute."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

NOISY_LOGGERS = ("aiokafka", "kafka")
WINDOW_S = 30.0


class RepeatFilter(logging.Filter):
    """Passes a record of a noisy logger if its pattern (logger, level, format string)
    was not passed within the last ``window_s``; the next one passed after a window
    carries the count of those held back. Other loggers' records always pass."""

    def __init__(
        self,
        prefixes: tuple[str, ...] = NOISY_LOGGERS,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._prefixes = prefixes
        self._window_s = window_s
        self._clock = clock
        self._last_passed: dict[tuple[str, int, str], float] = {}
        self._held_back: dict[tuple[str, int, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self._prefixes):
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        last = self._last_passed.get(key)
        if last is not None and now - last < self._window_s:
            self._held_back[key] = self._held_back.get(key, 0) + 1
            return False
        self._last_passed[key] = now
        held = self._held_back.pop(key, 0)
        if held and last is not None:
            record.msg = f"{record.msg} ({held} more like this in the last {now - last:.0f} s)"
        return True


def quiet_repeats(logger: logging.Logger | None = None) -> None:
    """Put one RepeatFilter on every handler of ``logger`` (the root logger by default):
    handler filters see the records of child loggers too, logger filters do not."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(RepeatFilter())
