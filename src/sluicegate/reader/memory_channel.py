"""An in-memory broker and the ``ControlChannel`` over it, for tests of reader hosts and
of the channel contract (tests/contract/) that need no Kafka.

``MemoryBroker`` keeps topics as lists of partitions of records, all committed at
once (what a read_committed consumer would see). ``unreachable`` makes every send
fail, as a broker that cannot be reached; a test plays the coordinator by
``append``-ing records to the readers topic and reading the inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sluicegate.protocol.topics import ControlTopics
from sluicegate.reader.channel import ControlChannel, RawRecord


@dataclass
class StoredRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


class MemoryBroker:
    def __init__(self) -> None:
        self.topics: dict[str, list[list[StoredRecord]]] = {}
        self.unreachable = False
        self._appended = asyncio.Event()

    def create_topic(self, name: str, partitions: int) -> None:
        self.topics.setdefault(name, [[] for _ in range(partitions)])

    def create_control_topics(self, topics: ControlTopics, readers: int) -> None:
        self.create_topic(topics.coordinator, 1)
        self.create_topic(topics.readers, readers)
        self.create_topic(topics.reader_state, readers)
        self.create_topic(topics.dead_letter, 1)

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> int:
        """Append a record; returns its offset."""
        if self.unreachable:
            raise ConnectionError("the in-memory broker is unreachable")
        log = self.topics[topic][partition]
        log.append(StoredRecord(key, value, list(headers)))
        self._appended.set()
        return len(log) - 1

    def records(self, topic: str, partition: int = 0) -> list[StoredRecord]:
        return list(self.topics[topic][partition])

    async def wait_for_append(self, timeout_s: float) -> None:
        self._appended.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._appended.wait(), timeout_s)


class MemoryControlChannel(ControlChannel):
    def __init__(self, broker: MemoryBroker, topics: ControlTopics, topic_wait_timeout_s: float = 5.0) -> None:
        super().__init__(topics)
        self.broker = broker
        self.topic_wait_timeout_s = topic_wait_timeout_s
        self._positions: dict[int, int] = {}

    async def open(self, subtasks: Sequence[int], extra_topics: Sequence[str] = ()) -> dict[str, int]:
        names = [self.topics.coordinator, self.topics.readers, self.topics.dead_letter, *extra_topics]
        deadline = time.monotonic() + self.topic_wait_timeout_s
        while any(n not in self.broker.topics for n in names):
            if time.monotonic() > deadline:
                missing = [n for n in names if n not in self.broker.topics]
                raise TimeoutError(f"topics {', '.join(missing)} did not appear within {self.topic_wait_timeout_s}s")
            await asyncio.sleep(0.01)
        count = len(self.broker.topics[self.topics.readers])
        self._positions = {s: 0 for s in subtasks if s < count}
        self.contact()
        return {n: len(self.broker.topics[n]) for n in names}

    async def capture(self, subtasks: Iterable[int]) -> None:
        for subtask in subtasks:
            self._positions[subtask] = len(self.broker.topics[self.topics.readers][subtask])

    async def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        wait: bool,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> bool:
        self.broker.append(topic, 0, key, value, headers or ())
        return True

    async def _fetch(self, timeout_ms: int, subtask: int | None) -> list[tuple[int, RawRecord]]:
        out = self._available(subtask)
        if not out and timeout_ms > 0:
            await self.broker.wait_for_append(timeout_ms / 1000)
            out = self._available(subtask)
        return out

    def _available(self, subtask: int | None) -> list[tuple[int, RawRecord]]:
        out: list[tuple[int, RawRecord]] = []
        readers = self.topics.readers
        for s in sorted(self._positions) if subtask is None else [subtask]:
            log = self.broker.topics[readers][s]
            start = self._positions[s]
            for offset in range(start, len(log)):
                record = log[offset]
                out.append((s, RawRecord(readers, s, offset, record.key, record.value)))
            self._positions[s] = len(log)
        return out

    async def _letters_in_topic(self) -> list[dict[str, bytes]]:
        return [dict(r.headers) for r in self.broker.records(self.topics.dead_letter)]

    async def close(self) -> None:
        self._positions = {}
