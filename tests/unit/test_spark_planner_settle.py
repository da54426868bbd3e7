"""A driver's first batch waits for its subtasks and their assignments (planner._settle):
the first batch of a run reads what the splits have, so one planned while assignments still
arrive would leave the late splits out of a ``Trigger.Once`` run for good."""

from __future__ import annotations

import time

import pytest

from sluicegate.connectors import load_source
from sluicegate.spark import planner
from sluicegate.spark.planner import NextOffsetPlanner


class ArrivingDriver:
    """Coordinator records arrive one per wait, then nothing: each says whether every
    subtask is registered after it."""

    def __init__(self, arrivals: list[bool], active: bool = False) -> None:
        self.arrivals = list(arrivals)
        self.active = active
        self.generation = 0
        self.waits: list[tuple[bool, float]] = []
        """(every subtask active when it waited, the wait's timeout)"""

    def all_active(self) -> bool:
        return self.active

    def wait_for_change(self, since: int, timeout_s: float) -> int:
        self.waits.append((self.active, timeout_s))
        if not self.arrivals:
            time.sleep(timeout_s)
            return self.generation
        self.active = self.arrivals.pop(0)
        self.generation += 1
        return self.generation


def settle(driver: ArrivingDriver) -> int:
    source = load_source("sequence", {"splits": "2", "records_per_split": "10"})
    return NextOffsetPlanner("s", source, driver)._settle()  # type: ignore[arg-type]


def test_the_first_batch_waits_for_every_registration_and_then_for_the_assignments_to_go_quiet() -> None:
    driver = ArrivingDriver([False, True, True, True])  # two registrations, then two AddSplits
    assert settle(driver) == 4, "planned after the last assignment"
    assert driver.waits[-1] == (True, planner.QUIET_S), "and a quiet wait once every subtask is in"
    assert [active for active, _ in driver.waits[:2]] == [False, False]


def test_a_subtask_that_never_registers_holds_the_first_batch_back_at_most_settle_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(planner, "SETTLE_S", 0.3)
    started = time.monotonic()
    assert settle(ArrivingDriver([])) == 0
    assert time.monotonic() - started < 2.0
