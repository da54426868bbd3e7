"""The reader side of docs/protocol.md for one subtask: a pure state machine.

``ReaderProtocol`` knows nothing of connectors, Kafka or Spark. It owns what
every reader host must get right in the same way:

- registration: a new incarnation, the restored checkpoint reported in
  ``ReaderRegistration`` (FLIP-537), the attempt learnt from ``ReaderRegistered``;
- filtering: a record for another source or subtask, from a coordinator epoch
  lower than the highest seen, or addressed to another attempt is ignored;
- ``seq`` order: ``AddSplits``/``NoMoreSplits``/``ReleaseRequest`` whose ``seq`` is not
  above the applied one are skipped (applied before the restored checkpoint);
- fencing: ``SplitsReleased`` naming our attempt as failed, a ``ReaderRegistered``
  of another incarnation with a newer attempt, or the host's lost contact; and
  telling a fence by a duplicate (another live process registered for the
  subtask: ``Superseded``, the host stops for good) from one by silence (the
  host registers again), and a refused exclusive registration (``Refused``);
- ownership: each owned split with the ``seq`` of the ``AddSplits`` that gave it
  (0 for a restored split kept across registration);
- the alignment bound of the last ``WatermarkAnnouncement``;
- request pacing: at most one ``RequestSplit`` a second while there is nothing
  to read;
- checkpoint acceptance: durable positions in, ``SplitsFinished`` and
  ``CheckpointAck`` out (``CheckpointPlan``; after an attempt's first, an ack names only
  the splits that moved since its last, v7), state changed only once committed;
- cooperative rebalancing: splits a ``ReleaseRequest`` asks for go out in the
  ``returned`` of the next checkpoint that covers its ``seq``, with their positions
  as of that checkpoint, and leave ownership once it is committed.

``on_message`` returns a typed outcome the host acts on, so no host diffs the
protocol's state to learn what a record did. The standalone host drives a
connector ``SourceReader`` from the outcomes (``ReaderSession``); the Spark
driver plans offsets from them and creates no connector reader at all.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from sluicegate.api.split import WireSplit
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.messages import (
    AddSplits,
    Body,
    CheckpointAck,
    CoordinatorSourceEvent,
    Envelope,
    NoMoreSplits,
    ReaderRegistered,
    ReaderRegistration,
    RegistrationRefused,
    ReleaseReason,
    ReleaseRequest,
    RequestSplit,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
    envelope,
)
from sluicegate.protocol.pieces import Assembly, body_in_pieces, in_pieces
from sluicegate.reader.state import ReaderCheckpoint

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
    """What one incoming coordinator record did, in one word."""

    APPLIED = "applied"
    REGISTERED = "registered"
    FENCED = "fenced"
    SUPERSEDED = "superseded"
    REFUSED = "refused"
    IGNORED_SOURCE = "ignored-source"
    IGNORED_EPOCH = "ignored-epoch"
    IGNORED_ATTEMPT = "ignored-attempt"
    SKIPPED_SEQ = "skipped-seq"
    PIECE_HELD = "piece-held"
    """A piece of a record that arrives in pieces (v6); the record acts at its last piece."""


@dataclass(frozen=True, slots=True)
class AssignedSplit:
    """A split this attempt owns: as it was given (its position is the given one) and by which seq."""

    wire: WireSplit
    seq: int


# -- outcomes of on_message -----------------------------------------------------------


@dataclass(frozen=True)
class Ignored:
    disposition: Disposition


@dataclass(frozen=True)
class Registered:
    """Our registration was accepted: ``kept`` are the restored splits this attempt
    keeps reading (none for a source with reassignment on recovery)."""

    attempt: int
    kept: list[WireSplit]
    disposition: Disposition = Disposition.REGISTERED


@dataclass(frozen=True)
class SplitsAdded:
    """An ``AddSplits`` applied: the splits new to this attempt, given by ``seq``."""

    seq: int
    splits: list[WireSplit]
    disposition: Disposition = Disposition.APPLIED


@dataclass(frozen=True)
class NoMoreSplitsApplied:
    seq: int
    disposition: Disposition = Disposition.APPLIED


@dataclass(frozen=True)
class ReleaseRequested:
    """A ``ReleaseRequest`` applied: ``split_ids`` (those this attempt holds) go back with
    the next checkpoint; ``not_held`` are the ones it named that this attempt does not hold."""

    seq: int
    split_ids: list[str]
    not_held: list[str] = field(default_factory=list)
    disposition: Disposition = Disposition.APPLIED


@dataclass(frozen=True)
class Fenced:
    """This attempt is over: the host drops what it holds, restores the last durable
    checkpoint and registers again."""

    reason: str
    disposition: Disposition = Disposition.FENCED
    producer_fenced: bool = False
    """The coordinator fenced the subtask's transactional id before it failed the attempt
    (a session timeout): the host's transactional producer is dead and must be renewed."""


@dataclass(frozen=True)
class Superseded:
    """Another live process registered for this subtask and fenced this attempt: two readers
    run for one subtask. This one stops for good (it does not register again, which would
    fence the other, and so on for ever)."""

    successor_incarnation: str
    successor_location: str | None
    disposition: Disposition = Disposition.SUPERSEDED

    def describe(self, source: str, subtask: int) -> str:
        return (
            f"subtask {subtask} of {source} was taken by another reader "
            f"(incarnation {self.successor_incarnation} at {self.successor_location or '?'}): "
            "two readers were started for the same subtask; this one stops"
        )


@dataclass(frozen=True)
class Refused:
    """Our registration was refused. Cause ``held`` (an exclusive registration; a live attempt
    of another incarnation holds the subtask): the host may retry, that attempt may be a dead
    process not yet timed out. Cause ``definition``: this reader brings another definition of
    the source than the committed one; final (``final``)."""

    reason: str
    holder_incarnation: str | None
    holder_location: str | None
    disposition: Disposition = Disposition.REFUSED
    cause: str | None = None

    @property
    def final(self) -> bool:
        return self.cause == "definition"


@dataclass(frozen=True)
class AlignmentBound:
    low_watermark: int | None
    max_allowed_watermark: int | None
    disposition: Disposition = Disposition.APPLIED


@dataclass(frozen=True)
class SourceEventReceived:
    payload: object
    disposition: Disposition = Disposition.APPLIED


@dataclass(frozen=True)
class Released:
    """Splits the coordinator released (not ours to stop: it never releases splits a
    live attempt holds; ``held`` counts those it named anyway)."""

    split_ids: list[str]
    reason: str
    held: list[str] = field(default_factory=list)
    disposition: Disposition = Disposition.APPLIED


Outcome = (
    Ignored
    | Registered
    | SplitsAdded
    | NoMoreSplitsApplied
    | ReleaseRequested
    | Fenced
    | Superseded
    | Refused
    | AlignmentBound
    | SourceEventReceived
    | Released
)


@dataclass(frozen=True)
class CheckpointPlan:
    """A checkpoint to commit: the state record, its ack, the splits finished since the last."""

    checkpoint: ReaderCheckpoint
    finished_split_ids: list[str]
    records_since_last: int = 0
    returned: list[WireSplit] = field(default_factory=list)
    """Splits given back (a ReleaseRequest), at this checkpoint's positions; not in the state record."""
    base: ReaderCheckpoint | None = None
    """The last checkpoint of this attempt the coordinator was told of: the ack names only
    what changed since (v7). None: the first of the attempt, which names every split."""

    @property
    def returned_split_ids(self) -> list[str]:
        return [s["split_id"] for s in self.returned]

    @property
    def checkpoint_id(self) -> int:
        return self.checkpoint.checkpoint_id

    def ack(self) -> CheckpointAck:
        """Every split of the checkpoint, or (with a base) those whose state moved since it:
        at a million splits the coordinator reads the splits being read, not all it gave."""
        splits = self.checkpoint.splits
        if self.base is not None:
            splits = splits_changed(self.base.splits, splits)
        return CheckpointAck(
            checkpoint_id=self.checkpoint.checkpoint_id,
            applied_seq=self.checkpoint.applied_seq,
            splits=splits,
            returned=list(self.returned),
            base_checkpoint_id=None if self.base is None else self.base.checkpoint_id,
        )

    def acks(self) -> list[CheckpointAck]:
        """The ack in the records that carry it: one, or its pieces (v6) when it names more
        splits than one record holds. They go out together, in order."""
        return body_in_pieces(self.ack())

    def splits_finished(self) -> list[SplitsFinished]:
        """The splits finished since the last checkpoint, in records that each fit (none:
        no split finished). Each record stands on its own: a split is finished once."""
        if not self.finished_split_ids:
            return []
        return [SplitsFinished(split_ids=piece) for piece in in_pieces(list(self.finished_split_ids))]

    def messages(self) -> list[Body]:
        """What goes to the coordinator, in order: the SplitsFinished (if any), then the ack."""
        return [*self.splits_finished(), *self.acks()]


def splits_changed(before: list[WireSplit], now: list[WireSplit]) -> list[WireSplit]:
    """The splits of ``now`` that ``before`` does not hold as they are (moved, or new)."""
    known = {split["split_id"]: split for split in before}
    return [split for split in now if known.get(split["split_id"]) != split]


class ReaderProtocol:
    def __init__(
        self,
        source_name: str,
        subtask: int,
        *,
        location: str,
        reassign_on_recovery: bool,
        restored: ReaderCheckpoint | None = None,
        definition: SourceDefinition | None = None,
    ) -> None:
        self.source_name = source_name
        self.definition = definition
        """What this reader says the source is; sent with every registration (v5)."""
        self.subtask = subtask
        self.location = location
        self.reassign_on_recovery = reassign_on_recovery
        self.counters: Counter[str] = Counter()
        self.last_checkpoint: ReaderCheckpoint | None = restored
        """The last durable checkpoint: restored at start, then each committed one."""
        self.acknowledged: ReaderCheckpoint | None = None
        """The last checkpoint this attempt committed with its ack: what the next ack names
        changes against (v7)."""
        self.highest_epoch = restored.epoch if restored else 0
        self.phase = Phase.UNREGISTERED
        self.incarnation = ""
        self.attempt: int | None = None
        self.applied_seq = 0
        self.no_more_splits = False
        self.owned: dict[str, AssignedSplit] = {}
        """Splits this attempt holds and has not finished (insertion-ordered)."""
        self.releasing: dict[str, int] = {}
        """Owned splits a ReleaseRequest asked back -> its seq (until a committed checkpoint returns them)."""
        self.finished_pending: list[str] = []
        """Finished since the last committed checkpoint (go out with the next one)."""
        self.low_watermark: int | None = None
        self.max_allowed_watermark: int | None = None
        self.splits_finished_total = 0
        self.checkpoints_committed = 0
        self.fenced_reason: str | None = None
        self._last_request_ms: int | None = None
        self._pieces = Assembly()
        """Coordinator records arriving in pieces (a ReaderRegistered dropping many splits)."""

    @property
    def active(self) -> bool:
        return self.phase is Phase.ACTIVE

    @property
    def restored_splits(self) -> list[WireSplit]:
        return list(self.last_checkpoint.splits) if self.last_checkpoint else []

    # -- registration ---------------------------------------------------------

    def begin_registration(self, exclusive: bool = False) -> ReaderRegistration:
        """A new incarnation; the host sends the returned registration (attempt null).
        ``exclusive``: refused, not fencing, if another incarnation's attempt is live."""
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
            restored_attempt=cp.attempt if cp and exclusive else None,
            exclusive=exclusive,
            definition=self.definition.to_json() if self.definition is not None else None,
        )

    # -- incoming ---------------------------------------------------------------

    def on_message(self, env: Envelope) -> Outcome:
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
            return Ignored(Disposition.IGNORED_SOURCE)
        if env.epoch < self.highest_epoch:
            self.counters["ignored_old_epoch"] += 1
            log.debug("ignored %s from coordinator epoch %d (seen %d)", env.type, env.epoch, self.highest_epoch)
            return Ignored(Disposition.IGNORED_EPOCH)
        self.highest_epoch = env.epoch
        whole = self._pieces.take(env, on_dropped=lambda _: self.counters.update(["incomplete_records_dropped"]))
        if whole is None:
            return Ignored(Disposition.PIECE_HELD)
        body = whole.body
        if isinstance(body, ReaderRegistered):
            return self._on_registered(body)
        if isinstance(body, RegistrationRefused):
            return self._on_refused(body)
        if self.phase is not Phase.ACTIVE or env.attempt != self.attempt:
            self.counters["ignored_other_attempt"] += 1
            log.debug("ignored %s for attempt %s (ours: %s)", env.type, env.attempt, self.attempt)
            return Ignored(Disposition.IGNORED_ATTEMPT)
        if isinstance(body, AddSplits):
            return self._on_add_splits(body)
        if isinstance(body, NoMoreSplits):
            return self._on_no_more_splits(body)
        if isinstance(body, ReleaseRequest):
            return self._on_release_request(body)
        if isinstance(body, SplitsReleased):
            return self._on_released(body)
        if isinstance(body, WatermarkAnnouncement):
            self.low_watermark = body.low_watermark
            self.max_allowed_watermark = body.max_allowed_watermark
            return AlignmentBound(body.low_watermark, body.max_allowed_watermark)
        if isinstance(body, CoordinatorSourceEvent):
            return SourceEventReceived(body.payload)
        self.counters["ignored_unexpected"] += 1
        log.warning("ignored unexpected %s from the coordinator", env.type)
        return Ignored(Disposition.IGNORED_ATTEMPT)

    def _on_registered(self, body: ReaderRegistered) -> Outcome:
        if self.phase is Phase.REGISTERING and body.incarnation == self.incarnation:
            return self._activate(body.attempt, body.dropped_split_ids)
        if (
            self.phase is Phase.ACTIVE
            and body.incarnation != self.incarnation
            and self.attempt is not None
            and body.attempt > self.attempt
        ):
            return self._fence(f"incarnation {body.incarnation} registered as attempt {body.attempt}")
        self.counters["ignored_other_attempt"] += 1
        return Ignored(Disposition.IGNORED_ATTEMPT)

    def _on_refused(self, body: RegistrationRefused) -> Outcome:
        if self.phase is not Phase.REGISTERING or body.incarnation != self.incarnation:
            self.counters["ignored_other_attempt"] += 1
            return Ignored(Disposition.IGNORED_ATTEMPT)
        self.counters["refused"] += 1
        self.phase = Phase.UNREGISTERED
        if body.cause == "definition":
            return Refused(body.reason, None, None, cause=body.cause)
        log.warning(
            "registration refused: %s (held by %s at %s)",
            body.reason,
            body.holder_incarnation,
            body.holder_location or "?",
        )
        return Refused(body.reason, body.holder_incarnation, body.holder_location, cause=body.cause)

    def _activate(self, attempt: int, dropped_split_ids: list[str]) -> Registered:
        """Registered: keep the restored splits minus the dropped ones (none at all for a
        source with reassignment on recovery)."""
        self.attempt = attempt
        self.phase = Phase.ACTIVE
        self.fenced_reason = None
        self.acknowledged = None
        cp = self.last_checkpoint
        self.applied_seq = cp.applied_seq if cp else 0
        self.no_more_splits = False
        restored = self.restored_splits
        checkpoint_id = cp.checkpoint_id if cp else None
        if not restored:
            log.info("registered as attempt %d (applied seq %d)", attempt, self.applied_seq)
            return Registered(attempt, [])
        if self.reassign_on_recovery:
            log.info(
                "registered as attempt %d; reported %d restored splits to the coordinator "
                "for reassignment (checkpoint %s, applied seq %d)",
                attempt,
                len(restored),
                checkpoint_id,
                self.applied_seq,
            )
            return Registered(attempt, [])
        dropped = set(dropped_split_ids)
        kept = [split for split in restored if split["split_id"] not in dropped]
        self._own(kept, 0)
        log.info(
            "registered as attempt %d; kept %d of %d restored splits (checkpoint %s, applied seq %d)%s",
            attempt,
            len(kept),
            len(restored),
            checkpoint_id,
            self.applied_seq,
            f"; the coordinator dropped {len(restored) - len(kept)}" if len(kept) < len(restored) else "",
        )
        return Registered(attempt, kept)

    def _on_add_splits(self, body: AddSplits) -> Outcome:
        if body.seq <= self.applied_seq:
            self.counters["skipped_seq"] += 1
            log.info("skipped AddSplits seq %d: already applied (applied seq %d)", body.seq, self.applied_seq)
            return Ignored(Disposition.SKIPPED_SEQ)
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
        self._own(fresh, body.seq)
        self.applied_seq = body.seq
        log.info("got %d splits (seq %d); owning %d", len(fresh), body.seq, len(self.owned))
        return SplitsAdded(body.seq, fresh)

    def _on_no_more_splits(self, body: NoMoreSplits) -> Outcome:
        if body.seq <= self.applied_seq:
            self.counters["skipped_seq"] += 1
            log.info("skipped NoMoreSplits seq %d: already applied (applied seq %d)", body.seq, self.applied_seq)
            return Ignored(Disposition.SKIPPED_SEQ)
        self.applied_seq = body.seq
        self.no_more_splits = True
        log.info("no more splits will come (seq %d); %d left to finish", body.seq, len(self.owned))
        return NoMoreSplitsApplied(body.seq)

    def _on_release_request(self, body: ReleaseRequest) -> Outcome:
        if body.seq <= self.applied_seq:
            self.counters["skipped_seq"] += 1
            log.info("skipped ReleaseRequest seq %d: already applied (applied seq %d)", body.seq, self.applied_seq)
            return Ignored(Disposition.SKIPPED_SEQ)
        self.applied_seq = body.seq
        held = [sid for sid in body.split_ids if sid in self.owned]
        not_held = [sid for sid in body.split_ids if sid not in self.owned]
        if not_held:
            # e.g. finished since: the SplitsFinished on its way tells the coordinator
            self.counters["release_not_held"] += len(not_held)
            log.info("ReleaseRequest seq %d names %d splits this reader does not hold", body.seq, len(not_held))
        for split_id in held:
            self.releasing.setdefault(split_id, body.seq)
        log.info("asked to give %d splits back (seq %d); they go with the next checkpoint", len(held), body.seq)
        return ReleaseRequested(body.seq, held, not_held)

    def _on_released(self, body: SplitsReleased) -> Outcome:
        if body.failed_attempt is not None and body.failed_attempt == self.attempt:
            successor = body.successor_incarnation
            if body.reason == ReleaseReason.FENCED and successor is not None and successor != self.incarnation:
                return self._superseded(successor, body.successor_location)
            return self._fence(
                f"the coordinator failed attempt {body.failed_attempt} ({body.reason})",
                producer_fenced=body.reason == ReleaseReason.SESSION_TIMEOUT,
            )
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
        return Released(list(body.split_ids), body.reason, held)

    def _own(self, wire: Iterable[WireSplit], seq: int) -> None:
        for split in wire:
            self.owned[split["split_id"]] = AssignedSplit(dict(split), seq)

    # -- fencing ---------------------------------------------------------------

    def _fence(self, reason: str, producer_fenced: bool = False) -> Fenced:
        self.counters["fenced"] += 1
        log.warning("fenced as attempt %s: %s; dropping in-memory state", self.attempt, reason)
        self.fenced_reason = reason
        self._drop()
        self.phase = Phase.UNREGISTERED
        return Fenced(reason, producer_fenced=producer_fenced)

    def _superseded(self, successor: str, location: str | None) -> Superseded:
        self.counters["superseded"] += 1
        outcome = Superseded(successor, location)  # the host says why it stops
        self.fenced_reason = f"superseded by incarnation {successor}"
        self._drop()
        self.phase = Phase.CLOSED
        return outcome

    def self_fence(self, reason: str) -> Fenced | None:
        """The host lost contact (e.g. nothing could be sent within the session timeout)."""
        if self.phase is Phase.ACTIVE or self.phase is Phase.REGISTERING:
            return self._fence(reason)
        return None

    def _drop(self) -> None:
        self.attempt = None
        self.owned.clear()
        self.releasing.clear()
        self.finished_pending.clear()
        self.no_more_splits = False
        self.applied_seq = 0
        self.low_watermark = None
        self.max_allowed_watermark = None
        self._last_request_ms = None

    def close(self) -> None:
        self._drop()
        self.phase = Phase.CLOSED

    # -- while reading -------------------------------------------------------------

    def splits_finished(self, split_ids: Iterable[str]) -> list[str]:
        """The host read these to their end; they leave ownership now and go out with
        the next checkpoint. Returns those this attempt owned."""
        done = []
        for split_id in split_ids:
            self.releasing.pop(split_id, None)
            if self.owned.pop(split_id, None) is not None:
                self.finished_pending.append(split_id)
                self.splits_finished_total += 1
                done.append(split_id)
            else:
                self.counters["finished_not_owned"] += 1
        return done

    def maybe_request_split(self, now_ms: int, nothing_to_read: bool) -> RequestSplit | None:
        """A RequestSplit when there is nothing to read and more may come, at most once a second."""
        if not self.active or self.no_more_splits or not nothing_to_read:
            return None
        if self._last_request_ms is not None and now_ms - self._last_request_ms < REQUEST_SPLIT_INTERVAL_MS:
            return None
        self._last_request_ms = now_ms
        return RequestSplit(hostname=self.location.rsplit(":", 1)[0] or None)

    @property
    def is_finished(self) -> bool:
        """Bounded end: NoMoreSplits applied and every split finished."""
        return self.active and self.no_more_splits and not self.owned

    # -- checkpoints ------------------------------------------------------------

    @property
    def next_checkpoint_id(self) -> int:
        return (self.last_checkpoint.checkpoint_id if self.last_checkpoint else 0) + 1

    def plan_checkpoint(
        self,
        splits: list[WireSplit],
        checkpoint_id: int | None = None,
        applied_seq: int | None = None,
        no_more_splits: bool | None = None,
        records_since_last: int = 0,
        finished: list[str] | None = None,
    ) -> CheckpointPlan:
        """A checkpoint of durable positions (``splits``: the unfinished splits at their
        positions) for this attempt, with the splits finished since the last one. By
        default the next id, the applied seq and NoMoreSplits as the protocol has them;
        a host whose checkpoints are planned elsewhere (Spark's offsets) passes its own,
        and the splits its checkpoint finished (``finished``; by default those
        reported through ``splits_finished``). Requested splits whose ReleaseRequest the
        checkpoint covers (its applied seq) go to ``returned`` and out of the state
        record. Nothing changes until ``checkpoint_committed``."""
        applied = self.applied_seq if applied_seq is None else applied_seq
        returned = [s for s in splits if self.releasing.get(s["split_id"], applied + 1) <= applied]
        if returned:
            gone = {s["split_id"] for s in returned}
            splits = [s for s in splits if s["split_id"] not in gone]
        checkpoint = ReaderCheckpoint(
            source=self.source_name,
            subtask=self.subtask,
            checkpoint_id=self.next_checkpoint_id if checkpoint_id is None else checkpoint_id,
            applied_seq=applied,
            splits=splits,
            epoch=self.highest_epoch,
            attempt=self.attempt,
            no_more_splits=self.no_more_splits if no_more_splits is None else no_more_splits,
        )
        done = list(self.finished_pending) if finished is None else list(finished)
        return CheckpointPlan(checkpoint, done, records_since_last, returned, base=self._ack_base())

    def _ack_base(self) -> ReaderCheckpoint | None:
        """The checkpoint the next ack may name changes against: the last one this attempt
        committed. A new attempt's first ack names every split: the coordinator may hold
        other positions for them than a restored checkpoint (one of a source defined anew)."""
        return self.acknowledged if self.phase is Phase.ACTIVE else None

    def checkpoint_committed(self, plan: CheckpointPlan) -> None:
        """The plan is durable and its messages were delivered: its finished splits
        leave ownership (if they had not yet)."""
        self.last_checkpoint = plan.checkpoint
        if plan.checkpoint.attempt == self.attempt:  # (not an ack of an attempt fenced meanwhile)
            self.acknowledged = plan.checkpoint
        for split_id in plan.returned_split_ids:
            self.owned.pop(split_id, None)
            self.releasing.pop(split_id, None)
        done = set(plan.finished_split_ids)
        for split_id in plan.finished_split_ids:
            self.releasing.pop(split_id, None)
            if self.owned.pop(split_id, None) is not None:
                self.splits_finished_total += 1
        self.finished_pending = [s for s in self.finished_pending if s not in done]
        self.checkpoints_committed += 1

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
            incarnation=self.incarnation or None,
        )
