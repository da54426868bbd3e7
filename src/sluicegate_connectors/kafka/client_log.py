"""What librdkafka says, as people want to read it.

librdkafka prints every failed connection attempt to stderr itself (several a
second while a cluster is down), which buries the one line that matters. Its
log goes to the Python logger ``sluicegate.librdkafka`` instead (quiet unless
asked for: raise that logger's level to see it), and its errors reach the
connector's log through ``error_cb``, at most one line per distinct error every
``REPEAT_S`` seconds, with the count of repeats.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("sluicegate.connectors.kafka")
LIBRDKAFKA_LOG = logging.getLogger("sluicegate.librdkafka")
if LIBRDKAFKA_LOG.level == logging.NOTSET:
    LIBRDKAFKA_LOG.setLevel(logging.CRITICAL)
REPEAT_S = 30.0


class _ErrorReporter:
    """A stable callable (client configs are compared as text, e.g. to reuse consumers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}

    def __call__(self, error: Any) -> None:
        text = error.str() if hasattr(error, "str") else str(error)
        key = text.split(":", 1)[-1].strip()[:120]
        now = time.monotonic()
        with self._lock:
            last, repeats = self._last.get(key, (float("-inf"), 0))
            if now - last < REPEAT_S:
                self._last[key] = (last, repeats + 1)
                return
            self._last[key] = (now, 0)
        more = f" (and {repeats} more like it in the last {REPEAT_S:.0f} s)" if repeats else ""
        log.warning("data cluster: %s%s", text, more)

    def __repr__(self) -> str:
        return "sluicegate-error-reporter"


report_error = _ErrorReporter()


def client_logging() -> dict[str, Any]:
    """librdkafka settings that route its log and errors as described above."""
    return {"logger": LIBRDKAFKA_LOG, "error_cb": report_error}
