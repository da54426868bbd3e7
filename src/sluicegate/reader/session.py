"""A reader subtask that drives a connector ``SourceReader``: the protocol's outcomes
applied to the connector.

``ReaderProtocol`` (reader/protocol.py) decides what each coordinator record means
(attempts, epochs, ``seq`` order, fencing, ownership, checkpoints); this adapter
turns its outcomes into calls on the connector's reader (a fresh reader per
attempt, ``add_splits``, ``notify_no_more_splits``, source events, pause/resume
for alignment, ``remove_splits`` once a checkpoint has given splits back), reads
batches, and keeps per-split watermarks from the records.
``reader.host`` feeds it records from Kafka; the unit tests feed it envelopes.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic

import pyarrow as pa

from sluicegate.api.reader import (
    ColumnarReader,
    InputStatus,
    LowWatermarkListener,
    ReadResult,
    SourceReader,
    SourceReaderContext,
    split_id_column,
)
from sluicegate.api.source import Source, SupportsSplitReassignmentOnRecovery
from sluicegate.api.split import SplitT, WireSplit
from sluicegate.protocol.dead_letter import DeadLetter
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.event_time import event_time_text
from sluicegate.protocol.messages import (
    Body,
    Envelope,
    Heartbeat,
    ReaderRegistration,
    ReaderSourceEvent,
    RequestSplit,
)
from sluicegate.reader.protocol import (
    AlignmentBound,
    AssignedSplit,
    CheckpointPlan,
    Disposition,
    Fenced,
    NoMoreSplitsApplied,
    Outcome,
    Phase,
    ReaderProtocol,
    Registered,
    SourceEventReceived,
    SplitsAdded,
    Superseded,
)
from sluicegate.reader.records import records_batch
from sluicegate.reader.state import ReaderCheckpoint
from sluicegate.reader.watermark import SplitWatermarks

log = logging.getLogger("sluicegate.reader")

__all__ = ["CheckpointPlan", "Disposition", "Outcome", "Phase", "ReaderSession"]


@dataclass(frozen=True)
class _HostedReaderContext(SourceReaderContext):
    """The connector reader's context: its source events go out through the session."""

    emit: Callable[[Any], None] = field(default=lambda _event: None, repr=False, compare=False)
    reject: Callable[[DeadLetter], None] = field(default=lambda _letter: None, repr=False, compare=False)

    def send_source_event(self, event: Any) -> None:
        self.emit(event)

    def dead_letter(self, kind: str, origin: str, position: int, reason: str) -> None:
        self.reject(DeadLetter(origin, -1, position, origin.encode(), reason.encode(), kind, reason))


class ReaderSession(Generic[SplitT]):
    def __init__(
        self,
        source_name: str,
        subtask: int,
        source: Source[SplitT],
        *,
        location: str,
        restored: ReaderCheckpoint | None = None,
        split_idle_timeout_ms: int = 0,
        clock_ms: Callable[[], int] = lambda: int(time.monotonic() * 1000),
        definition: SourceDefinition | None = None,
    ) -> None:
        self.protocol = ReaderProtocol(
            source_name,
            subtask,
            location=location,
            reassign_on_recovery=isinstance(source, SupportsSplitReassignmentOnRecovery),
            restored=restored,
            definition=definition,
        )
        self.source = source
        self.codec = source.split_codec
        self.reader: SourceReader[SplitT] | None = None
        self.watermarks = SplitWatermarks(split_idle_timeout_ms)
        self._clock_ms = clock_ms
        """Split idleness only (a monotonic clock); the tests pass their own."""
        self.records_read = 0
        self.records_at_checkpoint = 0
        self._outbox: list[Body] = []
        self._dead_letters: list[DeadLetter] = []
        self._nothing_to_read = False

    # -- the protocol's state, as the host and tests read it ---------------------------

    @property
    def source_name(self) -> str:
        return self.protocol.source_name

    @property
    def subtask(self) -> int:
        return self.protocol.subtask

    @property
    def location(self) -> str:
        return self.protocol.location

    @property
    def phase(self) -> Phase:
        return self.protocol.phase

    @property
    def active(self) -> bool:
        return self.protocol.active

    @property
    def attempt(self) -> int | None:
        return self.protocol.attempt

    @property
    def incarnation(self) -> str:
        return self.protocol.incarnation

    @property
    def highest_epoch(self) -> int:
        return self.protocol.highest_epoch

    @property
    def applied_seq(self) -> int:
        return self.protocol.applied_seq

    @property
    def no_more_splits(self) -> bool:
        return self.protocol.no_more_splits

    @property
    def owned(self) -> dict[str, AssignedSplit]:
        return self.protocol.owned

    @property
    def finished_pending(self) -> list[str]:
        return self.protocol.finished_pending

    @property
    def last_checkpoint(self) -> ReaderCheckpoint | None:
        return self.protocol.last_checkpoint

    @property
    def restored_splits(self) -> list[WireSplit]:
        return self.protocol.restored_splits

    @property
    def low_watermark(self) -> int | None:
        return self.protocol.low_watermark

    @property
    def max_allowed_watermark(self) -> int | None:
        return self.protocol.max_allowed_watermark

    @property
    def fenced_reason(self) -> str | None:
        return self.protocol.fenced_reason

    @property
    def counters(self) -> Counter[str]:
        return self.protocol.counters

    @property
    def splits_finished_total(self) -> int:
        return self.protocol.splits_finished_total

    @property
    def checkpoints_committed(self) -> int:
        return self.protocol.checkpoints_committed

    @property
    def next_checkpoint_id(self) -> int:
        return self.protocol.next_checkpoint_id

    @property
    def is_finished(self) -> bool:
        return self.protocol.is_finished

    # -- registration and incoming records --------------------------------------------

    def begin_registration(self) -> ReaderRegistration:
        return self.protocol.begin_registration()

    def on_message(self, env: Envelope) -> Outcome:
        """Apply one decoded coordinator record; the connector reader follows the outcome,
        which is returned for the host to act on (the protocol's typed outcomes: a host
        matches on their types, as this method does)."""
        outcome = self.protocol.on_message(env)
        if isinstance(outcome, Registered):
            self._start_reader(outcome.attempt)
            self._give(outcome.kept)
        elif isinstance(outcome, SplitsAdded):
            self._give(outcome.splits)
        elif isinstance(outcome, NoMoreSplitsApplied):
            self._require_reader().notify_no_more_splits()
        elif isinstance(outcome, AlignmentBound):
            self._align()
            self._notify_low_watermark(outcome.low_watermark)
        elif isinstance(outcome, SourceEventReceived):
            self._require_reader().handle_source_event(outcome.payload)
        elif isinstance(outcome, (Fenced, Superseded)):
            self._drop()
        return outcome

    def _start_reader(self, attempt: int) -> None:
        context = _HostedReaderContext(
            subtask=self.subtask,
            attempt=attempt,
            location=self.location,
            emit=self._emit_source_event,
            reject=self._reject,
        )
        self.reader = self.source.create_reader(context)
        self.reader.start()

    def _give(self, wire: list[WireSplit]) -> None:
        if not wire:
            return
        self._require_reader().add_splits([self.codec.from_wire(s) for s in wire])
        self.watermarks.add((s["split_id"] for s in wire), self._clock_ms())
        self._nothing_to_read = False

    def _emit_source_event(self, event: Any) -> None:
        self._outbox.append(ReaderSourceEvent(payload=event))

    # -- fencing ---------------------------------------------------------------

    def self_fence(self, reason: str) -> None:
        """The host lost contact (e.g. no heartbeat sent within the session timeout)."""
        if self.protocol.self_fence(reason) is not None:
            self._drop()

    def _drop(self) -> None:
        if self.reader is not None:
            try:
                self.reader.close()
            except Exception:  # a connector bug must not stop the host from recovering
                log.exception("the connector reader raised on close")
        self.reader = None
        self.watermarks.clear()
        self._outbox.clear()
        self._nothing_to_read = False
        self.records_at_checkpoint = self.records_read

    def close(self) -> None:
        self._drop()
        self.protocol.close()

    # -- reading ----------------------------------------------------------------

    def read(self, max_records: int) -> ReadResult:
        """One batch of records from the connector reader, with the bookkeeping done."""
        result = self._require_reader().next_batch(max_records)
        self.watermarks.observe(result.records, self._clock_ms())
        self._after_read(len(result.records), result.finished_split_ids, result.status)
        return result

    def read_columns(self, max_records: int) -> pa.RecordBatch | None:
        """One input batch (reader/records.py) with the bookkeeping done: the connector's
        own columns when it is a ``ColumnarReader``, else its records converted."""
        reader = self._require_reader()
        if not isinstance(reader, ColumnarReader):
            records = self.read(max_records).records
            return records_batch(records) if records else None
        result = reader.next_columns(max_records)
        rows = 0 if result.batch is None else result.batch.num_rows
        self.watermarks.observe_event_times(result.event_times, self._clock_ms())
        self._after_read(rows, result.finished_split_ids, result.status)
        return result.batch if rows else None

    def split_ids_of(self, batch: pa.RecordBatch) -> list[str]:
        """The split of each row of a batch from ``read_columns``."""
        reader = self._require_reader()
        if isinstance(reader, ColumnarReader):
            return reader.split_ids_of(batch)
        return split_id_column(batch)

    def _after_read(self, rows: int, finished_split_ids: list[str], status: InputStatus) -> None:
        self.records_read += rows
        if finished_split_ids:
            self.protocol.splits_finished(finished_split_ids)
            self.watermarks.remove(finished_split_ids)
        self._nothing_to_read = not rows and status is not InputStatus.MORE_AVAILABLE
        if self.max_allowed_watermark is not None and rows:
            self._align()

    @property
    def nothing_to_read(self) -> bool:
        return self._nothing_to_read

    def maybe_request_split(self, now_ms: int) -> RequestSplit | None:
        return self.protocol.maybe_request_split(now_ms, self._nothing_to_read)

    def _align(self) -> None:
        change = self.watermarks.align(self.max_allowed_watermark, self._clock_ms())
        if change and self.reader is not None:
            self.reader.pause_or_resume_splits(change.to_pause, change.to_resume)
            if change.to_pause:
                log.info(
                    "paused %d splits past the allowed watermark %s",
                    len(change.to_pause),
                    event_time_text(self.max_allowed_watermark),
                )
            if change.to_resume:
                log.info("resumed %d splits", len(change.to_resume))

    def _notify_low_watermark(self, low_watermark: int | None) -> None:
        if low_watermark is not None and isinstance(self.reader, LowWatermarkListener):
            self.reader.notify_low_watermark(low_watermark)

    def _reject(self, letter: DeadLetter) -> None:
        self._dead_letters.append(letter)

    def take_dead_letters(self) -> list[DeadLetter]:
        """Bad input the connector reader skipped since the last call, for the dead-letter topic."""
        letters, self._dead_letters = self._dead_letters, []
        return letters

    def take_outbox(self) -> list[Body]:
        out, self._outbox = self._outbox, []
        return out

    def heartbeat(self) -> Heartbeat:
        """The reader's watermark; with no split at all, the announced low watermark, so that
        a reader with nothing to read never holds the source back (FLINK-4576); idle when
        every split is idle (split idleness, reader/watermark.py)."""
        if not self.owned:
            return Heartbeat(watermark=self.low_watermark, idle=True)
        now_ms = self._clock_ms()
        return Heartbeat(watermark=self.watermarks.current(now_ms), idle=self.watermarks.all_idle(now_ms))

    # -- checkpoints ------------------------------------------------------------

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
            or bool(self.protocol.releasing)
        )

    def prepare_checkpoint(self) -> CheckpointPlan:
        """Snapshot the connector reader. Nothing changes until ``checkpoint_committed``."""
        checkpoint_id = self.next_checkpoint_id
        splits = [self.codec.to_wire(s) for s in self._require_reader().snapshot_state(checkpoint_id)]
        return self.protocol.plan_checkpoint(splits, records_since_last=self.records_read - self.records_at_checkpoint)

    def checkpoint_committed(self, plan: CheckpointPlan) -> None:
        self.protocol.checkpoint_committed(plan)
        self.records_at_checkpoint += plan.records_since_last
        if plan.returned:
            self._stop_returned(plan)
        if self.reader is not None:
            self.reader.notify_checkpoint_complete(plan.checkpoint_id)

    def _stop_returned(self, plan: CheckpointPlan) -> None:
        """The committed checkpoint gave splits back: the connector reader stops reading
        them. Nothing was read after the checkpoint's snapshot, so the positions returned
        are where the reading stopped."""
        ids = plan.returned_split_ids
        self.watermarks.remove(ids)
        reader = self._require_reader()
        try:
            reader.remove_splits(ids)
        except NotImplementedError:
            self._rebuild_reader(plan.checkpoint)
        except Exception:  # a connector bug: the checkpoint is committed, so start afresh from it
            log.exception("the connector reader raised in remove_splits; building a new one")
            self._rebuild_reader(plan.checkpoint)
        log.info("gave %d splits back with checkpoint %d; owning %d", len(ids), plan.checkpoint_id, len(self.owned))

    def _rebuild_reader(self, checkpoint: ReaderCheckpoint) -> None:
        """A connector without ``remove_splits``: a new reader from the checkpoint just
        committed (the splits kept, at their positions), as after a fence but keeping the
        attempt; pause states are applied to it again."""
        assert self.attempt is not None
        old = self._require_reader()
        try:
            old.close()
        except Exception:
            log.exception("the connector reader raised on close")
        self._start_reader(self.attempt)
        kept = [dict(s) for s in checkpoint.splits]
        if kept:
            self._require_reader().add_splits([self.codec.from_wire(s) for s in kept])
        if self.no_more_splits:
            self._require_reader().notify_no_more_splits()
        paused = sorted(self.watermarks.paused)
        if paused:
            self._require_reader().pause_or_resume_splits(paused, [])

    def leaving_checkpoint(self) -> ReaderCheckpoint:
        return self.protocol.leaving_checkpoint()

    # -- outgoing ---------------------------------------------------------------

    def envelope(self, body: Body, now_ms: int) -> Envelope:
        return self.protocol.envelope(body, now_ms)

    def _require_reader(self) -> SourceReader[SplitT]:
        if self.reader is None:
            raise RuntimeError("no connector reader: the session is not registered")
        return self.reader
