"""``KafkaControlChannel``: the reader hosts' control channel over aiokafka (see reader/channel.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from sluicegate.kafka.clients import control_consumer, plain_producer
from sluicegate.kafka.compacted import read_all_records
from sluicegate.kafka.security import KafkaSecurity
from sluicegate.kafka.topics import TopicApplyError, TopicsMissingError, wait_for_topics
from sluicegate.protocol.topics import ControlTopics
from sluicegate.reader.channel import ControlChannel, RawRecord

log = logging.getLogger("sluicegate.reader")

FOREVER_S = 10.0**9
RETRY_S = 1.0
LETTER_MAX_BYTES = 16 * 1024 * 1024
"""The largest dead letter read back: a copied control record, which Kafka's default
message size limit keeps far below this."""


class KafkaNeverAnswered(TopicApplyError):
    """Kafka did not answer once since this channel started to open: a wrong address, or a
    broker that is not up (a process that reached Kafka before and lost it retries instead)."""


class SourceNotSetUp(TimeoutError):
    """The source's control topics did not appear in time: no coordinator ever ran for this
    source name and namespace on this cluster, nor ``sluicegate topics apply``."""

    def __init__(self, bootstrap_servers: str, missing: Sequence[str], waited_s: float) -> None:
        super().__init__(f"topics {', '.join(missing)} did not appear on {bootstrap_servers} in {waited_s:.0f} s")
        self.bootstrap_servers = bootstrap_servers
        self.missing = list(missing)
        self.waited_s = waited_s

    def advice(self, source: str, namespace: str, wait_setting: str, self_setup: str = "") -> str:
        """What a person does about it, naming the host's own setting for the wait and how
        the host sets the source up itself (``self_setup``)."""
        return (
            f"source {source} is not set up in namespace {namespace} on {self.bootstrap_servers}: "
            f"its control topics ({', '.join(self.missing)}) did not appear in {self.waited_s:.0f} s. "
            f"Start its coordinator (it creates them), run `sluicegate topics apply --source {source}`"
            f"{f' or {self_setup}' if self_setup else ''}, "
            f"and check the source name and namespace; if its coordinator starts later, wait longer with "
            f"{wait_setting}"
        )


class KafkaControlChannel(ControlChannel):
    def __init__(
        self,
        topics: ControlTopics,
        bootstrap_servers: str,
        client_id: str,
        topic_wait_timeout_s: float | None = None,
        security: KafkaSecurity | None = None,
        never_answered_timeout_s: float | None = None,
    ) -> None:
        super().__init__(topics)
        self.security = security
        """None: the process's settings (security.current_security)."""
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.topic_wait_timeout_s = topic_wait_timeout_s
        """How long ``open`` waits for the topics (None: for ever)."""
        self.never_answered_timeout_s = never_answered_timeout_s
        """How long ``open`` retries a Kafka that has not answered yet before it raises
        KafkaNeverAnswered (None: as long as it waits for the topics)."""
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: dict[int, TopicPartition] = {}

    async def open(self, subtasks: Sequence[int], extra_topics: Sequence[str] = ()) -> dict[str, int]:
        topics = self.topics
        names = [topics.coordinator, topics.readers, topics.dead_letter, *extra_topics]
        partitions = await self._wait_for_topics(names)
        self._producer = plain_producer(self.bootstrap_servers, f"{self.client_id}.plain", self.security)
        await self._producer.start()
        self._consumer = control_consumer(self.bootstrap_servers, f"{self.client_id}.control", self.security)
        await self._consumer.start()
        count = partitions[topics.readers]
        self._partitions = {s: TopicPartition(topics.readers, s) for s in subtasks if s < count}
        self._consumer.assign(list(self._partitions.values()))
        self.contact()
        return partitions

    async def _wait_for_topics(self, names: list[str]) -> dict[str, int]:
        """Wait for the topics (never creating them); an unreachable broker is retried too."""
        timeout = self.topic_wait_timeout_s
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        warned = False
        while True:
            left = FOREVER_S if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await wait_for_topics(self.bootstrap_servers, names, left, security=self.security)
            except TopicsMissingError as exc:
                raise SourceNotSetUp(self.bootstrap_servers, exc.missing, time.monotonic() - started) from None
            except TopicApplyError as exc:  # cannot reach Kafka (yet)
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                waited = time.monotonic() - started
                if self.never_answered_timeout_s is not None and waited >= self.never_answered_timeout_s:
                    raise KafkaNeverAnswered(
                        f"Kafka at {self.bootstrap_servers} did not answer in {waited:.0f} s since start: {exc}"
                    ) from None
                # once, not every retry: the state (not reachable) does not change until it answers
                log.log(logging.DEBUG if warned else logging.WARNING, "waiting for Kafka: %s", exc)
                warned = True
                await asyncio.sleep(2.0)

    async def capture(self, subtasks: Iterable[int]) -> None:
        consumer = self._require_consumer()
        tps = [self._partitions[s] for s in subtasks]
        while True:
            try:
                ends = await consumer.end_offsets(tps)
                break
            except KafkaError as exc:
                log.warning("cannot read the end offsets of %s: %s; retrying", self.topics.readers, exc)
                await asyncio.sleep(RETRY_S)
        for tp in tps:
            consumer.seek(tp, ends[tp])

    async def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        wait: bool,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> bool:
        producer = self._producer
        if producer is None:
            raise RuntimeError("the control channel is not open")
        future = await producer.send(topic, value, key=key, headers=headers)
        if wait:
            await future
            return True
        future.add_done_callback(self._on_delivered)
        return False

    def _on_delivered(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            self.contact()
        else:
            log.warning("a message to the coordinator was not delivered: %s", exc)

    async def _fetch(self, timeout_ms: int, subtask: int | None) -> list[tuple[int, RawRecord]]:
        consumer = self._require_consumer()
        partitions = list(self._partitions.values()) if subtask is None else [self._partitions[subtask]]
        try:
            batches = await consumer.getmany(*partitions, timeout_ms=timeout_ms, max_records=1000)
        except KafkaError as exc:
            log.warning("reading %s failed: %s", self.topics.readers, exc)
            await asyncio.sleep(0.5)
            return []
        return [
            (tp.partition, RawRecord(r.topic, r.partition, r.offset, r.key, r.value))
            for tp, records in sorted(batches.items(), key=lambda item: item[0].partition)
            for r in records
        ]

    async def _letters_in_topic(self) -> list[dict[str, bytes]]:
        records = await read_all_records(
            self.bootstrap_servers, self.topics.dead_letter, LETTER_MAX_BYTES, self.security
        )
        return [dict(r.headers) for r in records]

    def _require_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("the control channel is not open")
        return self._consumer

    async def close(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                try:
                    await client.stop()
                except Exception as exc:
                    log.debug("stopping a Kafka client: %s", exc)
        self._consumer = self._producer = None
