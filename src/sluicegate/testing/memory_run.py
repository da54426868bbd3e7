"""A connector run end to end in one process, with no Kafka: ``MemoryRun``.

The coordinator's ``CoordinatorCore`` and one ``ReaderSession`` per live reader
(each with its own connector ``SourceReader``, built from its own ``Source``, as in
separate processes) exchange the protocol's envelopes directly, in the order the
control topics would deliver them. Time is virtual: every round moves the clock by
``round_ms``, so session timeouts, departures and grace delays cost rounds, not
seconds. ``call_async`` work runs when its virtual time is due, in a worker thread
(as the runner does: a callable that touches the context fails there too).

Output is transactional, as a reader host's ``kafka:`` output: the records a reader
reads wait in ``pending`` and join ``output`` only with the checkpoint that holds
their positions; a killed reader loses its pending records, and its next incarnation
restores the last checkpoint (``durable``, the reader-state topic). A restarted
coordinator restores the state parts persisted after every step.

A step that raises (``StepFailedError``) is handled as the coordinator's host does:
nothing of it is kept, a successor restores the last commit and is offered the same
input again; each such failure is kept in ``step_failures``. What the run saw that
breaks the reader contract (records of a split the host paused for alignment) is
collected in ``violations``.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from sluicegate.api.reader import Record
from sluicegate.api.source import Source
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.core import AsyncCall, CoordinatorCore, Effects, StepFailedError
from sluicegate.protocol.messages import Body, Envelope
from sluicegate.protocol.pieces import body_in_pieces
from sluicegate.reader.protocol import Fenced, Superseded
from sluicegate.reader.session import ReaderSession
from sluicegate.reader.state import ReaderCheckpoint

log = logging.getLogger("sluicegate.testing")

START_MS = 1_700_000_000_000
MAX_FAILED_STEPS_IN_A_ROW = 5
"""The real host retries for ever (with backoff); a run gives up on an input after this."""


@dataclass(frozen=True)
class RunConfig:
    """How a ``MemoryRun`` paces its readers and coordinator (virtual time)."""

    parallelism: int = 2
    batch: int = 5
    """Records a reader reads per round: small, so that failures land mid-split."""
    round_ms: int = 100
    checkpoint_every: int = 4
    """Rounds between a reader's checkpoints."""
    session_timeout_ms: int = 2_000
    departure_timeout_ms: int = 2_000
    max_watermark_drift_ms: int | None = None
    split_idle_timeout_ms: int = 0
    """Split idleness of the reader sessions (0: off); an unbounded source whose data runs
    out needs it for alignment, or its drained splits hold the low watermark for ever."""
    max_seconds: float = 60.0
    """Wall-clock limit of ``run_until`` (a connector that polls real I/O makes rounds slow)."""


@dataclass
class KitReader:
    """One reader process of a subtask: its session and its uncommitted output."""

    subtask: int
    session: ReaderSession[Any]
    pending: list[Record] = field(default_factory=list)
    rounds: int = 0


@dataclass(order=True)
class _Timer:
    due_ms: int
    order: int
    call: AsyncCall = field(compare=False)


class MemoryRun:
    def __init__(
        self,
        make_source: Callable[[], Source[Any]],
        config: RunConfig = RunConfig(),
        source_name: str = "kit",
    ) -> None:
        self.make_source = make_source
        self.config = config
        self.source_name = source_name
        self.core_config = CoordinatorConfig(
            source=source_name,
            max_parallelism=config.parallelism,
            session_timeout_ms=config.session_timeout_ms,
            reader_departure_timeout_ms=config.departure_timeout_ms,
            watermark_announce_interval_ms=config.round_ms,
            max_watermark_drift_ms=config.max_watermark_drift_ms,
        )
        self.now_ms = START_MS
        self.rounds = 0
        self.readers: dict[int, KitReader] = {}
        """The live reader processes by subtask."""
        self.durable: dict[int, ReaderCheckpoint] = {}
        """Each subtask's last committed checkpoint (the reader-state topic)."""
        self.output: list[Record] = []
        """Every committed record, in commit order."""
        self.sent: list[Envelope] = []
        """Every coordinator record, in the coordinator's order."""
        self.received: list[Envelope] = []
        """Every reader record the coordinator was given, in inbox order."""
        self.committed_by: Counter[int] = Counter()
        """Records committed by each subtask's checkpoints."""
        self.discarded = 0
        """Records read but lost with a killed reader (never committed)."""
        self.paused_seen = 0
        """Splits the hosts paused for alignment, summed over rounds."""
        self.violations: list[str] = []
        self.step_failures: list[str] = []
        """Every StepFailedError, in order: the coordinator restarted from its last commit."""
        self._failed_in_a_row = 0
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kit-call-async")
        self.persisted: dict[str, Any] = {}
        self._timers: list[_Timer] = []
        self._timer_order = itertools.count()
        self._inbox: deque[Envelope] = deque()
        self._offset = 0
        self._to_restart: set[int] = set()
        self.core: CoordinatorCore[Any] = CoordinatorCore(make_source(), self.core_config)
        self._step(lambda: self.core.start(self.now_ms))

    # -- the coordinator -----------------------------------------------------------

    def restart_coordinator(self) -> None:
        """The coordinator process dies after its last step; a successor at the next epoch
        restores the persisted state (through JSON, as from the state topic) and starts.
        Its timers (``call_async``) die with it; the readers keep running."""
        self._restore_coordinator()
        self._pump()

    def _restore_coordinator(self) -> None:
        self._timers.clear()
        if not self.persisted:  # nothing was ever committed (the first start failed): start afresh
            self.core = CoordinatorCore(self.make_source(), self.core_config)
        else:
            snapshot = orjson.loads(orjson.dumps(self.persisted))
            epoch = self.core.epoch + 1
            self.core = CoordinatorCore(self.make_source(), self.core_config, epoch=epoch, snapshot=snapshot)
        self._step(lambda: self.core.start(self.now_ms))

    def _step(self, step: Callable[[], Effects]) -> bool:
        """Run one coordinator step and carry out its effects; if it raised StepFailedError,
        restart the coordinator from the last commit as its host would (the caller offers
        the input again) and return False."""
        try:
            effects = step()
        except StepFailedError as exc:
            self.step_failures.append(str(exc))
            self._failed_in_a_row += 1
            if self._failed_in_a_row >= MAX_FAILED_STEPS_IN_A_ROW:
                raise AssertionError(
                    f"the coordinator failed {self._failed_in_a_row} times in a row (it would restart for ever): {exc}"
                ) from exc
            self._restore_coordinator()
            return False
        self._failed_in_a_row = 0
        self._carry_out(effects)
        return True

    def _carry_out(self, effects: Effects) -> None:
        self.persisted.update(self.core.state_parts(only_changed=True))
        for call in effects.async_calls:
            heapq.heappush(self._timers, _Timer(self.now_ms + call.initial_delay_ms, next(self._timer_order), call))
        if effects.cancelled_calls:
            stopped = set(effects.cancelled_calls)
            self._timers = [t for t in self._timers if t.call.call_id not in stopped]
            heapq.heapify(self._timers)
        for env in effects.messages:
            self.sent.append(env)
            reader = self.readers.get(env.subtask)
            if reader is not None:
                self._deliver(reader, env)

    def _fire_timers(self) -> None:
        while self._timers and self._timers[0].due_ms <= self.now_ms:
            timer = heapq.heappop(self._timers)
            call = timer.call
            result: Any = None
            error: BaseException | None = None
            try:
                result = self._worker.submit(call.fn).result()
            except Exception as exc:  # handed to the enumerator's handler, as the runner does
                error = exc
            if not self._step(functools.partial(self.core.on_async_result, call.call_id, result, error, self.now_ms)):
                return  # a successor: its own timers replace these
            if call.period_ms > 0:
                timer.due_ms += call.period_ms
                heapq.heappush(self._timers, timer)

    def _send(self, reader: KitReader, body: Body) -> None:
        self._inbox.append(reader.session.envelope(body, self.now_ms))

    def _pump(self) -> None:
        """Deliver every reader record to the coordinator (and its answers to the readers)."""
        while self._inbox:
            env = self._inbox[0]
            offset = self._offset
            if not self._step(functools.partial(self.core.on_message, env, offset, self.now_ms)):
                continue  # the successor is offered the same record
            self._inbox.popleft()
            self.received.append(env)
            self._offset += 1

    # -- reader processes ------------------------------------------------------------

    def start_reader(self, subtask: int, restore: bool = True) -> KitReader:
        """A reader process for ``subtask``: it restores the subtask's last checkpoint
        (unless ``restore`` is False) and registers."""
        if subtask in self.readers:
            raise ValueError(f"subtask {subtask} already has a live reader process")
        session: ReaderSession[Any] = ReaderSession(
            self.source_name,
            subtask,
            self.make_source(),
            location=f"kit-{subtask}",
            restored=self.durable.get(subtask) if restore else None,
            split_idle_timeout_ms=self.config.split_idle_timeout_ms,
            clock_ms=lambda: self.now_ms,
        )
        reader = KitReader(subtask, session)
        self.readers[subtask] = reader
        for piece in body_in_pieces(session.begin_registration()):
            self._send(reader, piece)
        self._pump()
        return reader

    def kill_reader(self, subtask: int) -> int:
        """SIGKILL: the process and its uncommitted output are gone. Returns how many
        records it had read and not committed."""
        reader = self.readers.pop(subtask)
        lost = len(reader.pending)
        self.discarded += lost
        connector_reader = reader.session.reader
        if connector_reader is not None:
            try:  # not what a SIGKILL does, but it frees the connector's clients in this process
                connector_reader.close()
            except Exception:
                log.exception("the connector reader raised on close")
        return lost

    def checkpoint(self, subtask: int) -> bool:
        """The reader host's checkpoint: its pending output, its state record and its
        messages (SplitsFinished, CheckpointAck) commit together."""
        reader = self.readers[subtask]
        session = reader.session
        if not session.active:
            return False
        plan = session.prepare_checkpoint()
        self.output += reader.pending
        self.committed_by[subtask] += len(reader.pending)
        reader.pending = []
        self.durable[subtask] = plan.checkpoint
        for body in plan.messages():
            self._send(reader, body)
        session.checkpoint_committed(plan)
        self._pump()
        return True

    def _deliver(self, reader: KitReader, env: Envelope) -> None:
        outcome = reader.session.on_message(env)
        if isinstance(outcome, Fenced):
            # The host drops what it had not checkpointed and registers again from its
            # checkpoint (next round: not while the coordinator's step is being delivered).
            self.kill_reader(reader.subtask)
            self._to_restart.add(reader.subtask)
        elif isinstance(outcome, Superseded):
            self.kill_reader(reader.subtask)

    def _step_reader(self, reader: KitReader) -> None:
        session = reader.session
        reader.rounds += 1
        if session.active:
            paused = session.watermarks.paused
            self.paused_seen += len(paused)
            result = session.read(self.config.batch)
            wrong = [r for r in result.records if r.split_id in paused]
            if wrong:
                self._violation(
                    f"subtask {reader.subtask} emitted {len(wrong)} records of splits paused for alignment "
                    f"(e.g. split {wrong[0].split_id!r}): pause_or_resume_splits was not honoured"
                )
            reader.pending += result.records
            for body in session.take_outbox():
                self._send(reader, body)
            request = session.maybe_request_split(self.now_ms)
            if request is not None:
                self._send(reader, request)
            ran_dry = session.nothing_to_read and bool(session.finished_pending)
            due = reader.rounds % self.config.checkpoint_every == 0 or ran_dry or session.is_finished
            if due and session.checkpoint_due:
                self.checkpoint(reader.subtask)
                return
            self._send(reader, session.heartbeat())
        self._pump()

    # -- rounds ------------------------------------------------------------------------

    def round(self) -> None:
        """Every live reader reads a batch (and checkpoints when due), then time passes."""
        self.rounds += 1
        for subtask in sorted(self._to_restart):
            if subtask not in self.readers:
                self.start_reader(subtask)
        self._to_restart.clear()
        for subtask in sorted(self.readers):
            reader = self.readers.get(subtask)
            if reader is not None:
                self._step_reader(reader)
        self.now_ms += self.config.round_ms
        self._step(lambda: self.core.tick(self.now_ms))
        self._fire_timers()
        self._pump()

    def run_rounds(self, rounds: int) -> None:
        for _ in range(rounds):
            self.round()

    def run_until(self, condition: Callable[[], bool], what: str, max_rounds: int = 5_000) -> None:
        """Rounds until ``condition()``; AssertionError naming ``what`` after ``max_rounds``
        or ``config.max_seconds``."""
        deadline = time.monotonic() + self.config.max_seconds
        for _ in range(max_rounds):
            if condition():
                return
            if time.monotonic() > deadline:
                break
            self.round()
        if not condition():
            raise AssertionError(
                f"{what} did not happen within {self.rounds} rounds or {self.config.max_seconds:.0f} s\n"
                f"{self.describe()}"
            )

    # -- observing ---------------------------------------------------------------------

    def is_finished(self) -> bool:
        """Bounded end: every live reader was told NoMoreSplits, no split is owned, and
        nothing is left uncommitted (a subtask with no reader process is not waited for)."""
        return (
            bool(self.readers)
            and self.core.tracker.total_owned() == 0
            and all(r.session.is_finished for r in self.readers.values())
            and not any(r.pending or r.session.finished_pending for r in self.readers.values())
        )

    def added_to(self, subtask: int, since: int = 0) -> set[str]:
        """Split ids the coordinator assigned to ``subtask`` in ``sent[since:]``."""
        ids: set[str] = set()
        for env in self.sent[since:]:
            if env.subtask == subtask and env.type == "AddSplits":
                ids.update(s["split_id"] for s in getattr(env.body, "splits", []))
        return ids

    def describe(self) -> str:
        """The run's state in a few lines, for a failure message."""
        lines = [f"after {self.rounds} rounds: {len(self.output)} records committed, {self.discarded} discarded"]
        for subtask in range(self.config.parallelism):
            owned = sorted(self.core.tracker.owned_ids(subtask))
            live = self.readers.get(subtask)
            state = "no reader process" if live is None else live.session.phase.value
            shown = ", ".join(owned[:6]) + (" ..." if len(owned) > 6 else "")
            lines.append(f"  subtask {subtask} ({state}): owns {len(owned)} splits [{shown}]")
        pending = getattr(self.core.enumerator, "pending_split_ids", None)
        if callable(pending):
            lines.append(f"  the enumerator holds {len(pending())} unassigned splits")
        counters = {k: v for k, v in self.core.metrics.counters.items() if v}
        if counters:
            lines.append(f"  coordinator counters: {counters}")
        if self.violations:
            lines.append("  violations: " + "; ".join(self.violations[:5]))
        return "\n".join(lines)

    def _violation(self, message: str) -> None:
        if message not in self.violations:
            self.violations.append(message)
