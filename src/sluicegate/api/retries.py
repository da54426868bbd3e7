"""How loudly to report a failure that repeats (a discovery that cannot reach its
cluster or list its directory, retried every few seconds): loud at the first, the
tenth and every sixtieth in a row, quieter in between, so an outage is seen at once
and reminded of without flooding the log."""

from __future__ import annotations

import logging


def repeated_failure_level(failures_in_a_row: int) -> int:
    """The logging level for the ``failures_in_a_row``-th failure in a row (from 1)."""
    loud = failures_in_a_row in (1, 10) or failures_in_a_row % 60 == 0
    return logging.ERROR if loud else logging.WARNING
