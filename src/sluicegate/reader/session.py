"""The reader side of the protocol as a small state machine, free of I/O.

``ReaderSession`` decides what each coordinator message means for this reader
(attempts, epochs, ``seq`` bookkeeping, fencing), drives the connector's
``SourceReader``, and says what to send back. ``reader.host`` feeds it records
from Kafka and carries its answers out; the unit tests feed it envelopes.

docs/protocol.md is the contract. In short:

- a message addressed to another attempt is ignored, and so is one from a
  coordinator epoch lower than the highest seen;
- ``AddSplits``/``NoMoreSplits`` apply in ``seq`` order; one whose ``seq`` is not
  above the applied one is skipped (it was applied before the checkpoint we
  restored from);
- ``SplitsReleased`` naming our attempt as failed, or ``ReaderRegistered`` for
  another incarnation with a newer attempt, fences us: the host drops the
  connector reader, restores the last durable checkpoint and registers again.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic

from sluicegate.api.reader import InputStatus, ReadResult, SourceReader, SourceReaderContext
from sluicegate.api.source import Source, SupportsSplitReassignmentOnRecovery
from sluicegate.api.split import SplitT, WireSplit
from sluicegate.protocol.messages import (
    AddSplits,
    Body,
    CheckpointAck,
    CoordinatorSourceEvent,
    Envelope,
    Heartbeat,
    NoMoreSplits,
    ReaderRegistered,
    ReaderRegistration,
    ReaderSourceEvent,
    RequestSplit,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
    envelope,
)
from sluicegate.reader.state import ReaderCheckpoint
from sluicegate.reader.watermark import SplitWatermarks

log = logging.getLogger("sluicegate.reader")

REQUEST_SPLIT_INTERVAL_MS = 1_000


class Phase(enum.Enum):
    UNREGISTERED = "unregistered"
    """No attempt: before the first registration, or after being fenced."""
    REGISTERING = "registering"
    """ReaderRegistration sent; waiting for ReaderRegistered with our incarnation."""
    ACTIVE = "active"
    CLOSED = "closed"


class Disposition(enum.Enum):
    """What one incoming coordinator record did."""

    APPLIED = "applied"
    REGISTERED = "registered"
    FENCED = "fenced"
    IGNORED_SOURCE = "ignored-source"
    IGNORED_EPOCH = "ignored-epoch"
    IGNORED_ATTEMPT = "ignored-attempt"
    SKIPPED_SEQ = "skipped-seq"


@dataclass(frozen=True)
class CheckpointPlan:
    """A checkpoint to commit: the state record, its ack, the splits finished since the last."""

    checkpoint: ReaderCheckpoint
    finished_split_ids: list[str]
    records_since_last: int

    @property
    def checkpoint_id(self) -> int:
        return self.checkpoint.checkpoint_id

    def ack(self) -> CheckpointAck:
        return CheckpointAck(
            checkpoint_id=self.checkpoint.checkpoint_id,
            applied_seq=self.checkpoint.applied_seq,
            splits=self.checkpoint.splits,
        )

    def splits_finished(self) -> SplitsFinished | None:
        if not self.finished_split_ids:
            return None
        return SplitsFinished(split_ids=list(self.finished_split_ids))


@dataclass(frozen=True)
class _HostedReaderContext(SourceReaderContext):
    """The connector reader's context: its source events go out through the session."""

    emit: Callable[[Any], None] = field(default=lambda _event: None, repr=False, compare=False)

    def send_source_event(self, event: Any) -> None:
        self.emit(event)


class ReaderSession(Generic[SplitT]):
    def __init__(
        self,
        source_name: str,
        subtask: int,
        source: Source[SplitT],
        *,
        location: str,
        restored: ReaderCheckpoint | None = None,
    ) -> None:
        self.source_name = source_name
        self.subtask = subtask
        self.source = source
        self.location = location
        self.codec = source.split_codec
        self.reassign_on_recovery = isinstance(source, SupportsSplitReassignmentOnRecovery)
        self.counters: Counter[str] = Counter()

        self.last_checkpoint: ReaderCheckpoint | None = restored
        """The last durable checkpoint: restored at start, then each committed one."""
        self.highest_epoch = restored.epoch if restored else 0
        self.phase = Phase.UNREGISTERED
        self.incarnation = ""
        self.attempt: int | None = None
        self.reader: SourceReader[SplitT] | None = None
        self.applied_seq = 0
        self.no_more_splits = False
        self.owned: dict[str, None] = {}
        """Splits the connector reader holds and has not finished (insertion-ordered)."""
        self.finished_pending: list[str] = []
        """Finished since the last committed checkpoint (go out with the next one)."""
        self.watermarks = SplitWatermarks()
        self.low_watermark: int | None = None
        self.max_allowed_watermark: int | None = None
        self.records_read = 0
        self.records_at_checkpoint = 0
        self.splits_finished_total = 0
        self.checkpoints_committed = 0
        self._outbox: list[Body] = []
        self._nothing_to_read = False
        self._last_request_ms: int | None = None
        self._fenced_reason: str | None = None

    # -- registration ---------------------------------------------------------

    @property
    def restored_splits(self) -> list[WireSplit]:
        return list(self.last_checkpoint.splits) if self.last_checkpoint else []

    def begin_registration(self) -> ReaderRegistration:
        """A new incarnation; the host sends the returned registration (attempt null)."""
        if self.phase is Phase.ACTIVE:
            raise RuntimeError("an active reader must be fenced or closed before it registers again")
        self.incarnation = str(uuid.uuid4())
        self.phase = Phase.REGISTERING
        self.attempt = None
        cp = self.last_checkpoint
        return ReaderRegistration(
            incarnation=self.incarnation,
            location=self.location,
            reported_splits=self.restored_splits,
            restored_checkpoint_id=cp.checkpoint_id if cp else None,
        )

    # -- incoming ---------------------------------------------------------------

    def on_message(self, env: Envelope) -> Disposition:
        """Apply one decoded coordinator record addressed to our subtask's partition."""
        if env.source != self.source_name or env.subtask != self.subtask:
            self.counters["ignored_foreign"] += 1
            log.warning(
                "ignored %s addressed to source %r subtask %d (this is %r subtask %d)",
                env.type,
                env.source,
                env.subtask,
                self.source_name,
                self.subtask,
            )
            return Disposition.IGNORED_SOURCE
        if env.epoch < self.highest_epoch:
            self.counters["ignored_old_epoch"] += 1
            log.debug(
                "ignored %s from coordinator epoch %d (seen %d)",
                env.type,
                env.epoch,
                self.highest_epoch,
            )
            return Disposition.IGNORED_EPOCH
        self.highest_epoch = env.epoch
        body = env.body
        if isinstance(body, ReaderRegistered):
            return self._on_registered(env, body)
        if self.phase is not Phase.ACTIVE or env.attempt != self.attempt:
            self.counters["ignored_other_attempt"] += 1
            log.debug("ignored %s for attempt %s (ours: %s)", env.type, env.attempt, self.attempt)
            return Disposition.IGNORED_ATTEMPT
        if isinstance(body, AddSplits):
            return self._on_add_splits(body)
        if isinstance(body, NoMoreSplits):
            return self._on_no_more_splits(body)
        if isinstance(body, SplitsReleased):
            return self._on_released(body)
        if isinstance(body, WatermarkAnnouncement):
            self.low_watermark = body.low_watermark
            self.max_allowed_watermark = body.max_allowed_watermark
            self._align()
            return Disposition.APPLIED
        if isinstance(body, CoordinatorSourceEvent):
            self._require_reader().handle_source_event(body.payload)
            return Disposition.APPLIED
        self.counters["ignored_unexpected"] += 1
        log.warning("ignored unexpected %s from the coordinator", env.type)
        return Disposition.IGNORED_ATTEMPT

    def _on_registered(self, env: Envelope, body: ReaderRegistered) -> Disposition:
        if self.phase is Phase.REGISTERING and body.incarnation == self.incarnation:
            self._activate(body.attempt, body.dropped_split_ids)
            return Disposition.REGISTERED
        if (
            self.phase is Phase.ACTIVE
            and body.incarnation != self.incarnation
            and self.attempt is not None
            and body.attempt > self.attempt
        ):
            self._fence(f"incarnation {body.incarnation} registered as attempt {body.attempt}")
            return Disposition.FENCED
        self.counters["ignored_other_attempt"] += 1
        return Disposition.IGNORED_ATTEMPT

    def _activate(self, attempt: int, dropped_split_ids: list[str]) -> None:
        """Registered: a fresh connector reader, keeping the restored splits minus the
        dropped ones (none at all for a source with reassignment on recovery)."""
        self.attempt = attempt
        self.phase = Phase.ACTIVE
        cp = self.last_checkpoint
        self.applied_seq = cp.applied_seq if cp else 0
        self.no_more_splits = False
        context = _HostedReaderContext(
            subtask=self.subtask,
            attempt=attempt,
            location=self.location,
            emit=self._emit_source_event,
        )
        self.reader = self.source.create_reader(context)
        self.reader.start()
        restored = self.restored_splits
        checkpoint_id = cp.checkpoint_id if cp else None
        if not restored:
            log.info("registered as attempt %d (applied seq %d)", attempt, self.applied_seq)
            return
        if self.reassign_on_recovery:
            log.info(
                "registered as attempt %d; reported %d restored splits to the coordinator "
                "for reassignment (checkpoint %s, applied seq %d)",
                attempt,
                len(restored),
                checkpoint_id,
                self.applied_seq,
            )
            return
        dropped = set(dropped_split_ids)
        kept = [split for split in restored if split["split_id"] not in dropped]
        self._give(kept)
        log.info(
            "registered as attempt %d; kept %d of %d restored splits (checkpoint %s, applied seq %d)%s",
            attempt,
            len(kept),
            len(restored),
            checkpoint_id,
            self.applied_seq,
            f"; the coordinator dropped {len(restored) - len(kept)}" if len(kept) < len(restored) else "",
        )

    def _on_add_splits(self, body: AddSplits) -> Disposition:
        if body.seq <= self.applied_seq:
            self.counters["skipped_seq"] += 1
            log.info(
                "skipped AddSplits seq %d: already applied (applied seq %d)",
                body.seq,
                self.applied_seq,
            )
            return Disposition.SKIPPED_SEQ
        if body.seq != self.applied_seq + 1:
            log.info(
                "AddSplits seq %d follows applied seq %d (the ones between were released)",
                body.seq,
                self.applied_seq,
            )
        fresh = [s for s in body.splits if s["split_id"] not in self.owned]
        if len(fresh) != len(body.splits):
            self.counters["duplicate_splits"] += len(body.splits) - len(fresh)
            log.warning(
                "AddSplits seq %d names %d splits this reader already holds; not added twice",
                body.seq,
                len(body.splits) - len(fresh),
            )
        self._give(fresh)
        self.applied_seq = body.seq
        log.info("got %d splits (seq %d); owning %d", len(fresh), body.seq, len(self.owned))
        return Disposition.APPLIED

    def _on_no_more_splits(self, body: NoMoreSplits) -> Disposition:
        if body.seq <= self.applied_seq:
            self.counters["skipped_seq"] += 1
            log.info(
                "skipped NoMoreSplits seq %d: already applied (applied seq %d)",
                body.seq,
                self.applied_seq,
            )
            return Disposition.SKIPPED_SEQ
        self.applied_seq = body.seq
        self.no_more_splits = True
        self._require_reader().notify_no_more_splits()
        log.info("no more splits will come (seq %d); %d left to finish", body.seq, len(self.owned))
        return Disposition.APPLIED

    def _on_released(self, body: SplitsReleased) -> Disposition:
        if body.failed_attempt is not None and body.failed_attempt == self.attempt:
            self._fence(f"the coordinator failed attempt {body.failed_attempt} ({body.reason})")
            return Disposition.FENCED
        held = [sid for sid in body.split_ids if sid in self.owned]
        if held:
            # The connector API cannot take splits back from a live reader; the
            # coordinator only releases splits of a live attempt that it does not hold.
            self.counters["released_but_held"] += len(held)
            log.warning(
                "the coordinator released %d splits (%s) that this reader still holds, e.g. %s",
                len(held),
                body.reason,
                held[:5],
            )
        else:
            log.info("the coordinator released %d splits (%s)", len(body.split_ids), body.reason)
        return Disposition.APPLIED

    def _give(self, wire: list[WireSplit]) -> None:
        if not wire:
            return
        splits = [self.codec.from_wire(s) for s in wire]
        self._require_reader().add_splits(splits)
        ids = [s["split_id"] for s in wire]
        for split_id in ids:
            self.owned[split_id] = None
        self.watermarks.add(ids)
        self._nothing_to_read = False

    def _emit_source_event(self, event: Any) -> None:
        self._outbox.append(ReaderSourceEvent(payload=event))

    # -- fencing ---------------------------------------------------------------

    @property
    def fenced_reason(self) -> str | None:
        return self._fenced_reason

    def _fence(self, reason: str) -> None:
        self.counters["fenced"] += 1
        log.warning("fenced as attempt %s: %s; dropping in-memory state", self.attempt, reason)
        self._fenced_reason = reason
        self._drop()
        self.phase = Phase.UNREGISTERED

    def self_fence(self, reason: str) -> None:
        """The host lost contact (e.g. no heartbeat sent within the session timeout)."""
        if self.phase is Phase.ACTIVE or self.phase is Phase.REGISTERING:
            self._fence(reason)

    def _drop(self) -> None:
        if self.reader is not None:
            try:
                self.reader.close()
            except Exception:  # a connector bug must not stop the host from recovering
                log.exception("the connector reader raised on close")
        self.reader = None
        self.attempt = None
        self.owned.clear()
        self.finished_pending.clear()
        self.watermarks.clear()
        self.no_more_splits = False
        self.applied_seq = 0
        self.low_watermark = None
        self.max_allowed_watermark = None
        self._outbox.clear()
        self._nothing_to_read = False
        self._last_request_ms = None
        self.records_at_checkpoint = self.records_read

    def close(self) -> None:
        self._drop()
        self.phase = Phase.CLOSED

    # -- reading ----------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.phase is Phase.ACTIVE

    def read(self, max_records: int) -> ReadResult:
        """One batch from the connector reader, with the bookkeeping done."""
        result = self._require_reader().next_batch(max_records)
        self.records_read += len(result.records)
        self.watermarks.observe(result.records)
        if result.finished_split_ids:
            for split_id in result.finished_split_ids:
                if self.owned.pop(split_id, 0) is None:
                    self.finished_pending.append(split_id)
                    self.splits_finished_total += 1
                else:
                    self.counters["finished_not_owned"] += 1
            self.watermarks.remove(result.finished_split_ids)
        self._nothing_to_read = not result.records and result.status is not InputStatus.MORE_AVAILABLE
        if self.max_allowed_watermark is not None and result.records:
            self._align()
        return result

    @property
    def nothing_to_read(self) -> bool:
        return self._nothing_to_read

    def maybe_request_split(self, now_ms: int) -> RequestSplit | None:
        """A RequestSplit when there is nothing to read and more may come, at most once a second."""
        if not self.active or self.no_more_splits or not self._nothing_to_read:
            return None
        if self._last_request_ms is not None and now_ms - self._last_request_ms < REQUEST_SPLIT_INTERVAL_MS:
            return None
        self._last_request_ms = now_ms
        return RequestSplit(hostname=self.location.rsplit(":", 1)[0] or None)

    def _align(self) -> None:
        change = self.watermarks.align(self.max_allowed_watermark)
        if change and self.reader is not None:
            self.reader.pause_or_resume_splits(change.to_pause, change.to_resume)
            if change.to_pause:
                log.info(
                    "paused %d splits past the allowed watermark %s",
                    len(change.to_pause),
                    self.max_allowed_watermark,
                )
            if change.to_resume:
                log.info("resumed %d splits", len(change.to_resume))

    def take_outbox(self) -> list[Body]:
        out, self._outbox = self._outbox, []
        return out

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(watermark=self.watermarks.current(), idle=not self.owned)

    @property
    def is_finished(self) -> bool:
        """Bounded end: NoMoreSplits applied and every split finished."""
        return self.active and self.no_more_splits and not self.owned

    # -- checkpoints ------------------------------------------------------------

    @property
    def next_checkpoint_id(self) -> int:
        return (self.last_checkpoint.checkpoint_id if self.last_checkpoint else 0) + 1

    @property
    def checkpoint_due(self) -> bool:
        """Whether anything changed since the last durable checkpoint of this attempt
        (records read, splits finished, a seq applied); an idle reader skips checkpoints."""
        cp = self.last_checkpoint
        return (
            cp is None
            or cp.attempt != self.attempt
            or cp.applied_seq != self.applied_seq
            or bool(self.finished_pending)
            or self.records_read != self.records_at_checkpoint
        )

    def prepare_checkpoint(self) -> CheckpointPlan:
        """Snapshot the connector reader. Nothing changes until ``checkpoint_committed``."""
        checkpoint_id = self.next_checkpoint_id
        splits = [self.codec.to_wire(s) for s in self._require_reader().snapshot_state(checkpoint_id)]
        checkpoint = ReaderCheckpoint(
            source=self.source_name,
            subtask=self.subtask,
            checkpoint_id=checkpoint_id,
            applied_seq=self.applied_seq,
            splits=splits,
            epoch=self.highest_epoch,
            attempt=self.attempt,
            no_more_splits=self.no_more_splits,
        )
        return CheckpointPlan(checkpoint, list(self.finished_pending), self.records_read - self.records_at_checkpoint)

    def checkpoint_committed(self, plan: CheckpointPlan) -> None:
        self.last_checkpoint = plan.checkpoint
        done = set(plan.finished_split_ids)
        self.finished_pending = [s for s in self.finished_pending if s not in done]
        self.records_at_checkpoint += plan.records_since_last
        self.checkpoints_committed += 1
        if self.reader is not None:
            self.reader.notify_checkpoint_complete(plan.checkpoint_id)

    def leaving_checkpoint(self) -> ReaderCheckpoint:
        """The state record of a graceful leave: no splits (the coordinator takes them back)."""
        cp = self.last_checkpoint
        return ReaderCheckpoint(
            source=self.source_name,
            subtask=self.subtask,
            checkpoint_id=cp.checkpoint_id if cp else 0,
            applied_seq=cp.applied_seq if cp else self.applied_seq,
            splits=[],
            epoch=self.highest_epoch,
            attempt=self.attempt,
            no_more_splits=cp.no_more_splits if cp else False,
        )

    # -- outgoing ---------------------------------------------------------------

    def envelope(self, body: Body, now_ms: int) -> Envelope:
        attempt = None if isinstance(body, ReaderRegistration) else self.attempt
        return envelope(
            body,
            source=self.source_name,
            subtask=self.subtask,
            attempt=attempt,
            epoch=self.highest_epoch,
            ts=now_ms,
        )

    def _require_reader(self) -> SourceReader[SplitT]:
        if self.reader is None:
            raise RuntimeError("no connector reader: the session is not registered")
        return self.reader
