"""A retried group-coordinator lookup at start is an INFO line that says it is normal;
one aiokafka does not retry stays an ERROR (issue 24 item 3: no ERROR for a normal start)."""

from __future__ import annotations

import logging

import pytest
from aiokafka import errors

from sluicegate.kafka.startup_noise import (
    LOOKUP_FAILED,
    LOOKUP_LOGGER,
    OFFSETS_FAILED,
    OFFSETS_LOGGER,
    quiet_fencing_leftovers,
    quiet_startup_noise,
)


def test_a_retried_lookup_is_info_and_a_fatal_one_stays_an_error(caplog: pytest.LogCaptureFixture) -> None:
    quiet_startup_noise()
    quiet_startup_noise()  # idempotent: one filter
    logger = logging.getLogger(LOOKUP_LOGGER)
    assert len(logger.filters) == 1
    caplog.set_level(logging.INFO, logger=LOOKUP_LOGGER)
    logger.error(LOOKUP_FAILED, errors.GroupCoordinatorNotAvailableError())
    logger.error(LOOKUP_FAILED, errors.GroupAuthorizationFailedError())
    retried, fatal = caplog.records
    assert retried.levelno == logging.INFO and "normal while the broker starts it" in retried.getMessage()
    assert "GroupCoordinatorNotAvailableError" in retried.getMessage()
    assert fatal.levelno == logging.ERROR and "Group Coordinator Request failed" in fatal.getMessage()


def test_offsets_of_a_partition_just_created_retried_are_info_and_other_failures_stay_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker names a new partition's leader a moment before it serves it: the first
    ListOffsets of a coordinator that just created its topics fails, and aiokafka retries."""
    quiet_startup_noise()
    logger = logging.getLogger(OFFSETS_LOGGER)
    assert len(logger.filters) == 1
    caplog.set_level(logging.INFO, logger=OFFSETS_LOGGER)
    logger.error(OFFSETS_FAILED, 1, errors.NotLeaderForPartitionError())
    logger.error(OFFSETS_FAILED, 1, errors.TopicAuthorizationFailedError())
    retried, fatal = caplog.records
    assert retried.levelno == logging.INFO and "partition just created" in retried.getMessage()
    assert "NotLeaderForPartitionError" in retried.getMessage() and "broker 1" in retried.getMessage()
    assert fatal.levelno == logging.ERROR and "Failed fetch offsets" in fatal.getMessage()


def test_the_futures_a_fenced_producer_leaves_behind_log_nothing_and_other_lost_errors_still_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio
    import gc

    quiet_fencing_leftovers()
    caplog.set_level(logging.ERROR, logger="asyncio")

    async def leave_failed_futures() -> None:
        loop = asyncio.get_running_loop()
        for exc in (errors.ProducerFenced(), errors.KafkaTimeoutError()):
            loop.create_future().set_exception(exc)  # never retrieved: asyncio logs it when collected
        gc.collect()

    asyncio.run(leave_failed_futures())
    gc.collect()
    lost = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert [type(r.exc_info[1]).__name__ for r in lost if r.exc_info] == ["KafkaTimeoutError"]
