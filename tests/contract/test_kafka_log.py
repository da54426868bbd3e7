"""The coordinator-log contract on real Kafka (coordinator/kafka_log.py)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced
from log_contract import SUBTASKS, LogContract, LogHarness

from sluicegate.coordinator.kafka_log import KafkaCoordinatorLog
from sluicegate.coordinator.log import CoordinatorLog
from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol.names import coordinator_transactional_id
from sluicegate.protocol.topics import ControlTopics, topic_specs

pytestmark = pytest.mark.kafka


class KafkaHarness(LogHarness):
    def __init__(self, bootstrap: str, source: str) -> None:
        self.bootstrap = bootstrap
        self.source = source
        self.topics = ControlTopics.for_source(source)
        self._logs: list[CoordinatorLog] = []
        self._producer: AIOKafkaProducer | None = None
        self._open: AIOKafkaProducer | None = None
        self.reader_transactional_id = f"sluicegate.{source}.reader-{secrets.token_hex(3)}"

    async def start(self) -> None:
        await apply_topics(self.bootstrap, topic_specs("sluicegate", self.source, SUBTASKS))
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await self._producer.start()

    async def stop(self) -> None:
        for client in (self._producer, self._open):
            if client is not None:
                await client.stop()
        for log in self._logs:
            await log.close()

    def incarnation(self) -> CoordinatorLog:
        log = KafkaCoordinatorLog(self.bootstrap, self.topics, coordinator_transactional_id("sluicegate", self.source))
        self._logs.append(log)
        return log

    async def write_inbox(self, values: list[bytes], in_open_transaction: bool = False) -> None:
        producer = self._producer
        if in_open_transaction:
            producer = self._open = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, transactional_id=self.reader_transactional_id
            )
            await producer.start()
            await producer.begin_transaction()
        assert producer is not None
        for value in values:
            await producer.send_and_wait(self.topics.coordinator, value, key=b"0", partition=0)

    async def abort_inbox_transaction(self) -> None:
        assert self._open is not None
        await self._open.abort_transaction()

    async def commit_inbox_transaction(self) -> bool:
        assert self._open is not None
        try:
            await self._open.commit_transaction()
        except ProducerFenced:
            return False
        return True

    async def visible(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        partitions = SUBTASKS if topic == self.topics.readers else 1
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, isolation_level="read_committed", enable_auto_commit=False
        )
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            end = await consumer.end_offsets(tps)
            out: list[tuple[bytes | None, bytes | None]] = []
            for tp in tps:
                while await consumer.position(tp) < end[tp]:
                    batch = await consumer.getmany(tp, timeout_ms=500)
                    out += [(r.key, r.value) for r in batch.get(tp, [])]
            return out
        finally:
            await consumer.stop()


class TestKafkaLog(LogContract):
    @pytest.fixture
    async def harness(self, kafka_bootstrap: str, unique_source: str) -> AsyncIterator[LogHarness]:
        harness = KafkaHarness(kafka_bootstrap, unique_source)
        await harness.start()
        yield harness
        await harness.stop()
