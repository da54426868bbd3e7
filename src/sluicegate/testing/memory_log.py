"""The coordinator's log in memory (coordinator/log.py's port), for tests of the loop.

``MemoryLogBroker`` holds what Kafka holds for one source: the inbox (records a
test writes, committed at once or in a transaction it leaves open), what the
coordinator's transactions made visible (outgoing records by topic, state records)
and which incarnation is the one writer. Every ``MemoryCoordinatorLog`` over the
same broker is an incarnation: the last to ``fence()`` wins, and an earlier one's
commit fails with ``LogFencedError``, as Kafka's transactional id does. A test can
make the next commits fail (``fail_next_commits``: the broker aborted them) or wait
(``delay_next_commits``: the broker's transaction coordinator is slow to take them).
A reader's open transaction may name its transactional id; ``fence_reader`` of that id
aborts it; a write of it after the fence fails (``FencedTransactionError``) and so does its
commit (``end_transaction`` returns False).
``refuse_reader_fences`` makes the broker refuse them (the coordinator lacks the ACL).

Held to the same contract as the Kafka adapter (tests/contract/log_contract.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from sluicegate.coordinator.log import (
    CommitFailedError,
    CoordinatorLog,
    InboxPosition,
    InboxRecord,
    LogFencedError,
    OutgoingRecord,
    ReaderFenceRefusedError,
    StateRecord,
)

POLL_S = 0.005


class FencedTransactionError(Exception):
    """A write of a reader's transaction that a fence aborted: its producer is fenced."""


class MemoryLogBroker:
    def __init__(self) -> None:
        self.inbox: list[tuple[bytes | None, bytes | None]] = []
        self._written_at: list[float] = []
        self.fetch_lag_s = 0.0
        """A fetch returns a record this long after it was written (``stable_end`` counts it
        at once): what a consumer's fetch latency is on a real broker."""
        self.open_from: int | None = None
        """The inbox offset where a transaction still open begins (None: none is)."""
        self._open: list[int] = []
        self.outgoing: dict[str, list[OutgoingRecord]] = {}
        """What committed transactions made visible, by topic, in order."""
        self.state: list[tuple[bytes | None, bytes | None]] = []
        self.commits = 0
        self.generation = 0
        """The incarnation that fenced last."""
        self.aborted: set[int] = set()
        """Inbox offsets of aborted transactions' records: offsets nobody reads."""
        self._failures: list[str] = []
        self._delays: list[float] = []
        self.marks = 0
        """Tombstones written outside any transaction (``mark_alive``)."""
        self.open_id: str | None = None
        """The transactional id of the open transaction, if the test named one."""
        self._txn_open = False
        self.reader_fences: list[str] = []
        """The reader transactional ids fenced, in order."""
        self.refuse_reader_fences = False
        self.before_reader_fence: Callable[[str], None] | None = None
        """Called with the id just before a fence takes effect: a test's reader commits then."""
        self._fenced_open = False

    # -- what a test does ----------------------------------------------------------

    def begin_transaction(self, transactional_id: str | None = None) -> None:
        """A reader's transaction opens (of ``transactional_id``, if given). Until a record
        of it is written to the inbox (``write(transactional=True)``) it holds nothing
        here: a reader's output records go elsewhere, its ack last."""
        assert not self._txn_open, "one transaction at a time"
        self._txn_open, self.open_id, self._fenced_open = True, transactional_id, False

    def write(
        self, key: bytes | None, value: bytes | None, transactional: bool = False, transactional_id: str | None = None
    ) -> int:
        """A record into the inbox, committed, or (``transactional``) in the open
        transaction (opened now, of ``transactional_id``, if none is); returns its offset. A
        committed record behind an open transaction is readable once that transaction ends,
        as in Kafka."""
        if transactional:
            if self._fenced_open:
                raise FencedTransactionError(f"transactional id {self.open_id} was fenced")
            if not self._txn_open:
                self.begin_transaction(transactional_id)
            if self.open_from is None:
                self.open_from = len(self.inbox)
            self._open.append(len(self.inbox))
        self.inbox.append((key, value))
        self._written_at.append(time.monotonic())
        return len(self.inbox) - 1

    def end_transaction(self, commit: bool = True) -> bool:
        """The open transaction's records become readable, or (aborted) never do: an
        aborted record stays an offset nobody reads, as in Kafka. False: a fence aborted
        it already (its producer's commit fails)."""
        if self._fenced_open:
            self._fenced_open, self.open_id = False, None
            return False
        assert self._txn_open, "no transaction is open"
        if not commit:
            self.aborted.update(self._open)
        self.open_from, self._open, self.open_id, self._txn_open = None, [], None, False
        return True

    def fence_reader(self, transactional_id: str) -> None:
        if self.refuse_reader_fences:
            raise ReaderFenceRefusedError(f"Transactional Id authorization failed: {transactional_id}")
        if self.before_reader_fence is not None:
            self.before_reader_fence(transactional_id)
        self.reader_fences.append(transactional_id)
        if self._txn_open and self.open_id == transactional_id:
            self.end_transaction(commit=False)
            self._fenced_open, self.open_id = True, transactional_id

    def fail_next_commits(self, count: int, why: str = "the broker aborted the transaction") -> None:
        self._failures += [why] * count

    def delay_next_commits(self, count: int, seconds: float) -> None:
        """The next ``count`` commits wait ``seconds`` before the broker takes them."""
        self._delays += [seconds] * count

    def take_delay(self) -> float:
        return self._delays.pop(0) if self._delays else 0.0

    def records_to(self, topic: str) -> list[OutgoingRecord]:
        return list(self.outgoing.get(topic, []))

    # -- what the log sees ---------------------------------------------------------

    def fetchable(self) -> int:
        """Where a fetch stops now: the stable end, less what was written within ``fetch_lag_s``."""
        end = self.stable
        if self.fetch_lag_s:
            cutoff = time.monotonic() - self.fetch_lag_s
            while end > 0 and self._written_at[end - 1] > cutoff:
                end -= 1
        return end

    @property
    def stable(self) -> int:
        """The last stable offset: a read_committed reader reads up to here."""
        return self.open_from if self.open_from is not None else len(self.inbox)

    def take_failure(self) -> str | None:
        return self._failures.pop(0) if self._failures else None


class MemoryCoordinatorLog(CoordinatorLog):
    def __init__(self, broker: MemoryLogBroker) -> None:
        self.broker = broker
        self.generation: int | None = None
        self.position = 0
        self.closed = False

    async def fence(self) -> None:
        self.broker.generation += 1
        self.generation = self.broker.generation

    async def restore(self) -> list[tuple[bytes | None, bytes | None]]:
        return list(self.broker.state)

    async def read_from(self, offset: int | None) -> None:
        self.position = 0 if offset is None else offset + 1

    async def fetch(self, timeout_ms: int, max_records: int) -> list[InboxRecord]:
        deadline = time.monotonic() + timeout_ms / 1000
        broker = self.broker
        while self.position >= broker.fetchable() and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        records: list[InboxRecord] = []
        end = broker.fetchable()
        while self.position < end and len(records) < max_records:
            offset = self.position
            self.position += 1
            if offset not in broker.aborted:
                key, value = broker.inbox[offset]
                records.append(InboxRecord(0, offset, key, value))
        return records

    async def behind(self) -> InboxPosition:
        return InboxPosition(self.position, self.broker.stable, len(self.broker.inbox))

    async def stable_end(self) -> int:
        return self.broker.stable

    async def key_written_at(self, offset: int) -> bytes | None:
        inbox = self.broker.inbox
        return inbox[offset][0] if 0 <= offset < len(inbox) else None

    async def commit(self, records: Sequence[OutgoingRecord], state: Sequence[StateRecord]) -> None:
        broker = self.broker
        delay = broker.take_delay()
        if delay:
            await asyncio.sleep(delay)
        if self.generation != broker.generation:
            raise LogFencedError(f"incarnation {self.generation} was fenced by {broker.generation}")
        why = broker.take_failure()
        if why is not None:
            raise CommitFailedError(
                f"the commit of {len(records)} records and {len(state)} state records failed: {why}"
            )
        for record in records:
            broker.outgoing.setdefault(record.topic, []).append(record)
        broker.state.extend(state)
        broker.commits += 1

    async def fence_reader(self, transactional_id: str) -> None:
        self.broker.fence_reader(transactional_id)

    async def mark_alive(self, key: bytes) -> None:
        # Outside any transaction: visible at once, between the records of commits.
        self.broker.state.append((key, None))
        self.broker.marks += 1

    async def close(self) -> None:
        self.closed = True
