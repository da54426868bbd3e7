"""The coordinator-log contract on the in-memory broker (testing/memory_log.py)."""

from __future__ import annotations

import pytest
from log_contract import LogContract, LogHarness

from sluicegate.coordinator.log import CoordinatorLog
from sluicegate.protocol.topics import ControlTopics
from sluicegate.testing.memory_log import MemoryCoordinatorLog, MemoryLogBroker


class MemoryHarness(LogHarness):
    def __init__(self) -> None:
        self.topics = ControlTopics.for_source("orders")
        self.broker = MemoryLogBroker()

    def incarnation(self) -> CoordinatorLog:
        return MemoryCoordinatorLog(self.broker)

    reader_transactional_id = "sluicegate.orders.reader-0"

    async def write_inbox(self, values: list[bytes], in_open_transaction: bool = False) -> None:
        for value in values:
            tid = self.reader_transactional_id if in_open_transaction else None
            self.broker.write(b"0", value, transactional=in_open_transaction, transactional_id=tid)

    async def abort_inbox_transaction(self) -> None:
        self.broker.end_transaction(commit=False)

    async def commit_inbox_transaction(self) -> bool:
        return self.broker.end_transaction()

    async def visible(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        if topic == self.topics.coordinator_state:
            return list(self.broker.state)
        return [(r.key, r.value) for r in self.broker.records_to(topic)]


class TestMemoryLog(LogContract):
    @pytest.fixture
    def harness(self) -> LogHarness:
        return MemoryHarness()
