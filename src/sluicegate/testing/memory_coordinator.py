"""The product's coordinator loop (``SourceRunner``) run in memory, on virtual time, one
settled state at a time: what ``MemoryRun`` talks to.

The runner is the one a deployed coordinator runs, unchanged, over the in-memory log
(memory_log.py), with three things of the test's in place of the world's:

- its clock (``VirtualClock``): the run moves it, so session timeouts and grace delays
  cost rounds, not seconds;
- its ``call_async`` timers (``VirtualAsyncCalls``): due on the virtual clock, fired when
  the run says, each callable run in a worker thread as the product does;
- its inbox fetch (``_TurnGate``): when the inbox has nothing for it, the loop waits for
  the run instead of polling. ``settle()`` lets it go once (a tick when one is due, the
  calls' results, a commit) and returns when it waits again: everything written before
  is read, stepped and committed, and every committed record to the readers delivered.

A runner that fails is handled as the coordinator's host does: a successor (another
incarnation of the log, which fences the first) restores the last commit and is offered
the same input again. Each failure is kept in ``step_failures``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sluicegate.api.source import Source
from sluicegate.coordinator.async_calls import AsyncCalls, AsyncResult
from sluicegate.coordinator.core import AsyncCall, CoordinatorCore
from sluicegate.coordinator.log import InboxRecord, OutgoingRecord, StateRecord
from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.source_runner import RunnerState, SourceRunner
from sluicegate.protocol.codec import DecodeError, decode, encode, encode_key
from sluicegate.protocol.messages import Direction, Envelope
from sluicegate.testing.forwarding_log import ForwardingLog
from sluicegate.testing.memory_log import MemoryCoordinatorLog, MemoryLogBroker

NAMESPACE = "sluicegate"
MAX_FAILURES_IN_A_ROW = 5
"""The real host restarts for ever (with backoff); a run gives up on an input after this."""


class VirtualClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def wall_ms(self) -> int:
        return self.now_ms

    def monotonic(self) -> float:
        return self.now_ms / 1000


@dataclass(order=True)
class _Timer:
    due_ms: int
    order: int
    call: AsyncCall = field(compare=False)


class VirtualAsyncCalls(AsyncCalls):
    """Timers on a ``VirtualClock``; ``fire_due`` runs what is due, in due order."""

    def __init__(self, clock: VirtualClock, worker: ThreadPoolExecutor) -> None:
        self._clock = clock
        self._worker = worker
        self._timers: list[_Timer] = []
        self._order = itertools.count()
        self._results: list[AsyncResult] = []

    def start(self, call: AsyncCall) -> None:
        heapq.heappush(self._timers, _Timer(self._clock.now_ms + call.initial_delay_ms, next(self._order), call))

    def cancel(self, call_id: int) -> None:
        self._timers = [t for t in self._timers if t.call.call_id != call_id]
        heapq.heapify(self._timers)

    def take_results(self) -> list[AsyncResult]:
        results, self._results = self._results, []
        return results

    def close(self) -> None:
        self._timers.clear()

    def fire_due(self) -> None:
        while self._timers and self._timers[0].due_ms <= self._clock.now_ms:
            timer = heapq.heappop(self._timers)
            result: Any = None
            error: BaseException | None = None
            try:
                result = self._worker.submit(timer.call.fn).result()
            except Exception as exc:  # handed to the enumerator's handler, as the product does
                error = exc
            self._results.append((timer.call.call_id, result, error))
            if timer.call.period_ms > 0:
                timer.due_ms += timer.call.period_ms
                heapq.heappush(self._timers, timer)


class _TurnGate(ForwardingLog):
    """The memory log, with ``fetch`` waiting for ``wake()`` when there is nothing to
    read and no turn owed; ``commit`` hands what it made visible to ``on_commit``."""

    def __init__(
        self,
        inner: MemoryCoordinatorLog,
        on_read: Callable[[InboxRecord], None],
        on_commit: Callable[[Sequence[OutgoingRecord]], None],
    ) -> None:
        super().__init__(inner)
        self._on_read = on_read
        self._on_commit = on_commit
        self._turn_owed = True
        self._wake = asyncio.Event()
        self.idle = asyncio.Event()

    def wake(self) -> None:
        self._turn_owed = True
        self.idle.clear()
        self._wake.set()

    async def fetch(self, timeout_ms: int, max_records: int) -> list[InboxRecord]:
        while True:
            records = await self.inner.fetch(0, max_records)
            if records or self._turn_owed:
                self._turn_owed = False
                for record in records:
                    self._on_read(record)
                return records
            self._wake.clear()
            self.idle.set()
            await self._wake.wait()

    async def commit(self, records: Sequence[OutgoingRecord], state: Sequence[StateRecord]) -> None:
        await self.inner.commit(records, state)
        self._on_commit(records)


class MemoryCoordinator:
    def __init__(
        self,
        settings: SourceSettings,
        make_source: Callable[[], Source[Any]],
        clock: VirtualClock,
        deliver: Callable[[Envelope], None],
    ) -> None:
        """``deliver``: called with every record to the readers as its commit makes it visible."""
        self.settings = settings
        self.make_source = make_source
        self.clock = clock
        self.deliver = deliver
        self.broker = MemoryLogBroker()
        self.sent: list[Envelope] = []
        """Every record to the readers, in the order committed."""
        self.received: list[Envelope] = []
        """Every reader record the coordinator read, in inbox order (once, however often read)."""
        self.step_failures: list[str] = []
        """Why each runner failed, in order: its successor restarted from the last commit."""
        self.undecodable = 0
        """Inbox records that were no control record (the runner dead-lettered them)."""
        self._read_upto = -1
        self._failures_in_a_row = 0
        self._loop = asyncio.new_event_loop()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-call-async")
        self._start_runner()

    @property
    def core(self) -> CoordinatorCore[Any]:
        core = self.runner.core
        assert core is not None, "the coordinator has not started"
        return core

    def write(self, env: Envelope) -> None:
        """A reader's record into the inbox."""
        self.broker.write(encode_key(env.subtask), encode(env))

    def fire_due_calls(self) -> None:
        """Run the ``call_async`` work due at the clock's time (its results go to the core
        at the next ``settle``)."""
        self._calls.fire_due()

    def settle(self) -> None:
        """Let the loop run until it waits for input again, restarting it from its last
        commit each time it fails."""
        while True:
            self._gate.wake()
            self._loop.run_until_complete(self._until_idle_or_ended())
            state = self.runner.state
            if state is RunnerState.ACTIVE:
                self._failures_in_a_row = 0
                return
            why = self.runner.failure or state.value
            if state is not RunnerState.FAILED:
                raise AssertionError(f"the coordinator stopped ({state.value}): {why}")
            self.step_failures.append(why)
            self._failures_in_a_row += 1
            if self._failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                times = self._failures_in_a_row
                raise AssertionError(
                    f"the coordinator failed {times} times in a row (it would restart for ever): {why}"
                )
            self._start_runner()

    def restart(self) -> None:
        """The coordinator process dies (after its last commit: ``settle`` ran) and a
        successor at the next epoch restores the committed state; the readers keep running."""
        self._loop.run_until_complete(self.runner.stop())
        self._start_runner()
        self.settle()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self.runner.stop())
            self._loop.close()
        self._worker.shutdown(wait=False)

    def _start_runner(self) -> None:
        self._calls = VirtualAsyncCalls(self.clock, self._worker)
        self._gate = _TurnGate(MemoryCoordinatorLog(self.broker), self._on_read, self._on_commit)
        self.runner = SourceRunner(
            self.settings,
            "memory",
            NAMESPACE,
            tick_interval_ms=self.settings.watermark_announce_interval_ms,
            commit_interval_ms=0,  # every step's progress is committed before the run goes on
            log=self._gate,
            clock=self.clock,
            async_calls=self._calls,
            make_source=self.make_source,
            freeze_restored_state=False,  # runs come and go by the hundred in a test process
        )
        self._loop.run_until_complete(self._start())

    async def _start(self) -> None:
        self.runner.start()

    async def _until_idle_or_ended(self) -> None:
        task = self.runner.task
        idle = asyncio.ensure_future(self._gate.idle.wait())
        waiting: set[asyncio.Future[Any]] = {idle} if task is None else {idle, task}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        idle.cancel()

    def _on_read(self, record: InboxRecord) -> None:
        if record.offset <= self._read_upto:
            return  # a successor reads again what was not committed
        self._read_upto = record.offset
        try:
            self.received.append(decode(record.value, Direction.TO_COORDINATOR))
        except DecodeError:
            self.undecodable += 1  # the runner dead-letters it

    def _on_commit(self, records: Sequence[OutgoingRecord]) -> None:
        readers_topic = self.runner.topics.readers
        for record in records:
            if record.topic == readers_topic:
                env = decode(record.value, Direction.TO_READER)
                self.sent.append(env)
                self.deliver(env)
