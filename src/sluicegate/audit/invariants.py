"""Rebuild split ownership from the replayed topics and check the protocol's invariants.

``OwnershipModel`` replays the merged stream (replay.py) with the coordinator's
own acceptance rules (coordinator/core.py):

- the current attempt of a subtask is the one in its last ``ReaderRegistered``;
  it stops being live at ``SplitsReleased`` with ``failed_attempt`` (fenced,
  session-timeout) and at an accepted ``ReaderLeaving``;
- an inbox record from an attempt that is not the subtask's live current one is
  fenced: counted, and it changes nothing; so is one (v4) that names the live attempt
  but comes from another incarnation than the one registered as it;
- an incarnation becomes a subtask's only by its own registration: a
  ``ReaderRegistered`` naming an incarnation that never sent a ``ReaderRegistration``
  for that subtask is a violation;
- ``CheckpointAck`` records ``applied_seq`` (ignored, as by the coordinator, if
  it acknowledges a seq never sent); ``SplitsFinished`` ends ownership of the
  listed splits the subtask owns, for good;
- ``SplitsReleased`` frees the listed splits, ``AddSplits`` gives splits;
- cooperative rebalancing (v3): ``ReleaseRequest`` (in the ``seq`` order) asks the
  live attempt for splits it owns; an accepted ``CheckpointAck`` gives them back in
  ``returned``; ownership leaves only at the ``SplitsReleased`` (``returned``) that
  follows, which names only splits returned so. Until then a requested split is
  still owned, so giving it to anyone else shows as a split owned twice (read twice).

Every break is a ``Violation`` at the record where it shows, with one plain
sentence. ``audit_records`` is the whole audit of two lists of raw records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sluicegate.audit.cut import Cut
from sluicegate.audit.replay import (
    InboxRecord,
    Location,
    Ordering,
    ReadersRecord,
    ReplayRecord,
    SkippedRecord,
    Violation,
    ViolationKind,
    replay,
    topic_names,
)
from sluicegate.protocol import (
    SOURCE_WIDE,
    AddSplits,
    CheckpointAck,
    CoordinatorSourceEvent,
    Direction,
    MaxParallelismRaised,
    NoMoreSplits,
    ReaderLeaving,
    ReaderRegistered,
    ReaderRegistration,
    ReleaseReason,
    ReleaseRequest,
    SlotRequest,
    SourceRedefined,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
    decode,
)
from sluicegate.protocol.codec import DecodeError
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.pieces import Assembly

_FAILURE_REASONS = frozenset({ReleaseReason.FENCED.value, ReleaseReason.SESSION_TIMEOUT.value})
_SHOWN = 5
"""How many split ids one violation sentence names."""


def _ids(ids: Iterable[str]) -> str:
    items = sorted(ids)
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


@dataclass
class ReleaseInParts:
    """What the first record of a release in several records decided the whole release
    must name, and what its records named so far."""

    expected: set[str] | None
    rule: str
    named: set[str] = field(default_factory=set)


@dataclass
class SubtaskState:
    subtask: int
    attempts: int = 0
    """ReaderRegistered records seen."""
    attempt: int | None = None
    """The last registered attempt (live or not)."""
    incarnation: str | None = None
    """The incarnation registered as ``attempt``."""
    registering: set[str] = field(default_factory=set)
    """Incarnations that sent a ReaderRegistration for this subtask."""
    live: bool = False
    last_seq: int = 0
    applied_seq: int = 0
    owned: dict[str, int] = field(default_factory=dict)
    """split_id -> the AddSplits seq that gave it."""
    finished: int = 0
    no_more_splits: bool = False
    """NoMoreSplits was sent to the current attempt."""
    fenced: int = 0
    other_incarnation: int = 0
    """Messages naming the live attempt from another incarnation (dropped, as by the coordinator)."""
    releasing: dict[str, int] = field(default_factory=dict)
    """split_id -> the ReleaseRequest seq that asked the current attempt for it."""
    ended_by: str | None = None
    """Why the last attempt ended: a ``ReleaseReason`` of the release that ended it, or
    ``left`` (ReaderLeaving); None while it is live."""
    returned: set[str] = field(default_factory=set)
    """Given back by accepted CheckpointAcks and not yet released (SplitsReleased returned)."""
    release_in_parts: ReleaseInParts | None = None
    """A release sent in several records (``more``) whose last record is still to come."""
    pieces: Assembly = field(default_factory=Assembly)
    """Records of this subtask arriving in pieces (v6), both ways: each is checked whole at
    its last piece, when the coordinator (or the reader) acts on it."""

    def describe_attempt(self) -> str:
        if self.attempt is None:
            return f"subtask {self.subtask} has never registered"
        state = "live" if self.live else "no longer live"
        return f"subtask {self.subtask}'s last attempt {self.attempt} is {state}"


@dataclass(frozen=True)
class SubtaskSummary:
    subtask: int
    attempts: int
    current_attempt: int | None
    live: bool
    last_seq: int
    owned: int
    finished: int
    acked_seq: int
    fenced_messages: int
    other_incarnation_messages: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "subtask": self.subtask,
            "attempts": self.attempts,
            "current_attempt": self.current_attempt,
            "live": self.live,
            "last_seq": self.last_seq,
            "owned": self.owned,
            "finished": self.finished,
            "acked_seq": self.acked_seq,
            "fenced_messages": self.fenced_messages,
            "other_incarnation_messages": self.other_incarnation_messages,
        }


@dataclass(frozen=True)
class AuditSummary:
    ordering: Ordering
    inbox_records: int
    readers_records: int
    subtasks: list[SubtaskSummary]
    splits_assigned: int
    """Distinct splits ever given by AddSplits."""
    assignments: int
    """Split assignments (a split given, released and given again counts twice)."""
    splits_finished: int
    splits_owned: int
    released_by_reason: dict[str, int]
    fenced_messages: int
    rejected_messages: int
    """Inbox records the coordinator rejects (other source, subtask out of range)."""
    ignored_acks: int
    """CheckpointAcks of a seq never sent (the coordinator ignores them)."""
    finished_not_owned: int
    """Split ids in accepted SplitsFinished that the subtask did not own (ignored)."""
    undecodable: dict[str, int]
    """Per topic: records that do not decode (dead-letter material)."""
    messages_by_type: dict[str, int]
    """``topic-kind:Type`` -> count, for decoded records."""
    epochs: list[int]
    low_watermark: int | None
    last_cseq: int | None
    notes: list[str]
    redefinitions: list[str] = field(default_factory=list)
    """Each ``sluicegate source redefine`` in the control log: where, when and what changed."""
    other_incarnation_messages: int = 0
    """Inbox records naming a subtask's live attempt from another incarnation: a reader
    that sends for a subtask it does not hold (dropped; the coordinator logs them too)."""
    incomplete_records: dict[str, int] = field(default_factory=dict)
    """Per type: records sent in pieces (v6) that never became whole (dropped, as by their
    receiver: a sender that gave a record up and sent it again counts here once)."""
    cut: Cut | None = None
    """Where a read of live topics was judged (cut.py); None for records given as they are."""

    @property
    def undecodable_total(self) -> int:
        return sum(self.undecodable.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "ordering": self.ordering.value,
            "inbox_records": self.inbox_records,
            "readers_records": self.readers_records,
            "subtasks": [s.to_json() for s in self.subtasks],
            "splits_assigned": self.splits_assigned,
            "assignments": self.assignments,
            "splits_finished": self.splits_finished,
            "splits_owned": self.splits_owned,
            "released_by_reason": dict(self.released_by_reason),
            "fenced_messages": self.fenced_messages,
            "rejected_messages": self.rejected_messages,
            "ignored_acks": self.ignored_acks,
            "finished_not_owned": self.finished_not_owned,
            "undecodable": dict(self.undecodable),
            "undecodable_total": self.undecodable_total,
            "messages_by_type": dict(self.messages_by_type),
            "epochs": list(self.epochs),
            "low_watermark": self.low_watermark,
            "last_cseq": self.last_cseq,
            "notes": list(self.notes),
            "redefinitions": list(self.redefinitions),
            "other_incarnation_messages": self.other_incarnation_messages,
            "incomplete_records": dict(self.incomplete_records),
            "cut": None if self.cut is None else self.cut.to_json(),
        }


@dataclass(frozen=True)
class AuditResult:
    violations: list[Violation]
    """In replay order; the first one is where the history first breaks."""
    summary: AuditSummary
    skipped: list[SkippedRecord] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def first_violation(self) -> Violation | None:
        return self.violations[0] if self.violations else None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "violations": [v.to_json() for v in self.violations],
            "summary": self.summary.to_json(),
            "skipped": [s.to_json() for s in self.skipped],
        }


class OwnershipModel:
    """Who owns which split, rebuilt record by record in the coordinator's order."""

    def __init__(self, source: str | None = None, max_parallelism: int | None = None) -> None:
        self.source = source
        self.max_parallelism = max_parallelism
        self.subtasks: dict[int, SubtaskState] = {}
        self.owner: dict[str, int] = {}
        self.finished: set[str] = set()
        self.ever_assigned: set[str] = set()
        self.unowned_since: dict[str, int] = {}
        """Splits taken from a subtask (SplitsReleased) and not assigned again: the ``ts`` of
        the record that released each (ms). In release order, so the first is the oldest:
        a split that stays here past the assignment grace waits for a reader that never comes."""
        self.assignments = 0
        self.released_by_reason: Counter[str] = Counter()
        self.fenced_messages = 0
        self.other_incarnation_messages = 0
        self.rejected_messages = 0
        self.redefinitions: list[str] = []
        self.ignored_acks = 0
        self.incomplete_records: Counter[str] = Counter()
        self.finished_not_owned = 0
        self.messages_by_type: Counter[str] = Counter()
        self.epochs: set[int] = set()
        self.max_epoch: int | None = None
        self.low_watermark: int | None = None
        self.last_cseq: int | None = None
        self.inbox_records = 0
        self.readers_records = 0
        self.violations: list[Violation] = []
        self._position = -1
        self._location = Location("", 0, 0)
        self._ts = 0

    # -- driving ------------------------------------------------------------

    def apply_all(self, records: Iterable[ReplayRecord]) -> None:
        for position, record in enumerate(records):
            self.apply(record, position)

    def apply(self, record: ReplayRecord, position: int) -> None:
        self._position = position
        self._location = record.location
        env = record.env
        self._ts = env.ts
        if record.from_reader:
            self.inbox_records += 1
            self.messages_by_type[f"inbox:{env.type}"] += 1
            self._apply_inbox(record)
        else:
            self.readers_records += 1
            self.messages_by_type[f"readers:{env.type}"] += 1
            self._apply_readers(record)

    def _violation(self, kind: ViolationKind, message: str) -> None:
        self.violations.append(Violation(kind, self._location, message, self._position))

    def _incomplete(self, type_: str) -> None:
        self.incomplete_records[type_] += 1

    def _slot(self, subtask: int) -> SubtaskState:
        slot = self.subtasks.get(subtask)
        if slot is None:
            slot = self.subtasks[subtask] = SubtaskState(subtask)
        return slot

    # -- reader -> coordinator ----------------------------------------------

    def _apply_inbox(self, record: ReplayRecord) -> None:
        env = record.env
        if env.subtask == SOURCE_WIDE:
            self._apply_source_wide(record)
            return
        if (self.source is not None and env.source != self.source) or (
            self.max_parallelism is not None and not 0 <= env.subtask < self.max_parallelism
        ):
            self.rejected_messages += 1
            return
        slot = self._slot(env.subtask)
        whole = slot.pieces.take(env, on_dropped=self._incomplete)
        if whole is None:
            return
        env, body = whole, whole.body
        if isinstance(body, ReaderRegistration):
            # accepted always; its ReaderRegistered makes the new attempt current
            slot.registering.add(body.incarnation)
            return
        if not slot.live or env.attempt != slot.attempt:
            self.fenced_messages += 1
            slot.fenced += 1
            return
        if env.incarnation is not None and slot.incarnation and env.incarnation != slot.incarnation:
            self.other_incarnation_messages += 1
            slot.other_incarnation += 1
            return
        if isinstance(body, CheckpointAck):
            if body.applied_seq > slot.last_seq:
                self.ignored_acks += 1
            else:
                slot.applied_seq = max(slot.applied_seq, body.applied_seq)
                slot.returned.update(split["split_id"] for split in body.returned)
        elif isinstance(body, SplitsFinished):
            for split_id in body.split_ids:
                if slot.owned.pop(split_id, None) is None:
                    self.finished_not_owned += 1
                    continue
                del self.owner[split_id]
                self.finished.add(split_id)
                slot.finished += 1
        elif isinstance(body, ReaderLeaving):
            slot.live = False
            slot.ended_by = ReleaseReason.LEFT.value

    def _apply_source_wide(self, record: ReplayRecord) -> None:
        """A slot request changes no ownership (its SlotGranted neither: the registration
        that follows does); a raised max_parallelism admits the new subtasks from here on;
        a redefinition is listed for people (what the source reads changed there)."""
        body = record.env.body
        if isinstance(body, MaxParallelismRaised) and self.max_parallelism is not None:
            self.max_parallelism = max(self.max_parallelism, body.max_parallelism)
        elif isinstance(body, SourceRedefined):
            self.redefinitions.append(_describe_redefinition(record, body))
        elif not isinstance(body, SlotRequest | MaxParallelismRaised):
            self.rejected_messages += 1

    # -- coordinator -> reader ----------------------------------------------

    def _apply_readers(self, record: ReplayRecord) -> None:
        env = record.env
        s = env.subtask
        if record.location.partition != s:
            self._violation(
                ViolationKind.WRONG_PARTITION,
                f"{env.type} for subtask {s} is on partition {record.location.partition}; "
                f"every record for subtask {s} belongs on partition {s}",
            )
        if self.source is not None and env.source != self.source:
            self._violation(
                ViolationKind.WRONG_SOURCE,
                f"{env.type} names source {env.source!r} on the topic of source {self.source!r}",
            )
        if self.max_epoch is not None and env.epoch < self.max_epoch:
            self._violation(
                ViolationKind.EPOCH_BACKWARDS,
                f"{env.type} has epoch {env.epoch} after epoch {self.max_epoch} was seen: "
                "the coordinator's epoch went backwards",
            )
        self.max_epoch = env.epoch if self.max_epoch is None else max(self.max_epoch, env.epoch)
        self.epochs.add(env.epoch)
        if env.cseq is not None:
            self.last_cseq = env.cseq if self.last_cseq is None else max(self.last_cseq, env.cseq)
        slot = self._slot(s)
        whole = slot.pieces.take(env, on_dropped=self._incomplete)
        if whole is None:
            return
        env, body = whole, whole.body
        if isinstance(body, ReaderRegistered):
            self._registered(slot, body, env.attempt, env.v)
        elif isinstance(body, AddSplits):
            self._addressed_to_live(slot, env.attempt, f"AddSplits seq {body.seq}")
            self._check_seq(slot, body.seq, "AddSplits")
            self._add_splits(slot, body)
        elif isinstance(body, NoMoreSplits):
            self._addressed_to_live(slot, env.attempt, f"NoMoreSplits seq {body.seq}")
            self._check_seq(slot, body.seq, "NoMoreSplits")
            slot.no_more_splits = True
        elif isinstance(body, ReleaseRequest):
            self._addressed_to_live(slot, env.attempt, f"ReleaseRequest seq {body.seq}")
            self._check_seq(slot, body.seq, "ReleaseRequest")
            self._release_requested(slot, body)
        elif isinstance(body, SplitsReleased):
            self._released(slot, body, env.attempt)
        elif isinstance(body, WatermarkAnnouncement):
            self._addressed_to_live(slot, env.attempt, "WatermarkAnnouncement")
            low = body.low_watermark
            if low is not None:
                if self.low_watermark is not None and low < self.low_watermark:
                    self._violation(
                        ViolationKind.WATERMARK_DECREASED,
                        f"low watermark {low} is below the {self.low_watermark} announced before: "
                        "the low watermark must never decrease",
                    )
                self.low_watermark = low if self.low_watermark is None else max(self.low_watermark, low)
        elif isinstance(body, CoordinatorSourceEvent):
            self._addressed_to_live(slot, env.attempt, "SourceEvent")

    def _registered(self, slot: SubtaskState, body: ReaderRegistered, attempt: int | None, v: int) -> None:
        s = slot.subtask
        if attempt != body.attempt:
            self._violation(
                ViolationKind.MISADDRESSED,
                f"ReaderRegistered for attempt {body.attempt} of subtask {s} is addressed to attempt {attempt}",
            )
        if v >= 2 and body.incarnation not in slot.registering:  # v1: ts order, approximate
            self._violation(
                ViolationKind.INCARNATION_WITHOUT_REGISTRATION,
                f"attempt {body.attempt} of subtask {s} is given to incarnation {body.incarnation}, "
                f"which never asked to register for subtask {s}: an incarnation takes a subtask "
                "only by its own registration",
            )
        if slot.attempt is not None and body.attempt <= slot.attempt:
            self._violation(
                ViolationKind.ATTEMPT_NOT_INCREASING,
                f"subtask {s} registered as attempt {body.attempt} after attempt {slot.attempt}: "
                "attempts must strictly increase",
            )
        if slot.live:
            if v >= 2:
                self._violation(
                    ViolationKind.UNANNOUNCED_FENCE,
                    f"attempt {body.attempt} of subtask {s} registered while attempt "
                    f"{slot.attempt} was live, and no SplitsReleased failing attempt "
                    f"{slot.attempt} was sent first",
                )
            else:  # a v1 coordinator announced no releases: apply the one it made
                released = [sid for sid, seq in slot.owned.items() if seq > slot.applied_seq]
                self._release(slot, released, "fenced (implicit, v1)")
        slot.attempt = body.attempt
        slot.incarnation = body.incarnation
        slot.live = True
        slot.ended_by = None
        slot.no_more_splits = False
        slot.releasing.clear()  # requests die with the attempt they were sent to
        slot.returned.clear()
        slot.attempts += 1

    def _addressed_to_live(self, slot: SubtaskState, attempt: int | None, what: str) -> None:
        s = slot.subtask
        if not slot.live:
            self._violation(
                ViolationKind.NO_LIVE_ATTEMPT,
                f"{what} is sent to subtask {s}, which has no live attempt ({slot.describe_attempt()})",
            )
        elif attempt != slot.attempt:
            self._violation(
                ViolationKind.MISADDRESSED,
                f"{what} is addressed to attempt {attempt} of subtask {s}, but its current attempt is {slot.attempt}",
            )

    def _check_seq(self, slot: SubtaskState, seq: int, what: str) -> None:
        s = slot.subtask
        expected = slot.last_seq + 1
        if seq == expected:
            slot.last_seq = seq
        elif seq < expected:
            self._violation(
                ViolationKind.SEQ_REUSED,
                f"{what} reuses seq {seq} for subtask {s}; the last seq was {slot.last_seq}, so it must be {expected}",
            )
        else:
            missing = f"seq {expected}" if seq == expected + 1 else f"seqs {expected}..{seq - 1}"
            self._violation(
                ViolationKind.SEQ_GAP,
                f"{what} skips {missing} of subtask {s}: the last seq was {slot.last_seq}, so it must be {expected}",
            )
            slot.last_seq = seq

    def _add_splits(self, slot: SubtaskState, body: AddSplits) -> None:
        s = slot.subtask
        if slot.no_more_splits and body.splits:
            self._violation(
                ViolationKind.SPLITS_AFTER_NO_MORE_SPLITS,
                f"AddSplits seq {body.seq} gives splits to attempt {slot.attempt} of subtask {s} "
                "after it was sent NoMoreSplits",
            )
        ids = [split["split_id"] for split in body.splits]
        finished = [sid for sid in ids if sid in self.finished]
        if finished:
            self._violation(
                ViolationKind.FINISHED_SPLIT_ASSIGNED,
                f"AddSplits seq {body.seq} to subtask {s} gives {len(finished)} split(s) "
                f"that were already finished: {_ids(finished)}; "
                "a finished split is never assigned again",
            )
        twice = {sid: self.owner[sid] for sid in ids if sid in self.owner}
        if twice:
            owners = ", ".join(f"{sid} (owned by subtask {owner})" for sid, owner in sorted(twice.items())[:_SHOWN])
            more = f" and {len(twice) - _SHOWN} more" if len(twice) > _SHOWN else ""
            self._violation(
                ViolationKind.SPLIT_OWNED_TWICE,
                f"AddSplits seq {body.seq} to subtask {s} gives {len(twice)} split(s) "
                f"that are still owned, so they would be owned twice: {owners}{more}",
            )
        for sid in ids:
            previous = self.owner.get(sid)
            if previous is not None:  # move it, so the break is reported once
                self.subtasks[previous].owned.pop(sid, None)
            self.owner[sid] = s
            slot.owned[sid] = body.seq
            self.ever_assigned.add(sid)
            self.unowned_since.pop(sid, None)
            self.assignments += 1

    def _release_requested(self, slot: SubtaskState, body: ReleaseRequest) -> None:
        s = slot.subtask
        not_owned = [sid for sid in body.split_ids if sid not in slot.owned]
        if not_owned:
            detail = ", ".join(f"{sid} ({self._whose(sid)})" for sid in sorted(not_owned)[:_SHOWN])
            more = f" and {len(not_owned) - _SHOWN} more" if len(not_owned) > _SHOWN else ""
            self._violation(
                ViolationKind.RELEASE_NOT_OWNED,
                f"ReleaseRequest seq {body.seq} asks subtask {s} for {len(not_owned)} split(s) it does not own: "
                f"{detail}{more}",
            )
        for sid in body.split_ids:
            if sid in slot.owned:
                slot.releasing.setdefault(sid, body.seq)

    def _check_returned(self, slot: SubtaskState, listed: Sequence[str]) -> None:
        """A release ``returned`` names only splits an accepted CheckpointAck gave back."""
        not_returned = [sid for sid in listed if sid in slot.owned and sid not in slot.returned]
        if not_returned:
            self._violation(
                ViolationKind.RELEASE_IMPRECISE,
                f"SplitsReleased (returned) of subtask {slot.subtask} names {_ids(not_returned)}, "
                "which no accepted CheckpointAck of its attempt gave back: its reader may still be reading them",
            )
        slot.returned.difference_update(listed)

    def _released(self, slot: SubtaskState, body: SplitsReleased, attempt: int | None) -> None:
        s = slot.subtask
        reason = body.reason
        what = f"SplitsReleased ({reason})"
        if attempt != slot.attempt:
            self._violation(
                ViolationKind.MISADDRESSED,
                f"{what} is addressed to attempt {attempt} of subtask {s}, but its last attempt is {slot.attempt}",
            )
        failing = body.failed_attempt is not None
        if failing != (reason in _FAILURE_REASONS):
            self._violation(
                ViolationKind.RELEASE_INCONSISTENT,
                f"{what} has failed_attempt {body.failed_attempt}: "
                f"it is set exactly for the reasons {' and '.join(sorted(_FAILURE_REASONS))}",
            )
        if failing and (not slot.live or body.failed_attempt != slot.attempt):
            self._violation(
                ViolationKind.RELEASE_INCONSISTENT,
                f"{what} fails attempt {body.failed_attempt} of subtask {s}, "
                "which is not its live attempt "
                f"({slot.describe_attempt()})",
            )
        elif reason == ReleaseReason.RETURNED.value:
            if not slot.live:
                self._violation(
                    ViolationKind.RELEASE_INCONSISTENT,
                    f"{what} for subtask {s}, which has no live attempt ({slot.describe_attempt()})",
                )
            self._check_returned(slot, body.split_ids)
        elif reason in (ReleaseReason.DEPARTED.value, ReleaseReason.LEFT.value) and slot.live:
            self._violation(
                ViolationKind.RELEASE_INCONSISTENT,
                f"{what} for subtask {s} while its attempt {slot.attempt} is live",
            )
        listed = body.split_ids
        not_owned = [sid for sid in listed if sid not in slot.owned]
        if not_owned:
            detail = ", ".join(f"{sid} ({self._whose(sid)})" for sid in sorted(not_owned)[:_SHOWN])
            more = f" and {len(not_owned) - _SHOWN} more" if len(not_owned) > _SHOWN else ""
            self._violation(
                ViolationKind.RELEASE_NOT_OWNED,
                f"{what} releases {len(not_owned)} split(s) that subtask {s} does not own: {detail}{more}",
            )
        whole = slot.release_in_parts or self._release_rule(slot, body)
        whole.named.update(sid for sid in listed if sid in slot.owned)
        slot.release_in_parts = whole if body.more else None
        if whole.expected is not None and not body.more:  # the release is complete: check all its parts
            expected, rule = whole.expected, whole.rule
            missing = expected - whole.named
            extra = whole.named - expected
            if missing or extra:
                parts = []
                if missing:
                    parts.append(f"it leaves out {_ids(missing)}")
                if extra:
                    parts.append(f"it wrongly includes {_ids(extra)}")
                self._violation(
                    ViolationKind.RELEASE_IMPRECISE,
                    f"{what} of subtask {s} must name exactly {rule}, but {' and '.join(parts)}",
                )
        self._release(slot, listed, reason)
        if body.more:
            return  # the attempt fails, or leaves, with the release's last record
        if (failing and body.failed_attempt == slot.attempt) or reason == ReleaseReason.LEFT.value:
            slot.live = False
            slot.ended_by = reason
            slot.releasing.clear()
            slot.returned.clear()

    @staticmethod
    def _release_rule(slot: SubtaskState, body: SplitsReleased) -> ReleaseInParts:
        """What a release must name, decided at its first record."""
        if body.failed_attempt is not None and body.failed_attempt == slot.attempt:
            expected = {sid for sid, seq in slot.owned.items() if seq > slot.applied_seq}
            rule = f"the splits it owns with seq above its acknowledged seq {slot.applied_seq}"
            return ReleaseInParts(expected, rule)
        if body.reason in (ReleaseReason.DEPARTED.value, ReleaseReason.LEFT.value):
            return ReleaseInParts(set(slot.owned), "every split it owns")
        return ReleaseInParts(None, "")

    def _release(self, slot: SubtaskState, split_ids: Iterable[str], reason: str) -> None:
        count = 0
        for sid in split_ids:
            slot.releasing.pop(sid, None)
            if slot.owned.pop(sid, None) is not None:
                del self.owner[sid]
                self.unowned_since[sid] = self._ts
                count += 1
        self.released_by_reason[reason] += count

    def _whose(self, split_id: str) -> str:
        if split_id in self.finished:
            return "finished"
        owner = self.owner.get(split_id)
        if owner is not None:
            return f"owned by subtask {owner}"
        return "unowned" if split_id in self.ever_assigned else "never assigned"

    # -- results ------------------------------------------------------------

    def summary(
        self,
        ordering: Ordering,
        undecodable: dict[str, int],
        notes: Sequence[str] = (),
        cut: Cut | None = None,
    ) -> AuditSummary:
        subtasks = [
            SubtaskSummary(
                subtask=s,
                attempts=slot.attempts,
                current_attempt=slot.attempt,
                live=slot.live,
                last_seq=slot.last_seq,
                owned=len(slot.owned),
                finished=slot.finished,
                acked_seq=slot.applied_seq,
                fenced_messages=slot.fenced,
                other_incarnation_messages=slot.other_incarnation,
            )
            for s, slot in sorted(self.subtasks.items())
        ]
        return AuditSummary(
            ordering=ordering,
            inbox_records=self.inbox_records,
            readers_records=self.readers_records,
            subtasks=subtasks,
            splits_assigned=len(self.ever_assigned),
            assignments=self.assignments,
            splits_finished=len(self.finished),
            splits_owned=len(self.owner),
            released_by_reason=dict(sorted(self.released_by_reason.items())),
            fenced_messages=self.fenced_messages,
            rejected_messages=self.rejected_messages,
            ignored_acks=self.ignored_acks,
            finished_not_owned=self.finished_not_owned,
            undecodable=undecodable,
            messages_by_type=dict(sorted(self.messages_by_type.items())),
            epochs=sorted(self.epochs),
            low_watermark=self.low_watermark,
            last_cseq=self.last_cseq,
            notes=list(notes),
            redefinitions=list(self.redefinitions),
            other_incarnation_messages=self.other_incarnation_messages,
            incomplete_records=dict(sorted(self.incomplete_records.items())),
            cut=cut,
        )


def _describe_redefinition(record: ReplayRecord, body: SourceRedefined) -> str:
    new = SourceDefinition.from_json(body.definition)
    if body.previous is None:
        changes = new.describe()
    else:
        lines = SourceDefinition.from_json(body.previous).differences(new)
        changes = "; ".join(line.replace("(source)", "(old)").replace("(given)", "(new)") for line in lines)
    when = datetime.fromtimestamp(record.env.ts / 1000, tz=UTC).isoformat(timespec="seconds")
    return f"inbox offset {record.location.offset} at {when}: {changes}"


def _infer_source(inbox: Sequence[InboxRecord], readers: Sequence[ReadersRecord]) -> str | None:
    candidates: list[tuple[bytes | None, Direction]] = [(raw, Direction.TO_READER) for _, _, raw in readers[:50]]
    candidates += [(raw, Direction.TO_COORDINATOR) for _, raw in inbox[:50]]
    for raw, direction in candidates:
        try:
            return decode(raw, direction).source
        except DecodeError:
            continue
    return None


def audit_records(
    inbox: Sequence[InboxRecord],
    readers: Sequence[ReadersRecord],
    *,
    source: str | None = None,
    namespace: str = "sluicegate",
    max_parallelism: int | None = None,
    cut: Cut | None = None,
) -> AuditResult:
    """Audit one source's history: ``inbox`` is NS.S.coordinator as (offset, value),
    ``readers`` is NS.S.readers as (partition, offset, value).

    ``source`` (inferred from the records if omitted) names the topics in the
    report and makes records of another source violations (readers topic) or
    rejected (inbox). ``max_parallelism`` (the readers topic's partition count),
    if given, makes inbox records of subtasks beyond it rejected, as the
    coordinator rejects them. ``cut``: where a read of live topics stopped (reported).
    """
    known_source = source if source is not None else _infer_source(inbox, readers)
    inbox_topic, readers_topic = topic_names(known_source or "unknown", namespace)
    merged = replay(inbox, readers, inbox_topic=inbox_topic, readers_topic=readers_topic)
    model = OwnershipModel(source=source, max_parallelism=max_parallelism)
    model.apply_all(merged.records)
    violations = sorted([*merged.violations, *model.violations], key=lambda v: (v.position < 0, v.position))
    undecodable: Counter[str] = Counter({inbox_topic: 0, readers_topic: 0})
    for skipped in merged.skipped:
        undecodable[skipped.location.topic] += 1
    summary = model.summary(merged.ordering, dict(undecodable), merged.notes, cut)
    return AuditResult(violations=violations, summary=summary, skipped=merged.skipped)
