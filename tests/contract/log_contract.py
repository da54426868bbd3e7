"""``LogContract``: what every ``CoordinatorLog`` must do, written once.

A subclass provides ``harness``: a way to make incarnations of the log of one source
and to act on its transport from outside (readers writing to the inbox, a reader's
transaction left open and aborted, a consumer reading what became visible).
test_memory_log.py runs the suite on the in-memory broker, test_kafka_log.py on real
Kafka.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import pytest

from sluicegate.coordinator.log import CoordinatorLog, InboxRecord, LogFencedError, OutgoingRecord
from sluicegate.coordinator.state_store import merge_records
from sluicegate.protocol.topics import ControlTopics

SUBTASKS = 2


class LogHarness(ABC):
    topics: ControlTopics

    @abstractmethod
    def incarnation(self) -> CoordinatorLog:
        """A new coordinator incarnation's log of the source (not fenced yet)."""

    @abstractmethod
    async def write_inbox(self, values: list[bytes], in_open_transaction: bool = False) -> None:
        """Readers write ``values`` to the inbox, committed, or (``in_open_transaction``)
        in a transaction left open until ``abort_inbox_transaction``."""

    @abstractmethod
    async def abort_inbox_transaction(self) -> None: ...

    reader_transactional_id: str
    """The transactional id of the open transaction ``write_inbox`` leaves."""

    inbox_key = b"0"
    """The key ``write_inbox`` writes with: subtask 0's."""

    @abstractmethod
    async def commit_inbox_transaction(self) -> bool:
        """Commit the open transaction; False when its producer was fenced."""

    @abstractmethod
    async def visible(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        """What a read_committed consumer reads in ``topic`` (every partition)."""


async def fetch_all(log: CoordinatorLog, count: int) -> list[InboxRecord]:
    records: list[InboxRecord] = []
    for _ in range(100):
        if len(records) >= count:
            break
        records += await log.fetch(100, 500)
    return records


def to_reader(topics: ControlTopics, subtask: int, value: bytes) -> OutgoingRecord:
    return OutgoingRecord(topics.readers, subtask, str(subtask).encode(), value)


class LogContract:
    async def test_a_commit_makes_its_records_and_state_visible_together(self, harness: LogHarness) -> None:
        log = harness.incarnation()
        try:
            await log.fence()
            assert await log.restore() == []
            await log.commit([to_reader(harness.topics, 1, b"to one")], [(b"orders/meta", b"m1")])
            await log.commit([to_reader(harness.topics, 0, b"to zero")], [(b"orders/meta", b"m2"), (b"orders/x", None)])
            visible = sorted(await harness.visible(harness.topics.readers))
            assert visible == [(b"0", b"to zero"), (b"1", b"to one")], visible
            assert await log.restore() == [(b"orders/meta", b"m1"), (b"orders/meta", b"m2"), (b"orders/x", None)]
        finally:
            await log.close()

    async def test_a_fenced_incarnation_commits_nothing_and_the_new_one_does(self, harness: LogHarness) -> None:
        old, new = harness.incarnation(), harness.incarnation()
        try:
            await old.fence()
            await old.commit([to_reader(harness.topics, 0, b"old")], [(b"orders/meta", b"old")])
            await new.fence()
            with pytest.raises(LogFencedError):
                await old.commit([to_reader(harness.topics, 0, b"stale")], [(b"orders/meta", b"stale")])
            # and every later commit of it: the runner's loop and its re-affirming commits
            # both commit, and whichever comes second must learn of the fence too
            with pytest.raises(LogFencedError):
                await old.commit([], [(b"orders/meta", b"stale again")])
            await new.commit([to_reader(harness.topics, 0, b"new")], [(b"orders/meta", b"new")])
            assert [v for _, v in await harness.visible(harness.topics.readers)] == [b"old", b"new"]
            assert [v for _, v in await new.restore()] == [b"old", b"new"]
        finally:
            await old.close()
            await new.close()

    async def test_a_mark_of_life_is_a_tombstone_between_commits_that_changes_no_state(
        self, harness: LogHarness
    ) -> None:
        log = harness.incarnation()
        try:
            await log.fence()
            await log.commit([], [(b"orders/meta", b'{"epoch": 1}')])
            await log.mark_alive(b"orders/alive")
            await log.mark_alive(b"orders/alive")
            await log.commit([], [(b"orders/meta", b'{"epoch": 2}')])
            restored = await log.restore()
            assert restored == [
                (b"orders/meta", b'{"epoch": 1}'),
                (b"orders/alive", None),
                (b"orders/alive", None),
                (b"orders/meta", b'{"epoch": 2}'),
            ]
            assert merge_records("orders", restored).parts == {"meta": {"epoch": 2}}
        finally:
            await log.close()

    async def test_the_inbox_is_read_in_order_from_after_an_offset(self, harness: LogHarness) -> None:
        await harness.write_inbox([b"r%d" % i for i in range(5)])
        log = harness.incarnation()
        try:
            await log.fence()
            await log.read_from(None)
            everything = await fetch_all(log, 5)
            assert [r.value for r in everything] == [b"r%d" % i for i in range(5)]
            assert [r.offset for r in everything] == sorted(r.offset for r in everything)
            await log.read_from(everything[2].offset)
            assert [r.value for r in await fetch_all(log, 2)] == [b"r3", b"r4"]
            position = await log.behind()
            assert position.position == position.stable == position.high == everything[-1].offset + 1
        finally:
            await log.close()

    async def test_the_stable_end_counts_what_was_committed_before_it_was_asked(self, harness: LogHarness) -> None:
        await harness.write_inbox([b"r0", b"r1"])
        log = harness.incarnation()
        try:
            await log.fence()
            await log.read_from(None)
            assert [r.value for r in await fetch_all(log, 2)] == [b"r0", b"r1"]
            await harness.write_inbox([b"r2"])  # after the last fetch: only a fresh look sees it
            end = await log.stable_end()
            assert end == (await log.behind()).position + 1
            await harness.write_inbox([b"in an open transaction"], in_open_transaction=True)
            assert await log.stable_end() == end, "an open transaction is not below the stable end"
        finally:
            await log.close()

    async def test_a_fenced_readers_open_transaction_is_aborted_and_it_cannot_commit(self, harness: LogHarness) -> None:
        await harness.write_inbox([b"before"])
        await harness.write_inbox([b"the paused reader's ack"], in_open_transaction=True)
        log = harness.incarnation()
        try:
            await log.fence()
            await log.read_from(None)
            await log.fence_reader(harness.reader_transactional_id)
            end = await log.stable_end()
            await harness.write_inbox([b"after"])
            records = await fetch_all(log, 2)
            assert [r.value for r in records] == [b"before", b"after"], "the open transaction was aborted"
            assert records[0].offset < end <= records[1].offset
            assert not await harness.commit_inbox_transaction(), "the fenced producer cannot commit"
        finally:
            await log.close()

    async def test_the_key_at_a_held_inbox_s_stable_end_is_the_open_transaction_s_first(
        self, harness: LogHarness
    ) -> None:
        await harness.write_inbox([b"before"])
        await harness.write_inbox([b"the ack of a reader killed before its commit"], in_open_transaction=True)
        log = harness.incarnation()
        try:
            await log.fence()
            await log.read_from(None)
            await fetch_all(log, 1)
            stable = await log.stable_end()
            assert stable == 1
            assert await log.key_written_at(stable) == harness.inbox_key
            assert await log.key_written_at(stable + 1) is None, "nothing written there"
        finally:
            await log.close()

    async def test_an_open_transaction_holds_the_inbox_and_its_abort_leaves_no_record(
        self, harness: LogHarness
    ) -> None:
        await harness.write_inbox([b"before"])
        await harness.write_inbox([b"in the killed reader's transaction"], in_open_transaction=True)
        await harness.write_inbox([b"after"])
        log = harness.incarnation()
        try:
            await log.fence()
            await log.read_from(None)
            assert [r.value for r in await fetch_all(log, 1)] == [b"before"]
            assert await log.fetch(300, 500) == [], "nothing past the open transaction"
            held = await log.behind()
            assert held.stable is not None and held.high is not None
            assert held.position == held.stable < held.high
            await harness.abort_inbox_transaction()
            assert [r.value for r in await fetch_all(log, 1)] == [b"after"]
        finally:
            await log.close()
