"""The step thread runs steps with the cyclic collector paused (coordinator/step_thread.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from sluicegate.coordinator.step_thread import StepThread, collector_paused


@pytest.fixture
def collections_seen() -> Iterator[list[int]]:
    """The generations of the collections that ran, while the test runs."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)


def churn() -> list[list[int]]:
    """Enough container objects alive at once to set off collections of every generation."""
    return [[i] for i in range(200_000)]


def test_a_step_sets_off_no_collection_and_the_collector_runs_again_after_it(collections_seen: list[int]) -> None:
    assert gc.isenabled()
    churn()
    assert collections_seen, "the churn sets off collections when the collector is on"
    collections_seen.clear()

    def step() -> int:
        assert len(churn()) == 200_000
        return len(collections_seen)

    assert collector_paused(step) == 0, "no collection during the step"
    assert gc.isenabled(), "on again after the step"


def test_a_step_that_raises_turns_the_collector_back_on() -> None:
    def fails() -> None:
        raise ValueError("the step failed")

    with pytest.raises(ValueError, match="the step failed"):
        collector_paused(fails)
    assert gc.isenabled()


def test_a_collector_turned_off_before_stays_off() -> None:
    gc.disable()
    try:
        collector_paused(churn)
        assert not gc.isenabled(), "a step does not turn on what someone else turned off"
    finally:
        gc.enable()


async def test_the_step_thread_runs_its_steps_with_the_collector_paused(collections_seen: list[int]) -> None:
    steps = StepThread("orders")
    try:
        collections_seen.clear()

        def step() -> tuple[bool, int]:
            churn()
            return gc.isenabled(), len(collections_seen)

        assert await steps.run(step) == (False, 0)
        assert gc.isenabled()
    finally:
        steps.close()
