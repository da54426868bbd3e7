"""``CoordinatorLog``: what the coordinator's exactly-once loop needs of its transport.

The loop (source_runner.py) is the only place that knows the order of things; a log
only carries them out:

- ``fence()``: become the source's one writer. Every earlier incarnation's later
  commit fails with ``LogFencedError``, and what it left open is aborted (Kafka: the
  transactional id's ``InitProducerId``, PROTOCOL semantics 4);
- ``restore()``: the committed state records, in the order they were written;
- ``read_from(offset)``: the inbox from after ``offset`` (None: its beginning), then
  ``fetch()`` what is committed there, in order;
- ``behind()``: where the loop stands in its inbox against what is stable and what is
  written (an open transaction of a reader holds ``stable`` back: tick_gate.py);
- ``commit(records, state)``: the outgoing records and the state records in one
  transaction: all visible or none. It fails with ``LogFencedError`` when another
  incarnation fenced this one and with ``CommitFailedError`` for anything else;
- ``fence_reader(transactional_id)``: fence a reader subtask's transactional id, as a
  new reader of the subtask does at its start: what its producer left open is aborted
  and its later commits fail. It raises ``ReaderFenceRefusedError`` when this
  coordinator may not (no WRITE on the id: ``sluicegate acls``);
- ``mark_alive(key)``: a tombstone of ``key`` on the state topic, outside any
  transaction, so at once, while a commit is still waiting for the broker. It moves
  the end offset the standbys watch and changes no state (silence.py ``mark_due``).

kafka_log.py is the product's adapter (aiokafka); testing/memory_log.py is the double
the unit tests drive the loop over, both held to tests/contract/log_contract.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InboxRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


@dataclass(frozen=True, slots=True)
class InboxPosition:
    position: int
    """The next offset the loop will read."""
    stable: int | None
    """The inbox's last stable offset (None: not known yet)."""
    high: int | None
    """The inbox's high watermark (None: not known yet)."""


StateRecord = tuple[bytes, bytes | None]
"""A state record as written: (key, value), None a tombstone; state_store.py says what they hold."""


class LogFencedError(Exception):
    """A newer incarnation fenced this one: nothing of its commit is visible."""


class ReaderFenceRefusedError(Exception):
    """The broker refused this coordinator a reader's transactional id; the message says which."""


class CommitFailedError(RuntimeError):
    """A transaction of the coordinator failed and was aborted; its message says why."""


class CoordinatorLog(ABC):
    @abstractmethod
    async def fence(self) -> None: ...

    @abstractmethod
    async def restore(self) -> list[tuple[bytes | None, bytes | None]]: ...

    @abstractmethod
    async def read_from(self, offset: int | None) -> None: ...

    @abstractmethod
    async def fetch(self, timeout_ms: int, max_records: int) -> list[InboxRecord]: ...

    @abstractmethod
    async def behind(self) -> InboxPosition: ...

    @abstractmethod
    async def stable_end(self) -> int:
        """The inbox's last stable offset as the broker has it now (a round trip, unlike
        ``behind``, whose figures are those of the last fetch): what was committed to the
        inbox before this call lies below it."""

    @abstractmethod
    async def commit(self, records: Sequence[OutgoingRecord], state: Sequence[StateRecord]) -> None: ...

    @abstractmethod
    async def fence_reader(self, transactional_id: str) -> None:
        """Once this returns, every transaction of ``transactional_id`` begun before the
        call is committed or aborted (an open one is aborted), and none of its producers
        started before the call can commit again."""

    @abstractmethod
    async def key_written_at(self, offset: int) -> bytes | None:
        """The key of the inbox record at ``offset`` as it was written, committed or not
        (read_uncommitted). At the last stable offset of an inbox that a transaction holds,
        that is the first record of the transaction: its key names the subtask whose reader
        opened it (open_transaction.py). None: no record there."""

    @abstractmethod
    async def mark_alive(self, key: bytes) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...
