"""Where ``call_async`` work runs (coordinator/async_calls.py): the product's timers on the
event loop and the memory run's on virtual time keep the same promises, so the kit's
scenarios over the one are worth something for the other."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sluicegate.coordinator.async_calls import AsyncCalls, AsyncResult, LoopAsyncCalls
from sluicegate.coordinator.core import AsyncCall
from sluicegate.testing.memory_coordinator import VirtualAsyncCalls, VirtualClock


class Driver:
    """An AsyncCalls and a way to let ``ms`` of its time pass."""

    calls: AsyncCalls

    async def advance(self, ms: int) -> None:
        raise NotImplementedError


class LoopDriver(Driver):
    def __init__(self) -> None:
        self.calls = LoopAsyncCalls()

    async def advance(self, ms: int) -> None:
        await asyncio.sleep(ms / 1000 + 0.05)  # and the worker thread's hop back


class VirtualDriver(Driver):
    def __init__(self) -> None:
        self.clock = VirtualClock(1_000_000)
        self.worker = ThreadPoolExecutor(max_workers=1)
        self.calls = VirtualAsyncCalls(self.clock, self.worker)

    async def advance(self, ms: int) -> None:
        self.clock.now_ms += ms
        self.calls.fire_due()  # type: ignore[attr-defined]


@pytest.fixture(params=["loop", "virtual"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[Driver]:
    made: Driver = LoopDriver() if request.param == "loop" else VirtualDriver()
    yield made
    made.calls.close()


def call(call_id: int, fn: Callable[[], Any], delay_ms: int = 0, period_ms: int = 0) -> AsyncCall:
    return AsyncCall(call_id, fn, delay_ms, period_ms)


def ids(results: list[AsyncResult]) -> list[int]:
    return [r[0] for r in results]


async def test_a_call_runs_after_its_delay_and_its_result_comes_back_once(driver: Driver) -> None:
    driver.calls.start(call(1, lambda: "found", delay_ms=200))
    await driver.advance(50)
    assert driver.calls.take_results() == [], "ran before its delay"
    await driver.advance(200)
    assert driver.calls.take_results() == [(1, "found", None)]
    await driver.advance(200)
    assert driver.calls.take_results() == [], "a call without a period runs once"


async def test_what_a_call_raises_is_handed_back_not_raised(driver: Driver) -> None:
    def fails() -> None:
        raise OSError("the data system is down")

    driver.calls.start(call(7, fails))
    await driver.advance(10)
    [(call_id, result, error)] = driver.calls.take_results()
    assert (call_id, result) == (7, None)
    assert isinstance(error, OSError) and "down" in str(error)


async def test_a_periodic_call_runs_every_period_until_cancelled(driver: Driver) -> None:
    count = iter(range(100))
    driver.calls.start(call(3, lambda: next(count), delay_ms=0, period_ms=100))
    for _ in range(3):
        await driver.advance(100)
    results = driver.calls.take_results()
    assert ids(results) == [3] * len(results) and len(results) >= 3
    assert [r[1] for r in results] == list(range(len(results))), "results in the order the runs ended"
    driver.calls.cancel(3)
    await driver.advance(10)
    driver.calls.take_results()  # a run under way when cancelled may still report
    await driver.advance(300)
    assert driver.calls.take_results() == [], "cancelled, it ran again"


async def test_close_stops_every_call(driver: Driver) -> None:
    driver.calls.start(call(1, lambda: 1, delay_ms=100))
    driver.calls.start(call(2, lambda: 2, delay_ms=0, period_ms=100))
    driver.calls.close()
    await driver.advance(300)
    assert driver.calls.take_results() == []


async def test_the_callable_runs_off_the_calling_thread(driver: Driver) -> None:
    """A callable that touches the enumerator context must fail in the kit as in the
    product: both run it in a worker thread."""
    caller = threading.get_ident()
    driver.calls.start(call(5, threading.get_ident))
    await driver.advance(10)
    [(_, ran_on, error)] = driver.calls.take_results()
    assert error is None and ran_on != caller
