"""A coordinator's Kafka log closes in bounded time even when a client's stop waits on a
dead broker (issue 49: a fenced worker's producer stop hung while the broker stayed down,
and /health listed the source active on two workers meanwhile)."""

from __future__ import annotations

import asyncio
import time

import pytest

from sluicegate.coordinator import kafka_log
from sluicegate.coordinator.kafka_log import KafkaCoordinatorLog
from sluicegate.protocol.topics import ControlTopics


class _Client:
    def __init__(self, hangs: bool) -> None:
        self.hangs = hangs
        self.stopped = False

    async def stop(self) -> None:
        if self.hangs:
            await asyncio.Event().wait()  # a request to a broker that never answers
        self.stopped = True


async def test_a_client_whose_stop_hangs_is_left_and_the_others_still_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_log, "CLOSE_TIMEOUT_S", 0.2)
    log = KafkaCoordinatorLog("unused:9092", ControlTopics.for_source("s"), "sluicegate.s.coordinator")
    consumer, producer, marker = _Client(False), _Client(True), _Client(False)
    log._consumer, log._producer, log._marker = consumer, producer, marker

    began = time.monotonic()
    await log.close()
    assert time.monotonic() - began < 2.0
    assert (consumer.stopped, producer.stopped, marker.stopped) == (True, False, True)
