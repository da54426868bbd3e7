"""The runner lets time pass in the core only once it has read its inbox."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.source_runner import MAX_TICK_DEFERRAL_S, SourceRunner


class Inbox:
    """The two things _may_tick asks of the consumer."""

    def __init__(self, position: int, stable: int | None) -> None:
        self.at = position
        self.stable = stable

    def last_stable_offset(self, tp: Any) -> int | None:
        return self.stable

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
    inbox.stable = 500  # 490 records not read yet
    assert not await r._may_tick()
    clock.now += MAX_TICK_DEFERRAL_S - 1
    assert not await r._may_tick()
    clock.now += 1  # behind for a minute: tick anyway, a dead reader must not be kept for ever
    assert await r._may_tick()
    inbox.at = 500
    assert await r._may_tick()
    inbox.stable = 900
    assert not await r._may_tick()  # a new backlog starts a new deferral
