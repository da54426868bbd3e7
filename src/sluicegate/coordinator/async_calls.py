"""Where the enumerator's ``call_async`` work runs: a port of the coordinator loop.

A step asks for calls (``Effects.async_calls``: run ``fn`` off the loop after a delay,
then every period) and stops earlier ones (``Effects.cancelled_calls``); the loop hands
each outcome back to the core at its next pass (``take_results``). Results are never
lost between passes and come back in the order the calls ended.

``LoopAsyncCalls`` is the product's: timers on the event loop, ``fn`` in the loop's
default executor (a worker thread, so that a callable touching the enumerator context
fails there, as in Flink). testing/memory_coordinator.py has one on virtual time.
"""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from typing import Any

from sluicegate.coordinator.core import AsyncCall

AsyncResult = tuple[int, Any, BaseException | None]
"""(call id, what ``fn`` returned, what it raised): ``CoordinatorCore.on_async_result``'s input."""


class AsyncCalls(ABC):
    @abstractmethod
    def start(self, call: AsyncCall) -> None:
        """Run ``call`` after its initial delay (and every period after, if it has one)."""

    @abstractmethod
    def cancel(self, call_id: int) -> None:
        """Run it no more (a run already under way still reports its result)."""

    @abstractmethod
    def take_results(self) -> list[AsyncResult]:
        """The outcomes since the last time, oldest first."""

    @abstractmethod
    def close(self) -> None:
        """Stop every call (the runner ends; its timers end with it)."""


class LoopAsyncCalls(AsyncCalls):
    """Timers on the running event loop; call ``start`` on the loop."""

    def __init__(self) -> None:
        self._results: list[AsyncResult] = []
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def start(self, call: AsyncCall) -> None:
        task = asyncio.get_running_loop().create_task(self._run(call))
        self._tasks[call.call_id] = task
        task.add_done_callback(functools.partial(self._forget, call.call_id))

    def cancel(self, call_id: int) -> None:
        task = self._tasks.pop(call_id, None)
        if task is not None:
            task.cancel()

    def take_results(self) -> list[AsyncResult]:
        results, self._results = self._results, []
        return results

    def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        self._tasks.clear()

    async def _run(self, call: AsyncCall) -> None:
        delay_ms = call.initial_delay_ms
        while True:
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
            result: Any = None
            error: BaseException | None = None
            try:
                result = await asyncio.get_running_loop().run_in_executor(None, call.fn)
            except Exception as exc:  # handed to the enumerator's handler, as in Flink
                error = exc
            self._results.append((call.call_id, result, error))
            if call.period_ms <= 0:
                return
            delay_ms = call.period_ms

    def _forget(self, call_id: int, task: asyncio.Task[None]) -> None:
        if self._tasks.get(call_id) is task:
            del self._tasks[call_id]
