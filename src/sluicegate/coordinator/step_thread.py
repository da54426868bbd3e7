"""The coordinator core's steps, run off the event loop.

A step is pure CPU: a registration that hands out 15,600 splits, a start that discovers
1,000,000, the state of a million splits encoded for a commit. Run on the event loop, a
step of seconds stopped everything else there: the Faust group's heartbeats (the worker
was dropped from the group, and the source moved), the ``/metrics`` endpoint, and the
commits that tell standbys this coordinator is alive (a standby took over in the middle of
the step, and again in the successor's). Here steps run one at a time on one thread of
their own while the loop goes on; the runner does not touch the core until a step is done.
The endpoints read the core on the same thread, between two steps (``between_steps``); the
loop's logs look at ``busy_since`` first.

The GIL still runs one of the two at a time, but it switches every few milliseconds, which
is all the loop needs.

A step runs with the cyclic garbage collector paused (``collector_paused``). A step at a
million splits makes millions of short-lived objects (the state of a reader's 15,600
splits, built and encoded), and each 25 % of growth set off a full collection over the
whole heap: encoding the state of a million splits took 1,369 ms, 492 of them in 8 full
collections that found nothing (its garbage has no cycles; reference counting frees it),
with the GIL held, so that nothing else in the process ran meanwhile. After the step, the
collector runs as before over what the step left.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def collector_paused(step: Callable[[], T]) -> T:
    """``step()`` with the automatic cyclic collector off, and back on after it if it was on
    before (steps of several sources may overlap: the one that found it on turns it back on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return step()
    finally:
        if was_enabled:
            gc.enable()


class StepThread:
    def __init__(self, name: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"step {name}")
        self._monotonic = monotonic
        self.busy_since: float | None = None
        """``monotonic()`` when the running step began; None between steps. Set and cleared
        on the event loop only, so a reader on the loop needs no lock."""

    async def run(self, step: Callable[[], T]) -> T:
        """``step()`` on the step thread; its result, or what it raised. Cancelled while the
        step runs, it waits for the step to end first: nothing may touch the core while a
        step still changes it (a step cannot be stopped half-way)."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(collector_paused, step))
        self.busy_since = self._monotonic()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await future
            raise
        finally:
            self.busy_since = None

    async def between_steps(self, read: Callable[[], T]) -> T:
        """``read()`` on the step thread after the steps given to it before and before any
        given later: it sees the core between two steps, never half-way through one. It is
        not a step: ``busy_since`` does not change. Cancelled before it started, it never
        runs."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, read)

    def busy_for_s(self) -> float:
        """How long the running step has run; 0 between steps."""
        return 0.0 if self.busy_since is None else self._monotonic() - self.busy_since

    def close(self) -> None:
        self._executor.shutdown(wait=False)
