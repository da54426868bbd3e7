"""The control-channel contract on the in-memory broker."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from channel_contract import SUBTASKS, ChannelContract, ChannelHarness

from sluicegate.protocol.topics import ControlTopics
from sluicegate.reader.channel import ControlChannel
from sluicegate.reader.memory_channel import MemoryBroker, MemoryControlChannel


class MemoryHarness(ChannelHarness):
    def __init__(self) -> None:
        self.topics = ControlTopics.for_source(f"mem{secrets.token_hex(3)}")
        self.broker = MemoryBroker()
        self.broker.create_control_topics(self.topics, SUBTASKS)

    def channel(self) -> ControlChannel:
        return MemoryControlChannel(self.broker, self.topics)

    async def to_reader(self, subtask: int, value: bytes) -> None:
        self.broker.append(self.topics.readers, subtask, str(subtask).encode(), value)

    async def inbox(self) -> list[tuple[bytes | None, bytes | None]]:
        return [(r.key, r.value) for r in self.broker.records(self.topics.coordinator)]

    async def dead_letters(self) -> list[tuple[dict[str, bytes], bytes | None]]:
        return [(dict(r.headers), r.value) for r in self.broker.records(self.topics.dead_letter)]

    async def break_sends(self, channel: ControlChannel) -> None:
        self.broker.unreachable = True


class TestMemoryChannel(ChannelContract):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[ChannelHarness]:
        yield MemoryHarness()
