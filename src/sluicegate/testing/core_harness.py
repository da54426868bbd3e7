"""An in-memory transport for CoordinatorCore unit tests (part of the connector test kit,
``sluicegate.testing``; the kit's ``MemoryRun`` drives real connector readers instead).

``CoreHarness`` holds one core and plays both topics of docs/protocol.md:

- the inbox: ``feed`` gives the core one reader envelope at the next offset
  (offsets increase by one per record, as on the single-partition topic);
- the readers topic: every outgoing Envelope is appended to ``sent`` (the whole
  stream in the core's order) and delivered to the simulated readers of its
  subtask (``SimReader``), which apply it the way a reader host would: they
  learn their attempt from ``ReaderRegistered``, ignore records addressed to
  another attempt, apply ``AddSplits`` in arrival (= seq) order, drop released
  splits and stop when told their own attempt failed.

Simulated readers remember their last acknowledged checkpoint, so a test can
restart a subtask from it (``register(s, restore=True)``), as a reader host
restoring its state would.

A ``ReaderFence`` is done at once (``fences_done_at_once``: in memory there is no
transactional id to fence and nothing more in the inbox), unless the harness was made
with ``hold_fences=True``: then they wait in ``fences`` for ``complete_fence``, and a
test can feed records in between, as a reader committing just before the fence.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from sluicegate.api.source import Source, SupportsSplitReassignmentOnRecovery
from sluicegate.api.split import WireSplit
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.core import CoordinatorCore, Effects, ReaderFence
from sluicegate.protocol.messages import (
    AddSplits,
    Body,
    CheckpointAck,
    CoordinatorSourceEvent,
    Envelope,
    Heartbeat,
    NoMoreSplits,
    ReaderLeaving,
    ReaderRegistered,
    ReaderRegistration,
    ReleaseRequest,
    RequestSplit,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
)
from sluicegate.protocol.pieces import Assembly, body_in_pieces
from sluicegate.reader.protocol import splits_changed

B = TypeVar("B", bound=Body)


def fences_done_at_once(core: CoordinatorCore[Any], effects: Effects, now_ms: int) -> Effects:
    """``effects`` with each ``ReaderFence`` carried out at once and what the core did then
    added: the host's part where there is nothing to fence and no inbox left to read (the
    in-memory drivers of tests and benchmarks)."""
    while effects.fences:
        fences, effects.fences = effects.fences, []
        for fence in fences:
            effects.extend(core.reader_fenced(fence.subtask, fence.attempt, now_ms))
    return effects


def body(env: Envelope, type_: type[B]) -> B:
    """``env``'s body, checked to be a ``type_``."""
    assert isinstance(env.body, type_), env
    return env.body


SOURCE = "orders"
START_MS = 1_000_000

_CURRENT = object()


def sequence_source(splits: int = 8, records_per_split: int | str = 10, **options: str) -> Source[Any]:
    """The ``sequence`` connector with these options (the harness's default source)."""
    from sluicegate_connectors.sequence import SequenceSource  # shipped alongside, imported when used

    opts = {"splits": str(splits), "records_per_split": str(records_per_split), **options}
    source: Source[Any] = SequenceSource.from_options(opts)
    return source


@dataclass
class Checkpoint:
    checkpoint_id: int
    applied_seq: int
    splits: list[WireSplit]


@dataclass
class SimReader:
    """One incarnation of a reader subtask, as its host sees the readers topic."""

    subtask: int
    incarnation: str
    attempt: int | None = None
    applied_seq: int = 0
    splits: dict[str, WireSplit] = field(default_factory=dict)
    releasing: set[str] = field(default_factory=set)
    """Asked back by a ReleaseRequest: given back with the next ack."""
    no_more_splits: bool = False
    failed: bool = False
    checkpoint: Checkpoint | None = None
    watermarks: list[int | None] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    received: list[Envelope] = field(default_factory=list)
    pieces: Assembly = field(default_factory=Assembly)

    @property
    def live(self) -> bool:
        return self.attempt is not None and not self.failed

    def deliver(self, env: Envelope) -> None:
        whole = self.pieces.take(env)
        if whole is None:
            return  # a piece of a record still arriving (v6)
        env, body = whole, whole.body
        if isinstance(body, ReaderRegistered):
            if body.incarnation == self.incarnation and self.attempt is None:
                self.attempt = body.attempt
                for split_id in body.dropped_split_ids:
                    self.splits.pop(split_id, None)
                self.received.append(env)
            return
        if self.attempt is None or env.attempt != self.attempt or self.failed:
            return
        self.received.append(env)
        if isinstance(body, AddSplits):
            for split in body.splits:
                self.splits[split["split_id"]] = dict(split)
            self.applied_seq = body.seq
        elif isinstance(body, NoMoreSplits):
            self.applied_seq = body.seq
            self.no_more_splits = True
        elif isinstance(body, ReleaseRequest):
            self.applied_seq = body.seq
            self.releasing.update(sid for sid in body.split_ids if sid in self.splits)
        elif isinstance(body, SplitsReleased):
            if body.failed_attempt == self.attempt:
                self.failed = True  # stop reading, drop everything, register again
                self.splits.clear()
                self.releasing.clear()
            else:
                for split_id in body.split_ids:
                    self.splits.pop(split_id, None)
        elif isinstance(body, WatermarkAnnouncement):
            self.watermarks.append(body.low_watermark)
        elif isinstance(body, CoordinatorSourceEvent):
            self.events.append(body.payload)


class CoreHarness:
    def __init__(
        self,
        source: Source[Any] | None = None,
        *,
        max_parallelism: int = 4,
        epoch: int = 1,
        snapshot: Mapping[str, Any] | None = None,
        now_ms: int = START_MS,
        first_offset: int = 0,
        start: bool = True,
        source_name: str = SOURCE,
        hold_fences: bool = False,
        **config: Any,
    ) -> None:
        self.hold_fences = hold_fences
        self.fences: list[ReaderFence] = []
        """Fences asked for and not completed yet (``hold_fences``)."""
        self.source = source if source is not None else sequence_source()
        self.config = CoordinatorConfig(source=source_name, max_parallelism=max_parallelism, **config)
        self.core: CoordinatorCore[Any] = CoordinatorCore(self.source, self.config, epoch=epoch, snapshot=snapshot)
        self.now_ms = now_ms
        self.next_offset = first_offset
        self.sent: list[Envelope] = []
        self.inbox: list[tuple[int, Envelope]] = []
        self.incarnations: dict[int, list[SimReader]] = {}
        self._names = itertools.count(1)
        self._checkpoint_ids = itertools.count(1)
        self.last: Effects = Effects()
        self.persisted: dict[str, Any] = {}
        """The state parts as a compacted state topic would hold them: after every step
        the harness stores what ``state_parts(only_changed=True)`` returns, as the
        SourceRunner commits it."""
        if start:
            self.start()

    # -- driving the core ---------------------------------------------------------

    def start(self) -> Effects:
        return self._collect(self.core.start(self.now_ms))

    def restart_coordinator(self) -> Effects:
        """The coordinator process dies after its last step; a successor at the next
        epoch restores the incrementally persisted (JSON) state parts and starts.
        Readers keep running."""
        snapshot = orjson.loads(orjson.dumps(self.persisted))
        self.core = CoordinatorCore(self.source, self.config, epoch=self.core.epoch + 1, snapshot=snapshot)
        return self.start()

    def restart_after_failure(self) -> Effects:
        """What the host does when a step raised StepFailedError: nothing of that step (or
        of any step after the last commit; here every step commits) is kept, a successor
        restores the last commit and is offered the inbox records after its offset again."""
        effects = self.restart_coordinator()
        committed = self.persisted["meta"]["inbox_offset"]
        for offset, env in self.inbox:
            if committed is None or offset > committed:
                effects = self._collect(self.core.on_message(env, offset, self.now_ms))
        return effects

    def tick(self) -> Effects:
        return self._collect(self.core.tick(self.now_ms))

    def advance(self, ms: int) -> Effects:
        """Let ``ms`` pass and tick once."""
        self.now_ms += ms
        return self.tick()

    def pass_time(self, ms: int, alive: Iterable[int] = ()) -> list[Envelope]:
        """Let ``ms`` pass in ticks of half a session timeout; after each tick the
        ``alive`` subtasks send a heartbeat (idle when they hold no split).
        Returns every record the coordinator sent meanwhile."""
        alive = list(alive)
        step = max(1, self.config.session_timeout_ms // 2)
        first = len(self.sent)
        remaining = ms
        while remaining > 0:
            self.advance(min(step, remaining))
            remaining -= step
            for subtask in alive:
                if self.reader(subtask).live:
                    self.heartbeat(subtask, idle=not self.reader(subtask).splits)
        return self.sent[first:]

    def envelope(self, subtask: int, body: Body, attempt: int | None, *, source: str | None = None) -> Envelope:
        return Envelope(
            type=body.TYPE,
            source=self.config.source if source is None else source,
            subtask=subtask,
            attempt=attempt,
            epoch=self.core.epoch,
            ts=self.now_ms,
            body=body,
        )

    def feed(self, env: Envelope) -> Effects:
        """One inbox record at the next offset."""
        offset = self.next_offset
        self.next_offset += 1
        self.inbox.append((offset, env))
        return self._collect(self.core.on_message(env, offset, self.now_ms))

    def send(self, subtask: int, body: Body, attempt: Any = _CURRENT) -> Effects:
        """A reader message from ``subtask``, by default from its newest attempt."""
        if attempt is _CURRENT:
            attempt = self.reader(subtask).attempt
        return self.feed(self.envelope(subtask, body, attempt))

    def send_whole(self, subtask: int, body: Body) -> Effects:
        """A reader record that may go in pieces (v6), cut as a reader cuts it for the
        coordinator's ``max_message_bytes``: the effects of its last piece."""
        effects = Effects()
        for piece in body_in_pieces(body, self.config.max_message_bytes):
            effects = self.send(subtask, piece)
        return effects

    # -- what simulated readers do --------------------------------------------------

    def register(
        self,
        subtask: int,
        *,
        restore: bool = False,
        reported: Sequence[WireSplit] | None = None,
        restored_checkpoint_id: int | None = None,
        location: str = "host-a",
    ) -> SimReader:
        """A new incarnation of ``subtask`` registers, fresh or restored from the
        previous incarnation's last acknowledged checkpoint (``restore=True``)."""
        reader = SimReader(subtask, f"inc-{subtask}-{next(self._names)}")
        if restore:
            previous = self.incarnations.get(subtask, [])
            checkpoint = previous[-1].checkpoint if previous else None
            if checkpoint is not None:
                reported = [dict(s) for s in checkpoint.splits]
                restored_checkpoint_id = checkpoint.checkpoint_id
                reader.applied_seq = checkpoint.applied_seq
                reader.checkpoint = checkpoint
        reported = [dict(s) for s in reported or []]
        if not isinstance(self.source, SupportsSplitReassignmentOnRecovery):
            reader.splits = {s["split_id"]: dict(s) for s in reported}
        self.incarnations.setdefault(subtask, []).append(reader)
        body = ReaderRegistration(
            incarnation=reader.incarnation,
            location=location,
            reported_splits=reported,
            restored_checkpoint_id=restored_checkpoint_id,
        )
        for piece in body_in_pieces(body, self.config.max_message_bytes):
            self.feed(self.envelope(subtask, piece, None))
        return reader

    def heartbeat(self, subtask: int, watermark: int | None = None, idle: bool = False) -> Effects:
        return self.send(subtask, Heartbeat(watermark=watermark, idle=idle))

    def ack(self, subtask: int, changes_only: bool = False) -> Effects:
        """The reader's host checkpointed durably: its splits and its last applied seq; the
        splits asked back go in ``returned`` and the reader stops reading them.
        ``changes_only``: the ack names only what moved since the reader's last one (v7)."""
        reader = self.reader(subtask)
        returned = [reader.splits.pop(sid) for sid in sorted(reader.releasing) if sid in reader.splits]
        reader.releasing.clear()
        checkpoint = Checkpoint(
            next(self._checkpoint_ids),
            reader.applied_seq,
            [dict(s) for s in reader.splits.values()],
        )
        base = reader.checkpoint if changes_only else None
        splits = [dict(s) for s in checkpoint.splits]
        effects = self.send_whole(
            subtask,
            CheckpointAck(
                checkpoint_id=checkpoint.checkpoint_id,
                applied_seq=checkpoint.applied_seq,
                splits=splits if base is None else splits_changed(base.splits, splits),
                returned=returned,
                base_checkpoint_id=None if base is None else base.checkpoint_id,
            ),
        )
        reader.checkpoint = checkpoint
        return effects

    def finish(self, subtask: int, split_ids: Iterable[str] | None = None) -> Effects:
        """The reader read these splits (default: all it holds) to their end."""
        reader = self.reader(subtask)
        ids = sorted(reader.splits) if split_ids is None else list(split_ids)
        for split_id in ids:
            reader.splits.pop(split_id, None)
        return self.send(subtask, SplitsFinished(split_ids=ids))

    def leave(self, subtask: int) -> Effects:
        reader = self.reader(subtask)
        splits = [dict(s) for s in reader.splits.values()]
        reader.splits.clear()
        effects = self.send_whole(subtask, ReaderLeaving(splits=splits))
        reader.failed = True
        return effects

    def request_split(self, subtask: int) -> Effects:
        return self.send(subtask, RequestSplit(hostname=None))

    # -- observing ---------------------------------------------------------------------

    def reader(self, subtask: int) -> SimReader:
        """The newest incarnation of ``subtask``."""
        return self.incarnations[subtask][-1]

    def to(self, subtask: int, *types: type[Body]) -> list[Envelope]:
        """Every record sent to ``subtask`` so far (optionally only these body types)."""
        return [e for e in self.sent if e.subtask == subtask and (not types or isinstance(e.body, types))]

    def of_type(self, *types: type[Body], messages: Sequence[Envelope] | None = None) -> list[Envelope]:
        return [e for e in (self.sent if messages is None else messages) if isinstance(e.body, types)]

    def owned(self, subtask: int) -> set[str]:
        return self.core.tracker.owned_ids(subtask)

    def unassigned(self) -> list[str]:
        """Split ids the enumerator holds (enumerators whose state has ``unassigned``)."""
        pending_ids = getattr(self.core.enumerator, "pending_split_ids", None)
        if pending_ids is not None:  # the sequence enumerator's state abbreviates runs of fresh splits
            return list(pending_ids())
        state = self.core.enumerator.snapshot_state(self.core.cseq)
        return [s["split_id"] for s in state["unassigned"]]

    @property
    def counters(self) -> Mapping[str, int]:
        """The coordinator's counters and the enumerator's own group, together."""
        both = Counter(self.core.metrics.counters)
        both.update(self.core.enumerator_metrics.counters)
        return both

    def complete_fence(self, fence: ReaderFence | None = None) -> Effects:
        """The host is done with ``fence`` (default: the oldest held): the core decides."""
        fence = fence if fence is not None else self.fences[0]
        self.fences.remove(fence)
        return self._collect(self.core.reader_fenced(fence.subtask, fence.attempt, self.now_ms))

    def end_open_transaction(self, subtask: int) -> Effects:
        """The host ended a transaction of ``subtask``'s reader that held the inbox."""
        return self._collect(self.core.open_transaction_ended(subtask, self.now_ms))

    def _collect(self, effects: Effects) -> Effects:
        if self.hold_fences:
            self.fences += effects.fences
        else:
            effects = fences_done_at_once(self.core, effects, self.now_ms)
        self.persisted.update(self.core.state_parts(only_changed=True))
        self.last = effects
        for env in effects.messages:
            self.sent.append(env)
            for reader in self.incarnations.get(env.subtask, []):
                reader.deliver(env)
        return effects
