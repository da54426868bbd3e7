"""The control-channel contract on real Kafka (KafkaControlChannel)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError
from channel_contract import SUBTASKS, ChannelContract, ChannelHarness

from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol.topics import ControlTopics, topic_specs
from sluicegate.reader.channel import ControlChannel
from sluicegate.reader.kafka_channel import KafkaControlChannel

pytestmark = pytest.mark.kafka

LATEST = -1


class KafkaHarness(ChannelHarness):
    def __init__(self, bootstrap: str, source: str) -> None:
        self.bootstrap = bootstrap
        self.topics = ControlTopics.for_source(source)
        self._producer: AIOKafkaProducer | None = None
        self._channels: list[KafkaControlChannel] = []
        self._broken: list[AIOKafkaProducer] = []

    async def start(self) -> None:
        await apply_topics(self.bootstrap, topic_specs("sluicegate", self.topics.coordinator.split(".")[1], SUBTASKS))
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
        for channel in self._channels:
            await channel.close()
        for producer in self._broken:
            await producer.stop()

    def channel(self) -> ControlChannel:
        channel = KafkaControlChannel(self.topics, self.bootstrap, f"contract-{secrets.token_hex(3)}", 30.0)
        self._channels.append(channel)
        return channel

    async def to_reader(self, subtask: int, value: bytes) -> None:
        assert self._producer is not None
        await self._producer.send_and_wait(self.topics.readers, value, key=str(subtask).encode(), partition=subtask)

    async def _read(self, topic: str) -> list[Any]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, isolation_level="read_committed", enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            out: list[Any] = []
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=500)
                out += batch.get(tp, [])
            return out
        finally:
            await consumer.stop()

    async def inbox(self) -> list[tuple[bytes | None, bytes | None]]:
        return [(r.key, r.value) for r in await self._read(self.topics.coordinator)]

    async def dead_letters(self) -> list[tuple[dict[str, bytes], bytes | None]]:
        return [(dict(r.headers), r.value) for r in await self._read(self.topics.dead_letter)]

    async def break_sends(self, channel: ControlChannel) -> None:
        # Every send fails as aiokafka's does when no broker answers; the real producer is
        # kept to be stopped at the end.
        assert isinstance(channel, KafkaControlChannel) and channel._producer is not None
        self._broken.append(channel._producer)
        channel._producer = _Unreachable()


class _Unreachable:
    async def send(self, *args: Any, **kwargs: Any) -> Any:
        raise KafkaConnectionError("no broker answers (contract test)")

    async def stop(self) -> None:
        pass


class TestKafkaChannel(ChannelContract):
    @pytest.fixture
    async def harness(self, kafka_bootstrap: str, unique_source: str) -> AsyncIterator[ChannelHarness]:
        harness = KafkaHarness(kafka_bootstrap, unique_source)
        await harness.start()
        yield harness
        await harness.stop()


async def test_a_capture_of_every_partition_asks_the_cluster_once(kafka_bootstrap: str, unique_source: str) -> None:
    """A ``--subtask auto`` claim captures every partition of the readers topic: one
    ListOffsets request for all of them (one per leader broker), not one a partition."""
    harness = KafkaHarness(kafka_bootstrap, unique_source)
    await harness.start()
    try:
        channel = harness.channel()
        await channel.open(range(SUBTASKS))
        assert isinstance(channel, KafkaControlChannel)
        consumer = channel._require_consumer()
        requests: list[int] = []
        send = consumer._client.send

        async def counting(node_id: int, request: Any, *args: Any, **kwargs: Any) -> Any:
            # ListOffsets for the latest offsets (-1); the consumer's own position reset
            # asks for the earliest (-2) meanwhile
            asked = [ts for _, partitions in getattr(request, "_topics", []) for _, ts in partitions]
            if type(request).__name__.startswith("OffsetRequest") and LATEST in asked:
                requests.append(len(asked))
            return await send(node_id, request, *args, **kwargs)

        consumer._client.send = counting
        for s in range(SUBTASKS):
            await harness.to_reader(s, b"before")
        await channel.capture(range(SUBTASKS))
        assert requests == [SUBTASKS], requests
        assert await channel.poll(300) == []  # every partition is at its end: nothing from before
    finally:
        await harness.stop()
