"""The active coordinator of one source: the exactly-once loop around the core.

    fence  -> become the source's one writer: the previous incarnation is fenced and
              its open transaction aborted (PROTOCOL semantics 4)
    restore-> the last committed state parts; epoch = stored + 1
    loop   -> read inbox records (committed ones) from the stored inbox offset,
              feed the core, and commit in ONE transaction: the outgoing records,
              dead letters, the changed state parts and the new inbox offset
    fences -> a reader silent past its session timeout: fence its transactional id,
              read the inbox to its stable end after that, then let the core fail it
    held   -> a transaction holding the inbox for a session timeout: fence the
              transactional id of the reader that opened it (open_transaction.py)

The loop is the only place that knows this order; the log it runs over (log.py:
Kafka in the product, kafka_log.py; a memory double in the unit tests) carries each
step out, and the clock it is given says what time it is. The core's steps run on a
thread of their own (step_thread.py), so that a step of seconds stops nothing else on
the event loop; while one runs longer than the liveness interval, the last commit's
``meta`` is committed again (silence.py ``reaffirm_due``) for the standbys watching, and
while a transaction waits on the broker as long, a tombstone outside it shows the same
(silence.py ``mark_due``).

Nothing of the state or of what readers read leaves this process outside a transaction
(the marks of life are tombstones of a part nobody writes), so a coordinator killed at
any instant leaves either all of a step's effects visible or none, and its successor
resumes from exactly there. Readers are never reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import gc
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sluicegate.api.source import Source
from sluicegate.connectors import load_source
from sluicegate.coordinator.async_calls import AsyncCalls, AsyncResult, LoopAsyncCalls
from sluicegate.coordinator.clock import SYSTEM_CLOCK, Clock
from sluicegate.coordinator.core import CoordinatorCore, Effects, ReaderFence, StepFailedError
from sluicegate.coordinator.host_process import this_process
from sluicegate.coordinator.kafka_log import KafkaCoordinatorLog
from sluicegate.coordinator.log import (
    CommitFailedError,
    CoordinatorLog,
    InboxRecord,
    LogFencedError,
    OutgoingRecord,
    ReaderFenceRefusedError,
    StateRecord,
)
from sluicegate.coordinator.open_transaction import OpenTransactionWatch, end_open_transaction
from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.silence import mark_due, reaffirm_due, start_mark_due
from sluicegate.coordinator.state_store import ALWAYS_WRITTEN, StateTooLargeError, StateWriter, restored_state
from sluicegate.coordinator.step_thread import StepThread
from sluicegate.coordinator.tick_gate import TickGate, blocked_at
from sluicegate.protocol.codec import DecodeError, decode, encode, encode_key
from sluicegate.protocol.dead_letter import DeadLetter
from sluicegate.protocol.definition import DefinitionMismatchError, SourceDefinition
from sluicegate.protocol.messages import Direction
from sluicegate.protocol.names import coordinator_transactional_id, reader_transactional_id
from sluicegate.protocol.state_records import ALIVE_PART, host_record, released_record, state_key
from sluicegate.protocol.topics import ControlTopics

log = logging.getLogger("sluicegate.coordinator")

T = TypeVar("T")

INBOX_BATCH = 500
COMMIT_BYTES = 8 * 1024 * 1024
"""Commit within a batch of inbox records once this much is waiting to go out: 64
registrations that hand out 1,000,000 splits were one transaction of 160 MB, and
the loop did not yield long enough for the Faust group to drop this worker."""
FINISH_TIMEOUT_S = 10.0
"""``finish`` waits at most this long for the inbox to be read and committed, then stops."""
FENCE_RETRY_S = 1.0
"""A reader fence that failed (the broker away) is tried again after this long."""
CONCURRENT_FENCES = 8
"""Fences at once: a thousand readers of a lost host time out together."""
KEEPALIVE_BYTES = 1024 * 1024
"""In a transaction this large or larger, the last commit's ``meta`` goes again after
every this many bytes (``with_keepalives``)."""


def commit_due(
    changed: bool, offset_moved: bool, since_ms: float, commit_interval_ms: int, liveness_interval_ms: int | None
) -> bool:
    """Whether to commit now, ``since_ms`` after the last commit: at once for records to
    send or changed state, within commit_interval_ms for offset-only progress, and within
    liveness_interval_ms for nothing at all (the heartbeat commit standbys watch for)."""
    if changed or (offset_moved and since_ms >= commit_interval_ms):
        return True
    return liveness_interval_ms is not None and since_ms >= liveness_interval_ms


def with_keepalives(
    records: list[OutgoingRecord], keepalive: OutgoingRecord, every_bytes: int = KEEPALIVE_BYTES
) -> list[OutgoingRecord]:
    """``records`` with ``keepalive`` after every ``every_bytes`` of them. One step can
    send a hundred megabytes (a registration handed a million splits), and its
    transaction takes seconds to write: the keepalive (the last commit's ``meta``, to the
    state topic) moves the state topic's end offset meanwhile, which is what standbys
    watch (silence.py). Inside the transaction it changes nothing: the commit's own
    ``meta`` comes after it, and a reader of committed records sees both at once."""
    out: list[OutgoingRecord] = []
    written = 0
    for record in records:
        out.append(record)
        written += len(record.value or b"")
        if written >= every_bytes:
            out.append(keepalive)
            written = 0
    return out


def check_definition(source: str, parts: Mapping[str, Any] | None, given: SourceDefinition, who: str) -> None:
    """Raise DefinitionMismatchError if the committed state defines ``source`` otherwise."""
    stored = parts.get("definition") if parts else None
    if stored is None:
        return  # a new source (or one from before definitions): this one defines it
    committed = SourceDefinition.from_json(stored)
    if committed.fingerprint != given.fingerprint:
        raise DefinitionMismatchError(source, who, committed, given)


class RunnerState(enum.Enum):
    STARTING = "starting"
    ACTIVE = "active"
    FENCED = "fenced"  # a newer incarnation took over; this one stepped down
    STOPPED = "stopped"
    FAILED = "failed"
    REFUSED = "refused"  # brought another definition than the source's: never restarted


@dataclass
class RunnerStats:
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    commits: int = 0
    reaffirmed: int = 0
    """Commits of the last committed ``meta`` again, made while a long step ran."""
    marked_alive: int = 0
    """Tombstones written outside a transaction that waited on the broker (``mark_alive``)."""
    last_commit_ms: float = 0.0
    """Duration of the last transaction, ms."""
    inbox_lag: int = 0
    started_at: float = field(default_factory=time.monotonic)


class SourceRunner:
    def __init__(
        self,
        settings: SourceSettings,
        bootstrap: str,
        namespace: str,
        tick_interval_ms: int = 200,
        commit_interval_ms: int = 1_000,
        on_stop: Callable[[SourceRunner], None] | None = None,
        liveness_interval_ms: int | None = None,
        log: CoordinatorLog | None = None,
        clock: Clock = SYSTEM_CLOCK,
        async_calls: AsyncCalls | None = None,
        make_source: Callable[[], Source[Any]] | None = None,
        freeze_restored_state: bool = True,
    ) -> None:
        """``log``: where the loop reads and commits (default: the source's control topics
        on ``bootstrap``); ``clock``: its time; ``async_calls``: where the enumerator's
        ``call_async`` work runs (default: on the event loop); ``make_source``: the
        connector's Source (default: ``settings.connector`` with ``settings.options``);
        ``freeze_restored_state``: whether to keep the collector off what the start-up
        restored (``gc.freeze``), which pays in a coordinator process and not where runners
        come and go by the hundred (the test kit)."""
        self.settings = settings
        self.bootstrap = bootstrap
        self.namespace = namespace
        self.topics = ControlTopics.for_source(settings.source, namespace)
        self.transactional_id = coordinator_transactional_id(namespace, settings.source)
        self.tick_interval_ms = tick_interval_ms
        self.commit_interval_ms = commit_interval_ms
        self.liveness_interval_ms = liveness_interval_ms
        """Commit at least this often, with nothing to commit too (a heartbeat commit of
        ``meta``): standbys take a source whose state topic stands still for
        takeover_silence_ms for dead (silence.py). None: no heartbeat commits."""
        self.state = RunnerState.STARTING
        self.stats = RunnerStats()
        self.core: CoordinatorCore[Any] | None = None
        self._on_stop = on_stop
        self._log = log if log is not None else KafkaCoordinatorLog(bootstrap, self.topics, self.transactional_id)
        self._clock = clock
        self._calls = async_calls if async_calls is not None else LoopAsyncCalls()
        self._make_source = make_source or functools.partial(load_source, settings.connector, settings.options)
        self._pending: list[OutgoingRecord] = []
        self._pending_bytes = 0
        self._calls_due: list[Effects] = []
        """Effects whose async calls are still to be started or cancelled (on the loop)."""
        self._steps = StepThread(settings.source, clock.monotonic)
        self._commit_lock = asyncio.Lock()
        """One transaction at a time: the loop's commits and the re-affirming ones."""
        self._committing_since: float | None = None
        """The clock's monotonic() when the transaction in flight began; None: none is."""
        self._starting_since: float | None = None
        """When this runner fenced its predecessor, until its start-up's first commit."""
        self._last_mark = 0.0
        self._alive_key = state_key(settings.source, ALIVE_PART)
        self._last_meta: StateRecord | None = None
        """The ``meta`` record of the last commit (or of the restored state): what is
        committed again while a long step runs."""
        self._task: asyncio.Task[None] | None = None
        self._committed_offset: int | None = None
        self._state_writer = StateWriter(settings.source, {})
        self.failure: str | None = None
        """Why the runner failed (state FAILED), in one sentence for the operator."""
        self.active_since: float | None = None
        """The clock's monotonic() when it started serving."""
        self._last_commit = 0.0
        self._next_tick = 0.0
        self._reaffirming: asyncio.Task[None] | None = None
        self._marking: asyncio.Task[None] | None = None
        self._tick_gate = TickGate()
        self._freeze = freeze_restored_state
        self._froze = False
        self._fenced = False
        """A re-affirming commit found this runner fenced (``_reaffirm_while_stepping``)."""
        self._finishing = False
        self._finish_at: int | None = None
        """``finish``: the inbox offset to read up to before stopping (its stable end then)."""
        self._fences_due: list[ReaderFence] = []
        """Fences the steps asked for, to start on the loop (``_start_fences``)."""
        self._fencing: set[asyncio.Task[None]] = set()
        self._fence_slots = asyncio.Semaphore(CONCURRENT_FENCES)
        self._fences_done: list[tuple[ReaderFence, bool]] = []
        """(fence, refused) done: the inbox's stable end is still to be looked up."""
        self._fences_reading: list[tuple[int, ReaderFence, bool]] = []
        """(the inbox's stable end after the fence, the fence, refused): the core hears of
        it once the loop has read that far (``_complete_fences``)."""
        self._open_transaction = OpenTransactionWatch(settings.session_timeout_ms / 1000)
        self._watching: asyncio.Task[None] | None = None
        """The broker asked whether a transaction still holds the inbox (one at a time)."""
        self._transactions_ended: list[int] = []
        """Subtasks whose transaction holding the inbox was ended, for the loop to report."""

    @property
    def source(self) -> str:
        return self.settings.source

    def served_s(self) -> float:
        """How long it has served (0 if it never started serving)."""
        return self._clock.monotonic() - self.active_since if self.active_since is not None else 0.0

    @property
    def core_at_rest(self) -> CoordinatorCore[Any] | None:
        """The core when no step is changing it; None while one runs (or before the
        start). What the loop's own readers (its logs) may look at; the endpoints wait for
        the step instead (``read_core``)."""
        return None if self._steps.busy_since is not None else self.core

    async def read_core(self, read: Callable[[CoordinatorCore[Any]], T], wait_s: float) -> T | None:
        """``read(core)`` on the step thread between two steps: what the endpoints serve. A
        scrape that came while a step ran got none of the core's series before (a busy
        coordinator's scrapes all missed them, and its dashboard showed nothing); now it waits
        for the step to end. None before the core exists, once the runner stopped, or if the
        step runs past ``wait_s`` (the read is dropped)."""
        core = self.core
        if core is None:
            return None
        try:
            return await asyncio.wait_for(self._steps.between_steps(functools.partial(read, core)), wait_s)
        except (TimeoutError, RuntimeError):  # RuntimeError: the step thread is shut down
            return None

    def step_running_s(self) -> float:
        """How long the running step has run; 0 between steps."""
        return self._steps.busy_for_s()

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The loop's task once started; done when the runner stopped (``state`` says why)."""
        return self._task

    @property
    def committed_offset(self) -> int | None:
        """The last inbox offset whose effects are committed."""
        return self._committed_offset

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"coordinator {self.source}")

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.state in (RunnerState.STARTING, RunnerState.ACTIVE):
            self.state = RunnerState.STOPPED

    async def finish(self, timeout_s: float = FINISH_TIMEOUT_S) -> None:
        """Stop once the inbox is read up to its stable end as it is now and what that did is
        committed. A host that ends stops the coordinator it embeds last, after its readers'
        last records are in (the splits they finished, their leaving): the source's state then
        says what they said, instead of leaving it to whichever coordinator serves the source
        next (the audit of a finished query showed splits unfinished and a reader live). At
        most ``timeout_s``, then as ``stop``."""
        task = self._task
        if task is not None and not task.done() and self.state is RunnerState.ACTIVE:
            self._finishing = True
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(task), timeout_s)
        await self.stop()

    async def _run(self) -> None:
        if self.liveness_interval_ms is not None:
            interval_s = self.liveness_interval_ms / 1000
            loop = asyncio.get_running_loop()
            self._reaffirming = loop.create_task(self._reaffirm_while_stepping(interval_s))
            self._marking = loop.create_task(self._mark_alive_while_committing(interval_s))
        try:
            await self._start_up()
            await self._loop()
        except LogFencedError:
            self.state = RunnerState.FENCED
            log.warning(
                "source %s: a newer coordinator took over (this producer is fenced); stepping down", self.source
            )
        except asyncio.CancelledError:
            raise
        except DefinitionMismatchError as exc:
            self.state = RunnerState.REFUSED
            self.failure = exc.problem
        except CommitFailedError as exc:
            self.state = RunnerState.FAILED
            self.failure = str(exc)  # the host logs it once, with its restart delay
        except StepFailedError as exc:
            # Nothing since the last commit is kept (the open records are dropped with this
            # runner); the host restarts the source from that commit, as after a crash.
            self.state = RunnerState.FAILED
            self.failure = f"{exc.detail}; nothing of that step was committed"
            log.debug("source %s: the failed step", self.source, exc_info=exc.__cause__)
        except Exception as exc:
            self.state = RunnerState.FAILED
            self.failure = f"the coordinator loop failed: {exc!r}"
            log.exception("source %s: the coordinator loop failed", self.source)
        finally:
            await self._close()
            if self._on_stop is not None:
                self._on_stop(self)

    async def _start_up(self) -> None:
        source = self._make_source()
        await self._log.fence()
        # This worker coordinates the source from here on; until its first commit the
        # marking task says so to the standbys (start_mark_due).
        self._starting_since = self._clock.monotonic()
        try:
            records = await self._log.restore()
            self._last_meta = _last_meta(self.source, records)
            core = await self._steps.run(functools.partial(self._restored_core, source, records))
            self.core = core
            await self._log.read_from(core.inbox_offset)
            self._committed_offset = core.inbox_offset
            await self._step(functools.partial(core.start, self._clock.wall_ms()))
        finally:
            self._starting_since = None
        await self._commit(force=True)  # the new epoch is durable before anything else happens
        # Which process serves it: a host that starts here once this one is gone (SIGKILLed
        # with its Spark query) takes the source over at once (embedded.py). Killed before
        # this, the last epoch names no process, and its successor waits out the silence.
        await self._transact([], [host_record(self.source, core.epoch, this_process().to_json())])
        # The restored state is long-lived: keep the collector from rescanning it. Collect
        # first, or the garbage of an earlier incarnation in this process (a restart after a
        # failure) is frozen with it and never freed: ~0.3 s per million objects, once.
        if self._freeze:
            gc.collect()
            gc.freeze()
            self._froze = True
        self.state = RunnerState.ACTIVE
        self.active_since = self._clock.monotonic()
        log.info(
            "coordinator for source %s (connector %s, %d subtasks, epoch %d) is serving %s from %s",
            self.source,
            self.settings.connector,
            self.settings.max_parallelism,
            core.epoch,
            self.topics.coordinator,
            "its beginning" if core.inbox_offset is None else f"offset {core.inbox_offset + 1}",
        )

    def _restored_core(self, source: Any, records: list[tuple[bytes | None, bytes | None]]) -> CoordinatorCore[Any]:
        """The core from the committed state (a step: a million splits take seconds)."""
        stored = restored_state(self.source, records)
        parts = stored.parts if stored is not None else None
        # Before anything is committed: a coordinator of another definition (a standby
        # started with other options) must not serve this source's state, even once.
        check_definition(self.source, parts, self.settings.definition(), "this coordinator")
        self._state_writer = StateWriter.restored(self.source, stored)
        epoch = parts["meta"]["epoch"] + 1 if parts else 1
        return CoordinatorCore(source, self.settings.core_config(), epoch, snapshot=parts)

    async def _close(self) -> None:
        if self._froze:
            # What this runner held becomes garbage now; frozen, its cycles would never be
            # freed. Every object is scanned again until the next runner's start freezes.
            gc.unfreeze()
        for task in (self._reaffirming, self._marking, self._watching, *self._fencing):
            if task is not None:
                task.cancel()
        self._steps.close()
        if self.core is not None:
            self.core.close()  # periodic calls stop with the enumerator
        self._calls.close()
        with contextlib.suppress(Exception):
            await self._log.close()

    # -- the loop -------------------------------------------------------------

    async def _loop(self) -> None:
        assert self.core is not None
        core, clock = self.core, self._clock
        while True:
            records = await self._log.fetch(self.tick_interval_ms, INBOX_BATCH)
            done = 0
            while done < len(records):
                done = await self._steps.run(functools.partial(self._apply, records, done))
                self._stop_if_fenced()
                self._schedule_calls()
                if self._pending_bytes >= COMMIT_BYTES:
                    await self._commit()
            results = self._calls.take_results()
            if results:
                await self._step(functools.partial(self._on_async_results, core, results, clock.wall_ms()))
            if clock.monotonic() >= self._next_tick:
                self._next_tick = clock.monotonic() + self.tick_interval_ms / 1000
                if await self._may_tick():
                    await self._step(functools.partial(core.tick, clock.wall_ms()))
            await self._complete_fences()
            await self._report_ended_transactions()
            await self._commit()
            if self._finishing and await self._read_to_finish():
                await self._commit(force=True)
                await self._release(core)
                return

    async def _release(self, core: CoordinatorCore[Any]) -> None:
        """The host ends: say so in the state, in a transaction after the last commit
        (state_records.RELEASED_PART), so that the source's next host takes it over at once
        instead of waiting out a silence. Without it (fenced, failed, killed), a successor
        waits, as after a crash."""
        await self._transact([], [released_record(self.source, core.epoch)])
        log.info(
            "source %s: released by its coordinator (epoch %d): its next host serves it at once",
            self.source,
            core.epoch,
        )

    async def _read_to_finish(self) -> bool:
        """Whether ``finish`` may stop the loop: the inbox read up to its stable end as it
        was when the loop first looked after ``finish`` asked."""
        if self._finish_at is None:
            self._finish_at = await self._log.stable_end()
        return (await self._log.behind()).position >= self._finish_at

    async def _step(self, step: Callable[[], Effects]) -> None:
        """One step of the core on the step thread, its effects queued there too (the
        encoding of a hundred megabytes of AddSplits is part of the step)."""
        await self._steps.run(lambda: self._queue(step()))
        self._stop_if_fenced()
        self._schedule_calls()

    # -- reader fences ----------------------------------------------------------

    def _start_fences(self) -> None:
        due, self._fences_due = self._fences_due, []
        for fence in due:
            task = asyncio.get_running_loop().create_task(self._fence_reader(fence))
            self._fencing.add(task)
            task.add_done_callback(self._fencing.discard)

    async def _fence_reader(self, fence: ReaderFence) -> None:
        """Fence the subtask's transactional id until that succeeds. Refused (the
        coordinator's principal lacks the ACL), the attempt fails unfenced, as before
        fences, and the operator is told what to grant."""
        tid = reader_transactional_id(self.namespace, self.source, fence.subtask)
        refused = False
        async with self._fence_slots:
            while True:
                try:
                    await self._log.fence_reader(tid)
                    break
                except ReaderFenceRefusedError as exc:
                    refused = True
                    log.error(
                        "source %s: could not fence the silent reader of subtask %d (%s): its splits move on "
                        "unfenced, and if it was only paused it may write them again. Allow the coordinator's "
                        "principal WRITE on transactional ids prefixed %s.%s.reader- (sluicegate acls)",
                        self.source,
                        fence.subtask,
                        exc,
                        self.namespace,
                        self.source,
                    )
                    break
                except Exception as exc:
                    log.warning(
                        "source %s: fencing transactional id %s failed (%r); trying again in %.0f s",
                        self.source,
                        tid,
                        exc,
                        FENCE_RETRY_S,
                    )
                    await asyncio.sleep(FENCE_RETRY_S)
        self._fences_done.append((fence, refused))

    async def _complete_fences(self) -> None:
        """A fence done, the inbox's stable end is looked up; once the loop has read up to
        it, every checkpoint the fenced reader committed is applied, and the core decides."""
        if self._fences_done:
            end = await self._log.stable_end()
            self._fences_reading += [(end, fence, refused) for fence, refused in self._fences_done]
            self._fences_done = []
        if not self._fences_reading:
            return
        position = (await self._log.behind()).position
        ready = [(fence, refused) for end, fence, refused in self._fences_reading if end <= position]
        if not ready:
            return
        self._fences_reading = [entry for entry in self._fences_reading if entry[0] > position]
        assert self.core is not None
        core, now_ms = self.core, self._clock.wall_ms()
        for fence, refused in ready:
            await self._step(functools.partial(core.reader_fenced, fence.subtask, fence.attempt, now_ms, refused))

    def _apply(self, records: list[InboxRecord], start: int) -> int:
        """Feed ``records[start:]`` to the core (on the step thread) until that much waits
        to go out that it is time to commit, or a successor fenced this runner; the index
        to go on from."""
        for i in range(start, len(records)):
            if self._fenced:
                return i  # the loop steps down (_stop_if_fenced)
            record = records[i]
            self._on_record(record.partition, record.offset, record.key, record.value)
            if self._pending_bytes >= COMMIT_BYTES:
                return i + 1
        return len(records)

    def _on_async_results(self, core: CoordinatorCore[Any], results: list[AsyncResult], now_ms: int) -> Effects:
        effects = Effects()
        for call_id, result, error in results:
            step = core.on_async_result(call_id, result, error, now_ms)
            effects.extend(step)
        return effects

    async def _may_tick(self) -> bool:
        """Whether to let time pass in the core now (tick_gate.py says when not); an inbox
        that looks blocked is watched, so that a transaction holding it for a session
        timeout is ended (open_transaction.py)."""
        inbox = await self._log.behind()
        now_s = self._clock.monotonic()
        blocked = blocked_at(inbox.position, inbox.stable, inbox.high)
        if self._open_transaction.wants_check(blocked, now_s) and self._watching is None:
            self._watching = asyncio.get_running_loop().create_task(self._watch_open_transaction())
        return self._tick_gate.may_tick(inbox.position, inbox.stable, inbox.high, now_s)

    async def _watch_open_transaction(self) -> None:
        watch = self._open_transaction
        try:
            try:
                stable: int | None = await self._log.stable_end()
            except Exception:
                stable = None  # the broker away: the holder cannot commit either
            now_s = self._clock.monotonic()
            due = watch.checked(stable, now_s)
            if due is None:
                return
            ended = await end_open_transaction(self._log, self.namespace, self.source, due, watch.held_for_s(now_s))
            if ended is not None:
                self._transactions_ended.append(ended)  # the loop tells the core: it alone steps it
        finally:
            self._watching = None

    async def _report_ended_transactions(self) -> None:
        ended, self._transactions_ended = self._transactions_ended, []
        assert self.core is not None
        for subtask in ended:
            await self._step(functools.partial(self.core.open_transaction_ended, subtask, self._clock.wall_ms()))

    def _on_record(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        assert self.core is not None
        self.stats.records_in += 1
        topic = self.topics.coordinator
        try:
            env = decode(value, Direction.TO_COORDINATOR)
        except DecodeError as exc:
            self.core.inbox_offset = offset
            self._dead_letter(DeadLetter(topic, partition, offset, key, value, exc.kind.value, exc.detail))
            return
        try:
            effects = self.core.on_message(env, offset, self._clock.wall_ms())
        except StepFailedError:
            raise  # the record is good; the step is retried from the last commit
        except Exception as exc:  # a bug must cost one record, not the coordinator
            log.exception("internal error on %s[%d]@%d", topic, partition, offset)
            self.core.metrics.counter("internal_errors")
            self.core.inbox_offset = offset
            self._dead_letter(DeadLetter(topic, partition, offset, key, value, "internal-error", repr(exc)))
            return
        if effects.rejection is not None:
            self._dead_letter(DeadLetter(topic, partition, offset, key, value, "rejected", effects.rejection))
        self._queue(effects)

    def _dead_letter(self, letter: DeadLetter) -> None:
        letter.log()
        self.stats.dead_letters += 1
        assert self.core is not None
        self.core.metrics.counter("dead_letters")
        self._pending.append(OutgoingRecord(self.topics.dead_letter, 0, letter.key, letter.value, letter.headers()))

    def _queue(self, effects: Effects) -> None:
        """A step's messages to go out with the next commit; its async calls to start on
        the loop (``_schedule_calls``: this may run on the step thread)."""
        for env in effects.messages:
            value = encode(env)
            self._pending_bytes += len(value)
            self._pending.append(OutgoingRecord(self.topics.readers, env.subtask, encode_key(env.subtask), value))
        if effects.async_calls or effects.cancelled_calls:
            self._calls_due.append(effects)
        self._fences_due += effects.fences

    def _schedule_calls(self) -> None:
        """Start and cancel the async calls of the steps so far, in their order, and start
        the reader fences they asked for."""
        due, self._calls_due = self._calls_due, []
        for effects in due:
            for call in effects.async_calls:
                self._calls.start(call)
            for call_id in effects.cancelled_calls:
                self._calls.cancel(call_id)
        self._start_fences()

    async def _commit(self, force: bool = False) -> None:
        """One transaction: pending records + changed state parts + inbox offset (in meta).
        Offset-only progress (heartbeats, and parts flagged changed that encode as they
        were written) waits up to commit_interval_ms; with nothing to commit, ``meta``
        alone is committed every liveness_interval_ms."""
        assert self.core is not None
        core = self.core
        offset_moved = core.inbox_offset != self._committed_offset
        since_ms = (self._clock.monotonic() - self._last_commit) * 1000

        def due(changed: bool) -> bool:
            return force or commit_due(
                changed, offset_moved, since_ms, self.commit_interval_ms, self.liveness_interval_ms
            )

        if not due(bool(self._pending) or core.has_state_changes):
            return
        try:
            parts = await self._steps.run(lambda: self._state_writer.encode(core.state_parts(only_changed=True)))
        except StateTooLargeError as exc:
            raise CommitFailedError(f"cannot commit: {exc}") from exc
        if not due(bool(self._pending) or _more_than_meta(self.source, parts)):
            # The parts flagged changed encode as they were written (an enumerator whose
            # discovery found nothing new): offset-only progress, committed within the interval.
            return
        records, self._pending = self._pending, []
        meta = self._last_meta
        if self.liveness_interval_ms is not None and meta is not None and self._pending_bytes >= KEEPALIVE_BYTES:
            records = with_keepalives(records, OutgoingRecord(self.topics.coordinator_state, 0, *meta))
        self._pending_bytes = 0
        started = time.perf_counter()
        # A failed transaction was aborted: nothing of it is visible. Failing the runner
        # (CommitFailedError) makes the host restart it from the last commit, which is
        # exactly where readers are.
        await self._transact(records, parts)
        self._last_meta = _last_meta(self.source, parts) or self._last_meta
        self._committed_offset = core.inbox_offset
        self._last_commit = self._clock.monotonic()
        self.stats.commits += 1
        self.stats.records_out += len(records)
        self.stats.last_commit_ms = (time.perf_counter() - started) * 1000

    async def _reaffirm_while_stepping(self, interval_s: float) -> None:
        """While a step keeps the loop from committing for a liveness interval, commit the
        last commit's ``meta`` again: the state stays what it was, and the standbys see
        the state topic move (silence.py). Fenced meanwhile, it stops, and the loop steps
        down as soon as the step ends (``_stop_if_fenced``)."""
        while True:
            await asyncio.sleep(interval_s / 4)
            since_commit_s = self._clock.monotonic() - self._last_commit
            meta = self._last_meta
            if meta is None or not reaffirm_due(self._steps.busy_for_s(), since_commit_s, interval_s):
                continue
            try:
                await self._transact([], [meta])
            except LogFencedError:
                log.info("source %s: fenced while a step of %.0f s ran", self.source, self._steps.busy_for_s())
                self._fenced = True
                return
            except CommitFailedError as exc:
                log.warning("source %s: could not commit during a long step (%s); trying again", self.source, exc)
                continue
            self._last_commit = self._clock.monotonic()
            self.stats.reaffirmed += 1

    async def _transact(self, records: Sequence[OutgoingRecord], state: Sequence[StateRecord]) -> None:
        """One transaction of the log, one at a time, timed for ``_mark_alive_while_committing``."""
        async with self._commit_lock:
            began, marks = self._clock.monotonic(), self.stats.marked_alive
            self._committing_since = began
            try:
                await self._log.commit(records, state)
            finally:
                self._committing_since = None
        if self.stats.marked_alive > marks:  # the broker is slow: say so once per transaction
            waited_s = self._clock.monotonic() - began
            log.info(
                "source %s: the broker took %.1f s for one transaction; marked alive meanwhile", self.source, waited_s
            )

    async def _mark_alive_while_committing(self, interval_s: float) -> None:
        """While a transaction waits on the broker for a liveness interval, or the start-up
        restores the state, write a tombstone of the ``alive`` part outside any transaction,
        for the standbys watching (silence.py ``mark_due``, ``start_mark_due``). A mark that
        fails is no harm: the next one is due at once."""
        warned_for: float | None = None
        while not self._fenced:  # a fenced runner has nobody to keep waiting
            await asyncio.sleep(interval_s / 4)
            now = self._clock.monotonic()
            since_moved_s = now - max(self._last_commit, self._last_mark)
            since = self._committing_since
            committing_s = now - since if since is not None else 0.0
            starting = self._starting_since
            if not (
                mark_due(committing_s, since_moved_s, interval_s)
                or (starting is not None and start_mark_due(now - starting, since_moved_s, interval_s))
            ):
                continue
            try:
                await self._log.mark_alive(self._alive_key)
            except Exception as exc:  # only standbys' patience depends on it, never the state
                episode = since if since is not None else starting
                once = warned_for != episode  # one warning per transaction or start-up, not one every interval
                warned_for = episode
                log.log(
                    logging.WARNING if once else logging.DEBUG,
                    "source %s: could not mark this coordinator alive while it starts or a transaction waits (%r)",
                    self.source,
                    exc,
                )
                continue
            self._last_mark = self._clock.monotonic()
            self.stats.marked_alive += 1
            log.debug("source %s: %s; marked alive", self.source, _why_marked(committing_s, starting, now))

    def _stop_if_fenced(self) -> None:
        """Step down after the step that a successor fenced: the steps after it could never
        be committed, and they took CPU from that successor (a fenced worker of a
        1,000,000-split source went on for 34 s, timing out readers it no longer served)."""
        if self._fenced:
            raise LogFencedError("fenced while a step ran")

    # -- for humans -----------------------------------------------------------

    def describe(self) -> str:
        core = self.core_at_rest
        if core is None:
            running = self.step_running_s()
            return f"source {self.source}: {self.state.value}" + (
                f", a step running for {running:.0f} s" if running else ""
            )
        counters = core.metrics.counters
        return (
            f"source {self.source} epoch {core.epoch}: {len(core.live_subtasks())}/{core.config.max_parallelism} "
            f"readers live, {core.tracker.total_owned()} splits owned, {counters['splits_assigned']} assigned in all, "
            f"{self.stats.records_in} control messages in, {self.stats.records_out} out, {self.stats.commits} commits, "
            f"{counters['fenced_messages']} fenced, {self.stats.dead_letters} dead-lettered"
            + (", finished" if core.is_finished() else "")
        )


def _why_marked(committing_s: float, starting_since: float | None, now: float) -> str:
    if starting_since is not None:
        return f"starting for {now - starting_since:.1f} s"
    return f"a transaction has waited {committing_s:.1f} s"


def _more_than_meta(source: str, records: Sequence[StateRecord]) -> bool:
    """Whether state ``records`` hold anything besides the ``meta`` every commit writes."""
    meta = state_key(source, ALWAYS_WRITTEN)
    return any(key != meta for key, _ in records)


def _last_meta(source: str, records: Sequence[tuple[bytes | None, bytes | None]]) -> StateRecord | None:
    """The last ``meta`` record of ``source`` among ``records`` (in the order written)."""
    key = state_key(source, ALWAYS_WRITTEN)
    for k, value in reversed(records):
        if k == key:
            return None if value is None else (key, value)
    return None
