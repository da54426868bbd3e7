"""A tiny in-test coordinator: ``CoordinatorCore`` driven by aiokafka in an asyncio task.

It consumes ``NS.S.coordinator`` (read_committed, from the beginning), feeds each
record to ``core.on_message``, calls ``core.tick`` every ``tick_ms``, and produces
the resulting messages to partition ``env.subtask`` of ``NS.S.readers``. It keeps
no state of its own (no coordinator-state topic, no transactions): good enough
to drive reader hosts in integration tests, not a replacement for the real
coordinator process.

    async with InlineCoordinator(bootstrap, source_name, source, max_parallelism=2) as coord:
        ...
        await coord.wait_until(coord.core.is_finished, timeout_s=30)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sluicegate.api.source import Source
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.core import CoordinatorCore, Effects
from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol import DecodeError, Direction, Envelope, decode, encode, encode_key
from sluicegate.protocol.topics import ControlTopics, topic_specs

log = logging.getLogger("sluicegate.tests.inline_coordinator")


async def create_topics(bootstrap: str, source: str, max_parallelism: int, ns: str = "sluicegate") -> None:
    await apply_topics(bootstrap, topic_specs(ns, source, max_parallelism))


class InlineCoordinator:
    def __init__(
        self,
        bootstrap: str,
        source_name: str,
        source: Source[Any],
        max_parallelism: int,
        *,
        namespace: str = "sluicegate",
        tick_ms: int = 200,
        session_timeout_ms: int = 10_000,
        reader_departure_timeout_ms: int = 60_000,
        epoch: int = 1,
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = ControlTopics.for_source(source_name, namespace)
        self.config = CoordinatorConfig(
            source=source_name,
            max_parallelism=max_parallelism,
            session_timeout_ms=session_timeout_ms,
            reader_departure_timeout_ms=reader_departure_timeout_ms,
        )
        self.core: CoordinatorCore[Any] = CoordinatorCore(source, self.config, epoch=epoch)
        self.tick_ms = tick_ms
        self.sent: list[Envelope] = []
        """Every message produced to the readers, in order."""
        self.received: list[Envelope] = []
        """Every decoded inbox record, in order."""
        self.undecodable = 0
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> InlineCoordinator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, enable_idempotence=True, acks="all")
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        await self._consumer.start()
        tp = TopicPartition(self.topics.coordinator, 0)
        self._consumer.assign([tp])
        await self._consumer.seek_to_beginning(tp)
        await self._carry_out(self.core.start(_now_ms()))
        self._task = asyncio.create_task(self._run(tp), name="inline-coordinator")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for client in (self._consumer, self._producer):
            if client is not None:
                await client.stop()
        self._consumer = self._producer = None

    async def _run(self, tp: TopicPartition) -> None:
        assert self._consumer is not None
        next_tick = time.monotonic()
        while True:
            timeout = max(0, int((next_tick - time.monotonic()) * 1000))
            batches = await self._consumer.getmany(tp, timeout_ms=timeout, max_records=500)
            for record in batches.get(tp, []):
                try:
                    env = decode(record.value, Direction.TO_COORDINATOR)
                except DecodeError as exc:
                    self.undecodable += 1
                    log.warning("undecodable inbox record at offset %d: %s", record.offset, exc)
                    continue
                self.received.append(env)
                await self._carry_out(self.core.on_message(env, record.offset, _now_ms()))
            if time.monotonic() >= next_tick:
                await self._carry_out(self.core.tick(_now_ms()))
                next_tick = time.monotonic() + self.tick_ms / 1000

    async def _carry_out(self, effects: Effects) -> None:
        assert self._producer is not None
        if effects.rejection:
            log.warning("rejected inbox record: %s", effects.rejection)
        futures = []
        for env in effects.messages:
            futures.append(
                await self._producer.send(
                    self.topics.readers,
                    encode(env),
                    key=encode_key(env.subtask),
                    partition=env.subtask,
                )
            )
            self.sent.append(env)
        if futures:
            await asyncio.gather(*futures)

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self._task is not None and self._task.done():
                self._task.result()  # re-raise what killed the loop
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s} s")
            await asyncio.sleep(0.1)

    def sent_of_type(self, type_: str, subtask: int | None = None) -> list[Envelope]:
        return [e for e in self.sent if e.type == type_ and (subtask is None or e.subtask == subtask)]

    def received_of_type(self, type_: str, subtask: int | None = None) -> list[Envelope]:
        return [e for e in self.received if e.type == type_ and (subtask is None or e.subtask == subtask)]


def _now_ms() -> int:
    return int(time.time() * 1000)
