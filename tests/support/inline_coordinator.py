"""The product's coordinator loop (``SourceRunner``) in the test's event loop, watched.

It is the loop a deployed coordinator runs, over the Kafka log (kafka_log.py), with a
recorder between them: ``received`` holds every inbox record it read (decoded),
``sent`` every record to the readers that a committed transaction made visible. Tests
look at what the readers told the coordinator and what it answered without a second
copy of the loop.

    async with InlineCoordinator(bootstrap, source, "sequence", {"splits": "4"}, max_parallelism=2) as coord:
        ...
        await coord.wait_until(lambda: coord.core.is_finished(), timeout_s=30)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from sluicegate.coordinator.core import CoordinatorCore
from sluicegate.coordinator.kafka_log import KafkaCoordinatorLog
from sluicegate.coordinator.log import CoordinatorLog, InboxRecord, OutgoingRecord, StateRecord
from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.source_runner import RunnerState, SourceRunner
from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol import DecodeError, Direction, Envelope, decode
from sluicegate.protocol.names import coordinator_transactional_id
from sluicegate.protocol.topics import ControlTopics, topic_specs
from sluicegate.testing.forwarding_log import ForwardingLog


async def create_topics(bootstrap: str, source: str, max_parallelism: int, ns: str = "sluicegate") -> None:
    await apply_topics(bootstrap, topic_specs(ns, source, max_parallelism))


class RecordingLog(ForwardingLog):
    """A log that keeps what went through it: the inbox records read and the records to
    the readers committed."""

    def __init__(self, inner: CoordinatorLog, readers_topic: str) -> None:
        super().__init__(inner)
        self.readers_topic = readers_topic
        self.received: list[Envelope] = []
        self.sent: list[Envelope] = []
        self.undecodable = 0

    async def fetch(self, timeout_ms: int, max_records: int) -> list[InboxRecord]:
        records = await self.inner.fetch(timeout_ms, max_records)
        for record in records:
            try:
                self.received.append(decode(record.value, Direction.TO_COORDINATOR))
            except DecodeError:
                self.undecodable += 1
        return records

    async def commit(self, records: Sequence[OutgoingRecord], state: Sequence[StateRecord]) -> None:
        await self.inner.commit(records, state)
        self.sent += [decode(r.value, Direction.TO_READER) for r in records if r.topic == self.readers_topic]


class InlineCoordinator:
    def __init__(
        self,
        bootstrap: str,
        source_name: str,
        connector: str,
        options: Mapping[str, str],
        max_parallelism: int,
        *,
        namespace: str = "sluicegate",
        tick_ms: int = 200,
        reader_departure_timeout_ms: int = 60_000,
    ) -> None:
        topics = ControlTopics.for_source(source_name, namespace)
        kafka = KafkaCoordinatorLog(bootstrap, topics, coordinator_transactional_id(namespace, source_name))
        self.log = RecordingLog(kafka, topics.readers)
        settings = SourceSettings(
            source=source_name,
            connector=connector,
            max_parallelism=max_parallelism,
            options=dict(options),
            reader_departure_timeout_ms=reader_departure_timeout_ms,
        )
        self.runner = SourceRunner(settings, bootstrap, namespace, tick_interval_ms=tick_ms, log=self.log)

    @property
    def core(self) -> CoordinatorCore[Any]:
        assert self.runner.core is not None, "the coordinator has not started"
        return self.runner.core

    @property
    def sent(self) -> list[Envelope]:
        """Every message to the readers, in the order committed."""
        return self.log.sent

    @property
    def received(self) -> list[Envelope]:
        """Every decoded inbox record, in order."""
        return self.log.received

    @property
    def undecodable(self) -> int:
        return self.log.undecodable

    async def __aenter__(self) -> InlineCoordinator:
        self.runner.start()
        await self.wait_until(lambda: self.runner.state is RunnerState.ACTIVE, timeout_s=30)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.runner.stop()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self.runner.state in (RunnerState.FAILED, RunnerState.FENCED, RunnerState.REFUSED):
                raise AssertionError(f"the coordinator stopped: {self.runner.state.value}, {self.runner.failure}")
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s} s")
            await asyncio.sleep(0.1)

    def sent_of_type(self, type_: str, subtask: int | None = None) -> list[Envelope]:
        return [e for e in self.sent if e.type == type_ and (subtask is None or e.subtask == subtask)]

    def received_of_type(self, type_: str, subtask: int | None = None) -> list[Envelope]:
        return [e for e in self.received if e.type == type_ and (subtask is None or e.subtask == subtask)]
