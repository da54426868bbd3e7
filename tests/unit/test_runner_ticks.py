"""The runner lets time pass in the core only once it has read its inbox, and not while an
open transaction holds the inbox (coordinator/tick_gate.py); one that holds it for a session
timeout, it ends by fencing its reader (coordinator/open_transaction.py). The runner runs
over the in-memory log with a clock of the test's."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.source_runner import SourceRunner
from sluicegate.coordinator.tick_gate import MAX_TICK_DEFERRAL_S
from sluicegate.protocol.codec import encode_key
from sluicegate.protocol.names import reader_transactional_id
from sluicegate.testing.forwarding_log import ForwardingLog
from sluicegate.testing.memory_log import MemoryCoordinatorLog, MemoryLogBroker


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def wall_ms(self) -> int:
        return int(self.now * 1000)

    def monotonic(self) -> float:
        return self.now


Runner = tuple[SourceRunner, MemoryLogBroker, MemoryCoordinatorLog, Clock]


@pytest.fixture
async def runner() -> Runner:
    clock = Clock()
    broker = MemoryLogBroker()
    for i in range(10):
        broker.write(b"k", b"heartbeat %d" % i)
    log = MemoryCoordinatorLog(broker)
    await log.read_from(9)  # read up to offset 10
    settings = SourceSettings(source="orders", connector="sequence", max_parallelism=2)
    return SourceRunner(settings, "127.0.0.1:9092", "sluicegate", log=log, clock=clock), broker, log, clock


def write(broker: MemoryLogBroker, n: int) -> None:
    for _ in range(n):
        broker.write(b"k", b"heartbeat")


async def test_a_runner_that_has_read_its_inbox_ticks(runner: Runner) -> None:
    r, *_ = runner
    assert await r._may_tick()


async def test_heartbeats_waiting_in_the_inbox_hold_the_tick_back_for_a_while(runner: Runner) -> None:
    r, broker, log, clock = runner
    write(broker, 490)  # 490 records not read yet
    assert not await r._may_tick()
    clock.now += MAX_TICK_DEFERRAL_S - 1
    assert not await r._may_tick()
    clock.now += 1  # behind for a minute: tick anyway, a dead reader must not be kept for ever
    assert await r._may_tick()
    assert len(await log.fetch(0, 1_000)) == 490
    assert await r._may_tick()
    write(broker, 400)
    assert not await r._may_tick()  # a new backlog starts a new deferral


async def test_heartbeats_behind_an_open_transaction_hold_the_tick_back_for_a_while(runner: Runner) -> None:
    """A reader SIGKILLed between its checkpoint's ack and the commit leaves a transaction
    open on the inbox: everything after it, the other readers' heartbeats included, waits
    until the broker aborts it. Ticking meanwhile failed every reader."""
    r, broker, log, clock = runner
    broker.write(b"k", b"checkpoint ack", transactional=True)  # the killed reader's
    write(broker, 30)  # read up to the stable offset (10); 31 records wait behind the open transaction
    assert not await r._may_tick()
    clock.now += MAX_TICK_DEFERRAL_S - 1
    assert not await r._may_tick()
    broker.end_transaction(commit=False)  # the broker aborted it: the heartbeats are readable now ...
    assert not await r._may_tick()  # ... and not read yet
    assert len(await log.fetch(0, 1_000)) == 30, "the aborted record is never read"
    assert await r._may_tick()
    broker.write(b"k", b"checkpoint ack", transactional=True)  # a live reader's brief transaction holds one tick back
    assert not await r._may_tick()
    broker.end_transaction()
    assert len(await log.fetch(0, 1_000)) == 1
    assert await r._may_tick()


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.01)


async def look(r: SourceRunner) -> bool:
    """A tick's look at the inbox, and the broker's answer about a transaction holding it."""
    may = await r._may_tick()
    await until(lambda: r._watching is None)
    return may


def hold_by_reader(broker: MemoryLogBroker, subtask: int) -> str:
    """A reader paused (or killed) between its checkpoint's ack and the commit."""
    holder = reader_transactional_id("sluicegate", "orders", subtask)
    broker.write(encode_key(subtask), b"checkpoint ack", transactional=True, transactional_id=holder)
    return holder


async def test_an_inbox_held_by_one_transaction_for_a_session_timeout_gets_it_ended(runner: Runner) -> None:
    """After a session timeout the coordinator fences the reader that the transaction's first
    record's key names, and the broker aborts the transaction; the heartbeats behind it are
    read, and time passes again."""
    r, broker, log, clock = runner
    holder = hold_by_reader(broker, 1)
    write(broker, 30)
    session_s = r.settings.session_timeout_ms / 1000
    assert not await look(r)
    for _ in range(int(session_s) - 1):
        clock.now += 1
        assert not await look(r)
    assert broker.reader_fences == [], "not before a session timeout"
    clock.now += 1
    assert not await look(r)
    assert broker.reader_fences == [holder]
    assert broker.stable == len(broker.inbox), "the fence aborted the transaction"
    assert len(await log.fetch(0, 1_000)) == 30, "what waited behind it, and not the aborted ack"
    assert await look(r)


async def test_brief_transactions_one_after_another_are_not_ended(runner: Runner) -> None:
    """Busy readers may keep some transaction open on the inbox at every look: the last stable
    offset moves all the same, and nobody is fenced."""
    r, broker, log, clock = runner
    for _ in range(6):  # 24 s in all, each transaction held 4 s
        hold_by_reader(broker, 0)
        for _ in range(4):
            await look(r)
            clock.now += 1
        broker.end_transaction()
        assert len(await log.fetch(0, 1_000)) == 1
    assert broker.reader_fences == []


class AwayBroker(ForwardingLog):
    """The broker does not answer while ``away``; the inbox consumer keeps its last figures."""

    away = False

    async def stable_end(self) -> int:
        if self.away:
            raise ConnectionError("the broker is away")
        return await self.inner.stable_end()


async def test_the_hold_counts_only_while_the_broker_answers() -> None:
    """A reader keeps its transaction through a broker outage and commits once the broker is
    back: the coordinator, whose figures stood still meanwhile, gives it a session timeout
    from the broker's return."""
    clock = Clock()
    broker = MemoryLogBroker()
    log = AwayBroker(MemoryCoordinatorLog(broker))
    await log.read_from(None)
    settings = SourceSettings(source="orders", connector="sequence", max_parallelism=2)
    r = SourceRunner(settings, "127.0.0.1:9092", "sluicegate", log=log, clock=clock)
    holder = hold_by_reader(broker, 1)
    write(broker, 3)
    await look(r)
    log.away = True
    for _ in range(20):
        clock.now += 1
        await look(r)
    log.away = False
    clock.now += 1  # the first answer since the outage
    session_s = settings.session_timeout_ms / 1000
    for _ in range(int(session_s)):
        await look(r)
        clock.now += 1
    assert broker.reader_fences == [], "a session timeout from the broker's return, not before"
    await look(r)
    assert broker.reader_fences == [holder]


async def test_an_inbox_held_by_a_transaction_that_is_not_a_readers_is_left_to_the_broker(
    runner: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    r, broker, _, clock = runner
    broker.write(b"not-a-subtask", b"something else's", transactional=True, transactional_id="someone-else")
    with caplog.at_level(logging.WARNING, "sluicegate.coordinator"):
        for _ in range(int(r.settings.session_timeout_ms / 1000) + 1):
            await look(r)
            clock.now += 1
    assert "a transaction that is not a reader's" in caplog.text
    assert broker.reader_fences == [] and broker.stable < len(broker.inbox)
