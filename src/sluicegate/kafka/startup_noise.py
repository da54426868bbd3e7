"""Errors Kafka clients log at a normal start, and after a normal fencing.

aiokafka logs some failures it retries at ERROR, and two happen at every normal start:

- a failed group-coordinator lookup: on a fresh cluster the broker creates
  ``__consumer_offsets`` when the first group asks for its coordinator, so the first
  lookups fail with ``GroupCoordinatorNotAvailableError``;
- a failed offsets request on a partition just created: the broker's metadata names its
  leader a moment before that broker serves it (``NotLeaderForPartitionError``), and the
  coordinator creates its topics, then reads their ends at once (a loaded machine showed it
  in half the starts).

An ERROR for nothing wrong teaches people to ignore ERROR lines. ``RetriedErrorFilter``
turns the retried ones into INFO lines that say so; an error that is not retriable stays an
ERROR.

A coordinator whose producer is fenced (a successor took over: a normal handover) steps
down and says so. aiokafka fails the batches it still held with ``ProducerFenced`` too, and
nobody reads those internal futures, so asyncio logs each at ERROR, with a traceback, as
"Future exception was never retrieved". ``FencedLeftoversFilter`` drops exactly those."""

from __future__ import annotations

import logging

from aiokafka import errors

LOOKUP_LOGGER = "aiokafka.consumer.group_coordinator"
LOOKUP_FAILED = "Group Coordinator Request failed: %s"
OFFSETS_LOGGER = "aiokafka.consumer.fetcher"
OFFSETS_FAILED = "Failed fetch offsets from %s: %s"
RETRIED = {
    # logger -> (aiokafka's message, what it means at a start; same arguments)
    LOOKUP_LOGGER: (
        LOOKUP_FAILED,
        "group coordinator not available yet (normal while the broker starts it): %s; retrying",
    ),
    OFFSETS_LOGGER: (
        OFFSETS_FAILED,
        "offsets not served yet by broker %s (normal for a partition just created): %s; retrying",
    ),
}


class RetriedErrorFilter(logging.Filter):
    def __init__(self, message: str, reworded: str) -> None:
        super().__init__()
        self.message = message
        self.reworded = reworded

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == self.message and record.levelno == logging.ERROR and _retried(record):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = self.reworded
        return True


def _retried(record: logging.LogRecord) -> bool:
    """Whether the error the record names is one Kafka clients retry."""
    args = record.args if isinstance(record.args, tuple) else ()
    return any(isinstance(arg, errors.KafkaError) and bool(arg.retriable) for arg in args)


def quiet_startup_noise() -> None:
    """Install the filters on the loggers of ``RETRIED`` (once): a logger's filter holds
    whatever handlers a framework (Faust's worker) sets up later."""
    for name, (message, reworded) in RETRIED.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, RetriedErrorFilter) for f in logger.filters):
            logger.addFilter(RetriedErrorFilter(message, reworded))


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
