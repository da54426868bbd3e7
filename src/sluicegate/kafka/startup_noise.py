"""Errors Kafka clients log at a normal start.

aiokafka logs every failed group-coordinator lookup at ERROR and retries it. On a fresh
cluster the broker creates ``__consumer_offsets`` when the first group asks for its
coordinator, so the first lookups of every first start fail with
``GroupCoordinatorNotAvailableError``: an ERROR for nothing wrong, which teaches people to
ignore ERROR lines. ``RetriedLookupFilter`` turns the retried ones into INFO lines that say
so; a lookup error aiokafka does not retry stays an ERROR."""

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
