"""The runner lets time pass in the core only once it has read its inbox, and not while an
open transaction holds the inbox (coordinator/tick_gate.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.source_runner import SourceRunner
from sluicegate.coordinator.tick_gate import MAX_TICK_DEFERRAL_S


class Inbox:
    """The three things _may_tick asks of the consumer."""

    def __init__(self, position: int, stable: int | None) -> None:
        self.at = position
        self.stable = stable
        self.high: int | None = stable

    def last_stable_offset(self, tp: Any) -> int | None:
        return self.stable

    def highwater(self, tp: Any) -> int | None:
        return self.high

    async def position(self, tp: Any) -> int:
        return self.at


class Clock:
    """Stands in for the runner's ``time`` module (only its own, not the event loop's)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> tuple[SourceRunner, Inbox, Clock]:
    clock = Clock()
    monkeypatch.setattr("sluicegate.coordinator.source_runner.time", clock)
    settings = SourceSettings(source="orders", connector="sequence", max_parallelism=2)
    runner = SourceRunner(settings, "127.0.0.1:9092", "sluicegate")
    inbox = Inbox(position=10, stable=10)
    runner._consumer = inbox
    return runner, inbox, clock


async def test_a_runner_that_has_read_its_inbox_ticks(runner: tuple[SourceRunner, Inbox, Clock]) -> None:
    r, inbox, _ = runner
    assert await r._may_tick()
    inbox.stable = None  # nothing fetched yet: nothing known to wait for
    assert await r._may_tick()


async def test_heartbeats_waiting_in_the_inbox_hold_the_tick_back_for_a_while(
    runner: tuple[SourceRunner, Inbox, Clock],
) -> None:
    r, inbox, clock = runner
    inbox.stable = inbox.high = 500  # 490 records not read yet
    assert not await r._may_tick()
    clock.now += MAX_TICK_DEFERRAL_S - 1
    assert not await r._may_tick()
    clock.now += 1  # behind for a minute: tick anyway, a dead reader must not be kept for ever
    assert await r._may_tick()
    inbox.at = 500
    assert await r._may_tick()
    inbox.stable = inbox.high = 900
    assert not await r._may_tick()  # a new backlog starts a new deferral


async def test_heartbeats_behind_an_open_transaction_hold_the_tick_back_for_a_while(
    runner: tuple[SourceRunner, Inbox, Clock],
) -> None:
    """A reader SIGKILLed between its checkpoint's ack and the commit leaves a transaction
    open on the inbox: everything after it, the other readers' heartbeats included, waits
    until the broker aborts it. Ticking meanwhile failed every reader."""
    r, inbox, clock = runner
    inbox.high = 40  # read up to the stable offset (10); 30 records wait behind the open transaction
    assert not await r._may_tick()
    clock.now += MAX_TICK_DEFERRAL_S - 1
    assert not await r._may_tick()
    inbox.stable = 40  # the broker aborted it: the heartbeats are readable now ...
    assert not await r._may_tick()  # ... and not read yet
    inbox.at = 40
    assert await r._may_tick()
    inbox.high = 41  # a live reader's brief checkpoint transaction holds one tick back
    assert not await r._may_tick()
    inbox.stable = 41
    inbox.at = 41
    assert await r._may_tick()
