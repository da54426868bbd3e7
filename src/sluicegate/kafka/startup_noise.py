"""Errors Kafka clients log at a normal start, and after a normal fencing.

aiokafka logs every failed group-coordinator lookup at ERROR and retries it. On a fresh
cluster the broker creates ``__consumer_offsets`` when the first group asks for its
coordinator, so the first lookups of every first start fail with
``GroupCoordinatorNotAvailableError``: an ERROR for nothing wrong, which teaches people to
ignore ERROR lines. ``RetriedLookupFilter`` turns the retried ones into INFO lines that say
so; a lookup error aiokafka does not retry stays an ERROR.

A coordinator whose producer is fenced (a successor took over: a normal handover) steps
down and says so. aiokafka fails the batches it still held with ``ProducerFenced`` too, and
nobody reads those internal futures, so asyncio logs each at ERROR, with a traceback, as
"Future exception was never retrieved". ``FencedLeftoversFilter`` drops exactly those."""

from __future__ import annotations

import logging

from aiokafka import errors

LOOKUP_LOGGER = "aiokafka.consumer.group_coordinator"
LOOKUP_FAILED = "Group Coordinator Request failed: %s"


class RetriedLookupFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == LOOKUP_FAILED and record.levelno == logging.ERROR and _retried(record):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "group coordinator not available yet (normal while the broker starts it): %s; retrying"
        return True


def _retried(record: logging.LogRecord) -> bool:
    args = record.args if isinstance(record.args, tuple) else ()
    return bool(args) and isinstance(args[0], errors.KafkaError) and bool(args[0].retriable)


def quiet_startup_noise() -> None:
    """Install the filter on the logger that logs the lookups (once): a logger's filter
    holds whatever handlers a framework (Faust's worker) sets up later."""
    logger = logging.getLogger(LOOKUP_LOGGER)
    if not any(isinstance(f, RetriedLookupFilter) for f in logger.filters):
        logger.addFilter(RetriedLookupFilter())


class FencedLeftoversFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        leftover = isinstance(exc, errors.ProducerFenced) and str(record.msg).startswith(NEVER_RETRIEVED)
        return not leftover


NEVER_RETRIEVED = "Future exception was never retrieved"


def quiet_fencing_leftovers() -> None:
    """Install ``FencedLeftoversFilter`` on asyncio's logger (once)."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, FencedLeftoversFilter) for f in logger.filters):
        logger.addFilter(FencedLeftoversFilter())
