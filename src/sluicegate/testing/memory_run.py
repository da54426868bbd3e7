"""A connector run end to end in one process, with no Kafka: ``MemoryRun``.

The product's coordinator loop (``SourceRunner``, over an in-memory log:
memory_coordinator.py) and one ``ReaderSession`` per live reader (each with its own
connector ``SourceReader``, built from its own ``Source``, as in separate processes)
exchange the protocol's records in the order the control topics would deliver them.
Time is virtual: every round moves the clock by ``round_ms``, so session timeouts,
departures and grace delays cost rounds, not seconds. ``call_async`` work runs when
its virtual time is due, in a worker thread (as the runner does: a callable that
touches the context fails there too).

Output is transactional, as a reader host's ``kafka:`` output: the records a reader
reads wait in ``pending`` and join ``output`` only with the checkpoint that holds
their positions; a killed reader loses its pending records, and its next incarnation
restores the last checkpoint (``durable``, the reader-state topic). A restarted
coordinator restores what its predecessor committed, which is everything: the run lets
the coordinator settle (read, step, commit) after every reader's turn.

A step that raises (``StepFailedError``) is handled as the coordinator's host does:
nothing of it is kept, a successor restores the last commit and is offered the same
input again; each such failure is kept in ``step_failures``. What the run saw that
breaks the reader contract (records of a split the host paused for alignment) is
collected in ``violations``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluicegate.api.reader import Record
from sluicegate.api.source import Source
from sluicegate.coordinator.core import CoordinatorCore
from sluicegate.coordinator.settings import SourceSettings
from sluicegate.protocol.messages import Body, Envelope
from sluicegate.protocol.pieces import body_in_pieces
from sluicegate.reader.protocol import Fenced, Superseded
from sluicegate.reader.session import ReaderSession
from sluicegate.reader.state import ReaderCheckpoint
from sluicegate.testing.memory_coordinator import MemoryCoordinator, VirtualClock

log = logging.getLogger("sluicegate.testing")

START_MS = 1_700_000_000_000


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
        self.clock = VirtualClock(START_MS)
        self.rounds = 0
        self.readers: dict[int, KitReader] = {}
        """The live reader processes by subtask."""
        self.durable: dict[int, ReaderCheckpoint] = {}
        """Each subtask's last committed checkpoint (the reader-state topic)."""
        self.output: list[Record] = []
        """Every committed record, in commit order."""
        self.committed_by: Counter[int] = Counter()
        """Records committed by each subtask's checkpoints."""
        self.discarded = 0
        """Records read but lost with a killed reader (never committed)."""
        self.paused_seen = 0
        """Splits the hosts paused for alignment, summed over rounds."""
        self.violations: list[str] = []
        self._to_restart: set[int] = set()
        source_class = type(make_source())
        settings = SourceSettings(
            source=source_name,
            connector=f"{source_class.__module__}:{source_class.__qualname__}",
            max_parallelism=config.parallelism,
            session_timeout_ms=config.session_timeout_ms,
            reader_departure_timeout_ms=config.departure_timeout_ms,
            watermark_announce_interval_ms=config.round_ms,
            max_watermark_drift_ms=config.max_watermark_drift_ms,
            check_connector=False,  # the run's make_source builds it, with its own options
        )
        self.coordinator = MemoryCoordinator(settings, make_source, self.clock, self._deliver)
        self.coordinator.settle()

    @property
    def now_ms(self) -> int:
        return self.clock.now_ms

    @property
    def core(self) -> CoordinatorCore[Any]:
        """The serving coordinator's core (look, do not step it)."""
        return self.coordinator.core

    @property
    def sent(self) -> list[Envelope]:
        """Every coordinator record, in the coordinator's order."""
        return self.coordinator.sent

    @property
    def received(self) -> list[Envelope]:
        """Every reader record the coordinator read, in inbox order."""
        return self.coordinator.received

    @property
    def step_failures(self) -> list[str]:
        """Every failed coordinator (StepFailedError, as a rule): each successor restarted
        from the last commit."""
        return self.coordinator.step_failures

    def close(self) -> None:
        """Stop the coordinator and close every reader's connector (idempotent)."""
        for subtask in list(self.readers):
            self.kill_reader(subtask)
        self.coordinator.close()

    # -- the coordinator -----------------------------------------------------------

    def restart_coordinator(self) -> None:
        """The coordinator process dies after its last commit; a successor at the next epoch
        restores the committed state and starts. Its timers (``call_async``) die with it;
        the readers keep running."""
        self.coordinator.restart()

    def _send(self, reader: KitReader, body: Body) -> None:
        self.coordinator.write(reader.session.envelope(body, self.now_ms))

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
        self.coordinator.settle()
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
        self.coordinator.settle()
        return True

    def _deliver(self, env: Envelope) -> None:
        """A coordinator record, as its commit made it visible, to its subtask's reader
        process if one is live (the record of a dead process's subtask waits for nobody:
        a new process registers and is answered anew)."""
        reader = self.readers.get(env.subtask)
        if reader is None:
            return
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
        self.coordinator.settle()

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
        self.clock.now_ms += self.config.round_ms
        self.coordinator.fire_due_calls()
        self.coordinator.settle()

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
