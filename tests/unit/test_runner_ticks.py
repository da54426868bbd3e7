"""The runner lets time pass in the core only once it has read its inbox, and not while an
open transaction holds the inbox (coordinator/tick_gate.py). The runner runs over the
in-memory log with a clock of the test's."""

from __future__ import annotations

import pytest

from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.source_runner import SourceRunner
from sluicegate.coordinator.tick_gate import MAX_TICK_DEFERRAL_S
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
