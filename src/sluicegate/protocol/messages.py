"""Typed control-plane messages (docs/protocol.md): an envelope and one body class per type."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from sluicegate.api.split import WireSplit

PROTOCOL_VERSION = 8
"""Version this code sends. v2 added SplitsReleased and the envelope's inbox_offset; v3 added
slots handed out (SlotRequest, SlotGranted, RegistrationRefused, ReaderRegistration.exclusive), the
successor named in a fence, cooperative rebalancing (ReleaseRequest, CheckpointAck.returned)
and growing a source (MaxParallelismRaised); v4 the sender's incarnation; v5 the source's
definition (ReaderRegistration.definition, RegistrationRefused.cause, SourceRedefined); v6
records in pieces both ways (``more`` on CheckpointAck, ReaderRegistration, ReaderLeaving and
ReaderRegistered: protocol/pieces.py); v7 acks that name only what moved
(CheckpointAck.base_checkpoint_id); v8 the attempt whose checkpoint a registration restores
(ReaderRegistration.restored_attempt: a restarted Spark query takes its subtasks back)."""
ACCEPTED_VERSIONS = frozenset({1, 2, 3, 4, 5, 6, 7, 8})

PIECE_FIELDS = frozenset({"piece", "more"})
"""v6: the fields of a record sent in pieces (protocol/pieces.py)."""

SOURCE_WIDE = -1
"""The envelope ``subtask`` of a record about the source as a whole (v3): a SlotRequest from
a reader that has no subtask yet, a MaxParallelismRaised from an operator's tool."""


class Direction(enum.Enum):
    TO_COORDINATOR = "to-coordinator"
    TO_READER = "to-reader"


@dataclass(frozen=True, slots=True)
class Body:
    TYPE: ClassVar[str]
    DIRECTION: ClassVar[Direction]
    ONLY_WHEN_SET: ClassVar[frozenset[str]] = frozenset()
    """Fields written only when they differ from their default, so that a record as older
    versions wrote it looks the same (v6's ``piece`` and ``more`` on a record in one)."""

    def to_json(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in self.ONLY_WHEN_SET or getattr(self, f.name) != f.default
        }


# --- reader -> coordinator -------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReaderRegistration(Body):
    TYPE = "ReaderRegistration"
    ONLY_WHEN_SET = PIECE_FIELDS | {"restored_attempt"}
    DIRECTION = Direction.TO_COORDINATOR
    incarnation: str
    location: str
    reported_splits: list[WireSplit]
    restored_checkpoint_id: int | None
    exclusive: bool = False
    """v3: if another incarnation's attempt of the subtask is live, refuse this registration
    (RegistrationRefused) instead of fencing that attempt. A Spark query registers so, so that
    a second query on the same source fails instead of disturbing the first."""
    definition: dict[str, Any] | None = None
    """v5: the source's definition as this reader brings it (``{"connector", "options"}``,
    protocol/definition.py; local options left out). A registration whose definition differs
    from the source's is refused (cause ``definition``). None: not compared (older readers)."""
    piece: int = 0
    """v6: which piece of the record this is (0, 1, 2 ...; protocol/pieces.py)."""
    more: bool = False
    """v6: the record goes on in the next piece, alike but for its lists. The receiver acts
    at the last piece, on the whole record."""
    restored_attempt: int | None = None
    """v8: the attempt that wrote the restored checkpoint. An exclusive registration whose
    restored attempt is the live one comes from that attempt's own query, restarted (only
    it has that attempt's checkpoint): it fences the attempt instead of being refused."""


@dataclass(frozen=True, slots=True)
class SlotRequest(Body):
    """v3, envelope subtask SOURCE_WIDE: a reader with no subtask asks for a free slot. The
    answer is SlotGranted (on the granted subtask's partition) or RegistrationRefused.
    ``name`` is a stable member name (like Kafka's group.instance.id): a slot last held by
    that name is given back to it, even if an attempt of it is still live (a restart)."""

    TYPE = "SlotRequest"
    DIRECTION = Direction.TO_COORDINATOR
    incarnation: str
    location: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class MaxParallelismRaised(Body):
    """v3, envelope subtask SOURCE_WIDE: an operator grew the per-subtask topics
    (``sluicegate topics scale``); the coordinator serves the new slots from here on."""

    TYPE = "MaxParallelismRaised"
    DIRECTION = Direction.TO_COORDINATOR
    max_parallelism: int


@dataclass(frozen=True, slots=True)
class SourceRedefined(Body):
    """v5, envelope subtask SOURCE_WIDE: an operator changed what the source is
    (``sluicegate source redefine``), in the same transaction that rewrote the committed
    definition. ``previous`` is the definition it replaced (None: there was none)."""

    TYPE = "SourceRedefined"
    DIRECTION = Direction.TO_COORDINATOR
    definition: dict[str, Any]
    previous: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RequestSplit(Body):
    TYPE = "RequestSplit"
    DIRECTION = Direction.TO_COORDINATOR
    hostname: str | None


@dataclass(frozen=True, slots=True)
class ReaderSourceEvent(Body):
    TYPE = "SourceEvent"
    DIRECTION = Direction.TO_COORDINATOR
    payload: Any


@dataclass(frozen=True, slots=True)
class Heartbeat(Body):
    TYPE = "Heartbeat"
    DIRECTION = Direction.TO_COORDINATOR
    watermark: int | None
    idle: bool


@dataclass(frozen=True, slots=True)
class CheckpointAck(Body):
    TYPE = "CheckpointAck"
    ONLY_WHEN_SET = PIECE_FIELDS | {"base_checkpoint_id"}
    DIRECTION = Direction.TO_COORDINATOR
    checkpoint_id: int
    applied_seq: int
    splits: list[WireSplit]
    returned: list[WireSplit] = field(default_factory=list)
    """v3: splits given back after a ReleaseRequest, at the positions of this checkpoint;
    ``splits`` no longer holds them."""
    base_checkpoint_id: int | None = None
    """v7: set, ``splits`` names only the splits whose state differs from checkpoint
    ``base_checkpoint_id`` of the same attempt, acknowledged before (new ones included); the
    others keep the positions acknowledged then. Unset, ``splits`` names every split."""
    piece: int = 0
    """v6: which piece of the record this is (0, 1, 2 ...; protocol/pieces.py)."""
    more: bool = False
    """v6: the record goes on in the next piece, alike but for its lists. The receiver acts
    at the last piece, on the whole record."""


@dataclass(frozen=True, slots=True)
class SplitsFinished(Body):
    TYPE = "SplitsFinished"
    DIRECTION = Direction.TO_COORDINATOR
    split_ids: list[str]


@dataclass(frozen=True, slots=True)
class ReaderLeaving(Body):
    TYPE = "ReaderLeaving"
    ONLY_WHEN_SET = PIECE_FIELDS
    DIRECTION = Direction.TO_COORDINATOR
    splits: list[WireSplit]
    piece: int = 0
    """v6: which piece of the record this is (0, 1, 2 ...; protocol/pieces.py)."""
    more: bool = False
    """v6: the record goes on in the next piece, alike but for its lists. The receiver acts
    at the last piece, on the whole record."""


# --- coordinator -> reader -------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReaderRegistered(Body):
    """``dropped_split_ids`` (v2): reported splits the reader must not keep; it reads
    ``reported_splits`` minus these. All of them for a source with reassignment on
    recovery (FLIP-537); otherwise those that the coordinator no longer attributes
    to this subtask (they departed to another one, or were never acknowledged)."""

    TYPE = "ReaderRegistered"
    ONLY_WHEN_SET = PIECE_FIELDS | {"renew_producer"}
    DIRECTION = Direction.TO_READER
    incarnation: str
    attempt: int
    dropped_split_ids: list[str] = field(default_factory=list)
    renew_producer: bool = False
    """v7, set only when true: the coordinator fenced the subtask's transactional id around
    the time this reader started, so its producer may be fenced: it starts a new one before
    its first transaction (docs/protocol.md, "A reader paused past its session timeout").
    A reader that ignores it learns the same from its first failed transaction."""
    piece: int = 0
    """v6: which piece of the record this is (0, 1, 2 ...; protocol/pieces.py)."""
    more: bool = False
    """v6: the record goes on in the next piece, alike but for its lists. The receiver acts
    at the last piece, on the whole record."""


@dataclass(frozen=True, slots=True)
class SlotGranted(Body):
    """v3, on the granted subtask's partition: the SlotRequest of ``incarnation`` got this
    subtask. The slot is held for that reader for ``session_timeout_ms``; the reader then
    restores the subtask's checkpoint and registers as any reader of the subtask does."""

    TYPE = "SlotGranted"
    DIRECTION = Direction.TO_READER
    incarnation: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class RegistrationRefused(Body):
    """v3: a SlotRequest (no free slot) or an exclusive ReaderRegistration (another
    incarnation holds the subtask) was refused. Sent on the subtask's partition; for a
    SlotRequest on partition 0. ``holder_*`` name the live attempt that holds the subtask."""

    TYPE = "RegistrationRefused"
    DIRECTION = Direction.TO_READER
    incarnation: str
    reason: str
    holder_incarnation: str | None = None
    holder_location: str | None = None
    cause: str | None = None
    """v5: ``held`` (a live holder; it may go away: retry), ``slots`` (no free slot) or
    ``definition`` (the reader brings another definition of the source: final)."""


@dataclass(frozen=True, slots=True)
class ReleaseRequest(Body):
    """v3, in the subtask's ``seq`` order: give these splits back at the next checkpoint
    (cooperative rebalancing). The reader stops reading them, and the CheckpointAck that
    follows carries them in ``returned`` with their positions."""

    TYPE = "ReleaseRequest"
    DIRECTION = Direction.TO_READER
    seq: int
    split_ids: list[str]


@dataclass(frozen=True, slots=True)
class AddSplits(Body):
    TYPE = "AddSplits"
    DIRECTION = Direction.TO_READER
    seq: int
    splits: list[WireSplit]


@dataclass(frozen=True, slots=True)
class NoMoreSplits(Body):
    TYPE = "NoMoreSplits"
    DIRECTION = Direction.TO_READER
    seq: int


@dataclass(frozen=True, slots=True)
class CoordinatorSourceEvent(Body):
    TYPE = "SourceEvent"
    DIRECTION = Direction.TO_READER
    payload: Any


@dataclass(frozen=True, slots=True)
class WatermarkAnnouncement(Body):
    TYPE = "WatermarkAnnouncement"
    DIRECTION = Direction.TO_READER
    low_watermark: int | None
    max_allowed_watermark: int | None


class ReleaseReason(enum.StrEnum):
    FENCED = "fenced"
    SESSION_TIMEOUT = "session-timeout"
    DEPARTED = "departed"
    RECOVERY = "recovery"
    LEFT = "left"
    RETURNED = "returned"
    """v3: given back after a ReleaseRequest (cooperative rebalancing)."""


@dataclass(frozen=True, slots=True)
class SplitsReleased(Body):
    """Ownership of ``split_ids`` left the subtask and went back to the enumerator.

    Sent for every release the coordinator decides on its own, so that replaying
    the topics alone rebuilds ownership. ``failed_attempt`` is set when the
    release is the failure of an attempt; that attempt must stop and re-register.
    """

    TYPE = "SplitsReleased"
    DIRECTION = Direction.TO_READER
    reason: str
    failed_attempt: int | None
    split_ids: list[str]
    successor_incarnation: str | None = None
    """v3, reason ``fenced``: the incarnation whose registration fenced the attempt. A reader
    that sees another incarnation here is a duplicate and stops for good."""
    successor_location: str | None = None
    more: bool = False
    """v5: the same release goes on in the next record. One release of more split ids than
    one record holds (a reader that held a million splits) is sent as several records,
    all alike but for their ids, the last with ``more`` false; an attempt fails at that
    last one."""


BODY_TYPES: dict[tuple[Direction, str], type[Body]] = {
    (cls.DIRECTION, cls.TYPE): cls
    for cls in (
        ReaderRegistration,
        RequestSplit,
        ReaderSourceEvent,
        Heartbeat,
        CheckpointAck,
        SplitsFinished,
        ReaderLeaving,
        SlotRequest,
        MaxParallelismRaised,
        SourceRedefined,
        ReaderRegistered,
        SlotGranted,
        RegistrationRefused,
        ReleaseRequest,
        AddSplits,
        NoMoreSplits,
        CoordinatorSourceEvent,
        WatermarkAnnouncement,
        SplitsReleased,
    )
}


@dataclass(slots=True)
class Envelope:
    """One control record (treat it as immutable: the coordinator builds one per reader in
    every watermark announcement, 100,000 a round at 100,000 readers, and the decoder one
    per inbox record, so it is not ``frozen``, whose ``__init__`` is five times slower).

    Two optional fields (protocol v2) let the audit replay both topics in the
    coordinator's own order; only coordinator -> reader records carry them:
    ``cseq`` numbers every outgoing record of the source (strictly increasing,
    across epochs), ``inbox_offset`` is the offset of the last inbox record the
    coordinator had processed when it sent this one.
    """

    type: str
    source: str
    subtask: int
    attempt: int | None
    epoch: int
    ts: int
    body: Body
    v: int = PROTOCOL_VERSION
    inbox_offset: int | None = None
    cseq: int | None = None
    incarnation: str | None = None
    """v4, reader -> coordinator only: the sender's incarnation. The coordinator drops a
    message whose incarnation is not that of the subtask's live attempt, so a reader sending
    for another subtask by mistake cannot act for that subtask's attempt even if the attempt
    numbers match. Absent (None) in v1-v3 records, which are checked on the attempt alone."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": self.v,
            "type": self.type,
            "source": self.source,
            "subtask": self.subtask,
            "attempt": self.attempt,
            "epoch": self.epoch,
            "ts": self.ts,
            "body": self.body.to_json(),
        }
        if self.inbox_offset is not None:
            out["inbox_offset"] = self.inbox_offset
        if self.cseq is not None:
            out["cseq"] = self.cseq
        if self.incarnation is not None:
            out["incarnation"] = self.incarnation
        return out


def envelope(
    body: Body,
    *,
    source: str,
    subtask: int,
    attempt: int | None,
    epoch: int,
    ts: int,
    inbox_offset: int | None = None,
    cseq: int | None = None,
    incarnation: str | None = None,
) -> Envelope:
    return Envelope(
        type=body.TYPE,
        source=source,
        subtask=subtask,
        attempt=attempt,
        epoch=epoch,
        ts=ts,
        body=body,
        inbox_offset=inbox_offset,
        cseq=cseq,
        incarnation=incarnation,
    )
