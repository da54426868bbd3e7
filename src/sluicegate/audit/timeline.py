"""A source's history as a timeline: who owned which split when, and what happened. Pure: no I/O.

``build_timeline`` drives an ``OwnershipModel`` (invariants.py) over the replayed
records, so ownership here follows exactly the coordinator's acceptance rules the
audit checks; it only watches what each record changed:

- an ``Ownership`` is one split held by one attempt of one subtask, from the
  ``AddSplits`` that gave it to the record that ended it (finished, or released
  with a reason), or open at the end of the history;
- a ``Mark`` is a point event in a subtask's lane (registration, a fenced reader
  message, a failed attempt, a release, a leave) or source wide (a new epoch);
- the low watermark is sampled at each ``WatermarkAnnouncement`` that raises it;
- ``Ack`` rows are the split positions a live attempt acknowledged (``CheckpointAck``).

Time is the sender's wall clock (``ts``), made non-decreasing along the replay
order so that an interval never ends before it starts when clocks differ a little.
``position`` is the index in the replay order, the exact "when" for ``ownership_at``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sluicegate.audit.invariants import OwnershipModel
from sluicegate.audit.replay import ReplayRecord
from sluicegate.protocol import (
    AddSplits,
    CheckpointAck,
    ReaderLeaving,
    ReaderRegistered,
    ReaderRegistration,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
)


class MarkKind(enum.StrEnum):
    REGISTERED = "registered"
    FENCED = "fenced message"
    FAILED = "attempt failed"
    RELEASED = "splits released"
    LEFT = "left"
    EPOCH = "new epoch"


@dataclass(frozen=True, slots=True)
class Mark:
    kind: MarkKind
    subtask: int | None
    """None: source wide (a new epoch)."""
    ts_ms: int
    position: int
    detail: str


@dataclass(slots=True)
class Ownership:
    split_id: str
    subtask: int
    attempt: int | None
    start_ms: int
    start_position: int
    end_ms: int | None = None
    """None: still owned at the end of the history."""
    end_position: int | None = None
    ended_by: str | None = None
    """``finished`` or ``released (REASON)``; None while owned."""

    def owned_at(self, position: int) -> bool:
        return self.start_position <= position and (self.end_position is None or position < self.end_position)


@dataclass(frozen=True, slots=True)
class Ack:
    split_id: str
    subtask: int
    attempt: int | None
    checkpoint_id: int
    ts_ms: int
    position: int
    state: dict[str, Any]
    """The split as acknowledged (its position fields), without ``split_id``."""


@dataclass
class Timeline:
    ownerships: list[Ownership] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    low_watermarks: list[tuple[int, int]] = field(default_factory=list)
    """(ts_ms, low watermark) each time it rose."""
    acks: list[Ack] = field(default_factory=list)
    ts_by_position: list[int] = field(default_factory=list)
    cseq_by_position: list[int | None] = field(default_factory=list)
    subtasks: list[int] = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)
    """Each subtask's last reader, by the location its registration gave (``host:pid``;
    ``host:pid/spark`` for a Spark query's driver)."""

    @property
    def start_ms(self) -> int:
        return self.ts_by_position[0] if self.ts_by_position else 0

    @property
    def end_ms(self) -> int:
        return self.ts_by_position[-1] if self.ts_by_position else 0

    @property
    def last_event_ms(self) -> int:
        """When the last thing the picture shows happened: an ownership began or ended, a
        mark, a rise of the low watermark. Heartbeats and acknowledgements that changed
        nothing may go on long after it (a reader idle at the end of its input), and an axis
        that ran to them showed minutes of nothing (issue 51 item 5)."""
        times = [o.start_ms for o in self.ownerships]
        times += [o.end_ms for o in self.ownerships if o.end_ms is not None]
        times += [m.ts_ms for m in self.marks] + [ts for ts, _ in self.low_watermarks]
        return max(times, default=self.end_ms)

    @property
    def split_ids(self) -> list[str]:
        return sorted({o.split_id for o in self.ownerships})


def build_timeline(
    records: Sequence[ReplayRecord], *, source: str | None = None, max_parallelism: int | None = None
) -> Timeline:
    model = OwnershipModel(source=source, max_parallelism=max_parallelism)
    timeline = Timeline()
    open_by_split: dict[str, Ownership] = {}
    ts = 0
    max_epoch: int | None = None
    for position, record in enumerate(records):
        env = record.env
        ts = max(ts, env.ts)
        timeline.ts_by_position.append(ts)
        timeline.cseq_by_position.append(env.cseq)
        body = env.body
        touched = _split_ids_touched(body)
        attempt_before = model.subtasks[env.subtask].attempt if env.subtask in model.subtasks else None
        live_before = env.subtask in model.subtasks and model.subtasks[env.subtask].live
        fenced_before = model.fenced_messages
        owner_before = {sid: model.owner.get(sid) for sid in touched}
        model.apply(record, position)
        if not record.from_reader and (max_epoch is None or env.epoch > max_epoch):
            if max_epoch is not None:
                timeline.marks.append(Mark(MarkKind.EPOCH, None, ts, position, f"epoch {env.epoch}"))
            max_epoch = env.epoch
        if model.fenced_messages > fenced_before:
            timeline.marks.append(
                Mark(MarkKind.FENCED, env.subtask, ts, position, f"{env.type} from attempt {env.attempt}")
            )
        for sid in touched:
            before, after = owner_before[sid], model.owner.get(sid)
            if before == after:
                continue
            if before is not None:
                ended = open_by_split.pop(sid)
                ended.end_ms, ended.end_position = ts, position
                ended.ended_by = "finished" if isinstance(body, SplitsFinished) else f"released ({_reason(body)})"
            if after is not None:
                owned = Ownership(sid, after, model.subtasks[after].attempt, ts, position)
                open_by_split[sid] = owned
                timeline.ownerships.append(owned)
        _note_event(timeline, model, record, position, ts, attempt_before, live_before)
    timeline.subtasks = sorted(model.subtasks)
    return timeline


def _split_ids_touched(body: object) -> list[str]:
    """The splits whose owner this record may change (only these three bodies change ownership)."""
    if isinstance(body, AddSplits):
        return [split["split_id"] for split in body.splits]
    if isinstance(body, SplitsFinished | SplitsReleased):
        return list(body.split_ids)
    return []


def _reason(body: object) -> str:
    return body.reason if isinstance(body, SplitsReleased) else "?"


def _note_event(
    timeline: Timeline,
    model: OwnershipModel,
    record: ReplayRecord,
    position: int,
    ts: int,
    attempt_before: int | None,
    live_before: bool,
) -> None:
    env, body, s = record.env, record.env.body, record.env.subtask
    if isinstance(body, ReaderRegistration) and body.location:
        timeline.hosts[s] = body.location
    if isinstance(body, ReaderRegistered) and not body.more:  # one mark per record sent in pieces (v6)
        timeline.marks.append(Mark(MarkKind.REGISTERED, s, ts, position, f"attempt {body.attempt}"))
    elif isinstance(body, SplitsReleased):
        kind = MarkKind.FAILED if body.failed_attempt is not None else MarkKind.RELEASED
        what = f"{body.reason}: {len(body.split_ids)} split(s)"
        if body.failed_attempt is not None:
            what = f"attempt {body.failed_attempt} {what}"
        timeline.marks.append(Mark(kind, s, ts, position, what))
    elif isinstance(body, WatermarkAnnouncement):
        low = model.low_watermark
        if low is not None and (not timeline.low_watermarks or low > timeline.low_watermarks[-1][1]):
            timeline.low_watermarks.append((ts, low))
    elif record.from_reader and live_before and env.attempt == attempt_before:
        if isinstance(body, ReaderLeaving) and not body.more:
            timeline.marks.append(Mark(MarkKind.LEFT, s, ts, position, f"attempt {env.attempt} left"))
        elif isinstance(body, CheckpointAck) and body.applied_seq <= model.subtasks[s].last_seq:
            for split in body.splits:
                state = {k: v for k, v in split.items() if k != "split_id"}
                timeline.acks.append(Ack(split["split_id"], s, env.attempt, body.checkpoint_id, ts, position, state))


# -- questions over a timeline ---------------------------------------------------------------


@dataclass(frozen=True)
class SplitHistory:
    split_id: str
    ownerships: list[Ownership]
    acks: list[Ack]


def split_history(timeline: Timeline, split_id: str) -> SplitHistory:
    return SplitHistory(
        split_id,
        [o for o in timeline.ownerships if o.split_id == split_id],
        [a for a in timeline.acks if a.split_id == split_id],
    )


def ownership_at(timeline: Timeline, position: int) -> dict[int, list[str]]:
    """Split ids owned by each subtask right after the record at ``position`` (every subtask listed)."""
    out: dict[int, list[str]] = {s: [] for s in timeline.subtasks}
    for o in timeline.ownerships:
        if o.owned_at(position):
            out.setdefault(o.subtask, []).append(o.split_id)
    return {s: sorted(ids) for s, ids in sorted(out.items())}


class PointNotFound(ValueError):
    pass


def position_at(timeline: Timeline, when: str) -> int:
    """The replay position ``when`` names: an integer is a cseq (the coordinator's sequence
    number of its readers-topic records), anything else an ISO 8601 time (UTC if no zone);
    the answer is the last record at or before it."""
    if not timeline.ts_by_position:
        raise PointNotFound("the history is empty")
    if when.strip().lstrip("-").isdigit():
        cseq = int(when)
        found = [p for p, c in enumerate(timeline.cseq_by_position) if c is not None and c <= cseq]
        if not found:
            raise PointNotFound(f"no readers-topic record has a cseq at or below {cseq}")
        # Inbox records merged right after that cseq were processed before the next one.
        last = found[-1]
        while last + 1 < len(timeline.cseq_by_position) and timeline.cseq_by_position[last + 1] is None:
            last += 1
        return last
    try:
        moment = datetime.fromisoformat(when)
    except ValueError:
        raise PointNotFound(f"--at {when!r} is neither a cseq (an integer) nor an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ts = int(moment.timestamp() * 1000)
    before = [p for p, t in enumerate(timeline.ts_by_position) if t <= ts]
    if not before:
        raise PointNotFound(f"{when} is before the first record of the history")
    return before[-1]
