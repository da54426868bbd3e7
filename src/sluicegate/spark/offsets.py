"""The Spark source's offsets: pure data and pure planning, no Kafka, no Spark.

A Spark offset of the sluicegate source is the readers' checkpoint: for every
reader subtask, the attempt that owned its splits when the offset was planned,
the highest coordinator epoch seen, the ``seq`` of the last applied
``AddSplits``/``NoMoreSplits``, and each owned split with its *planned position*
(everything before it belongs to this micro-batch or an earlier one). Spark
writes an offset to its offset log before it runs the batch, so once written it
is durable: a restarted query runs the batch again with the same ranges.

Rules that keep the offsets and the coordinator's view consistent
(docs/protocol.md semantics 1 and 3; spark/datasource.py says when acks go out):

- A split is read under one *identity*: (subtask, attempt, seq of the
  ``AddSplits`` that gave it). An identity starts reading (``first``) where the
  attempt was told to start, or where this query already reached if that is
  further (the coordinator may hand a split back at an older, acknowledged
  position after a pause or a lost ack): the query never reads a range twice.
  The offset in which an identity appears reads from there already, so a
  query's first batch, a restart's, and a ``Trigger.Once`` run read data, as
  Spark's own sources do. (The coordinator learns the identity's position with
  the ack of that offset, at ``partitions``, as for every other split.)
- ``checkpoint_id`` grows by one with every offset that differs from its start;
  the first one of a fresh query is the wall clock in ms, so it is above the ids
  of an earlier query of the same source.
- An offset with nothing new is the start offset itself (same JSON), so Spark
  runs no batch for it.

Admission control (``maxRecordsPerTrigger``) shares a row budget across the
readable splits in proportion to their backlog, rounded as Spark's Kafka source rounds. Watermark
alignment: a split whose planned records already reach past the coordinator's
``max_allowed_watermark`` is not readable (paused) until the bound catches up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sluicegate.api.split import WireSplit

OFFSET_VERSION = 1

K = TypeVar("K", bound=Hashable)


class OffsetError(ValueError):
    """An offset this source did not write (or a newer version of it)."""


@dataclass(frozen=True, slots=True)
class SplitEntry:
    split: WireSplit
    """The split as the coordinator assigned it to the attempt (its position is the assigned one)."""
    seq: int
    """The ``AddSplits`` seq that gave it to the attempt."""
    pos: int
    """The planned position: records before it are in this batch or an earlier one."""
    end: int | None
    """The split's exclusive end (None: unbounded)."""
    first: int | None = None
    """Where this identity began reading: a batch whose start offset holds the split under
    another identity (or not at all) reads from here. None in offsets written before it
    was recorded: such an identity read nothing in the offset where it appeared."""

    @property
    def finished(self) -> bool:
        return self.end is not None and self.pos >= self.end

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"split": self.split, "seq": self.seq, "pos": self.pos, "end": self.end}
        if self.first is not None:
            out["first"] = self.first
        return out

    @classmethod
    def from_json(cls, data: Any) -> SplitEntry:
        if not isinstance(data, dict) or not isinstance(data.get("split"), dict):
            raise OffsetError(f"a split entry must be an object with a 'split' object, got {data!r}")
        end = data.get("end")
        return cls(
            split=dict(data["split"]),
            seq=_int(data, "seq"),
            pos=_int(data, "pos"),
            end=None if end is None else _int(data, "end"),
            first=_int(data, "first") if "first" in data else None,
        )


@dataclass(frozen=True)
class SubtaskOffset:
    attempt: int | None
    epoch: int = 0
    applied_seq: int = 0
    no_more_splits: bool = False
    splits: Mapping[str, SplitEntry] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """NoMoreSplits applied and every split read to its end."""
        return self.no_more_splits and all(e.finished for e in self.splits.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "epoch": self.epoch,
            "applied_seq": self.applied_seq,
            "no_more_splits": self.no_more_splits,
            "splits": {sid: self.splits[sid].to_json() for sid in sorted(self.splits)},
        }

    @classmethod
    def from_json(cls, data: Any) -> SubtaskOffset:
        if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
            raise OffsetError(f"a subtask offset must be an object with 'splits', got {data!r}")
        attempt = data.get("attempt")
        return cls(
            attempt=None if attempt is None else _int(data, "attempt"),
            epoch=_int(data, "epoch"),
            applied_seq=_int(data, "applied_seq"),
            no_more_splits=bool(data.get("no_more_splits", False)),
            splits={str(sid): SplitEntry.from_json(e) for sid, e in data["splits"].items()},
        )


@dataclass(frozen=True)
class Located:
    subtask: int
    attempt: int | None
    entry: SplitEntry

    def same_identity(self, subtask: int, attempt: int | None, seq: int) -> bool:
        return (
            self.subtask == subtask and self.attempt is not None and self.attempt == attempt and self.entry.seq == seq
        )


@dataclass(frozen=True)
class SourceOffset:
    checkpoint_id: int
    rows: int = 0
    """Records planned by this query up to this offset (for progress reports)."""
    subtasks: Mapping[int, SubtaskOffset] = field(default_factory=dict)
    parked: Mapping[str, SplitEntry] = field(default_factory=dict)
    """Splits this query has read that no subtask holds now (released, not yet given
    back): their positions, so that reading resumes where this query stopped."""
    source: str | None = None
    """The source the query reads (spark/source_identity.py): a restart of a query that
    named none reads this one. None in offsets written before it was recorded."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": OFFSET_VERSION,
            "checkpoint_id": self.checkpoint_id,
            "rows": self.rows,
            "subtasks": {str(s): self.subtasks[s].to_json() for s in sorted(self.subtasks)},
            "parked": {sid: self.parked[sid].to_json() for sid in sorted(self.parked)},
        }
        if self.source is not None:
            out["source"] = self.source
        return out

    @classmethod
    def from_json(cls, data: Any) -> SourceOffset:
        if not isinstance(data, dict):
            raise OffsetError(f"a sluicegate offset is a JSON object, got {data!r}")
        if data.get("v") != OFFSET_VERSION:
            raise OffsetError(f"unknown sluicegate offset version {data.get('v')!r} (this code reads {OFFSET_VERSION})")
        subtasks = data.get("subtasks")
        parked = data.get("parked", {})
        source = data.get("source")
        if not isinstance(subtasks, dict) or not isinstance(parked, dict):
            raise OffsetError("a sluicegate offset needs 'subtasks' and 'parked' objects")
        if source is not None and not isinstance(source, str):
            raise OffsetError(f"'source' must be a string, got {source!r}")
        try:
            parsed = {int(s): SubtaskOffset.from_json(v) for s, v in subtasks.items()}
        except ValueError as exc:
            raise OffsetError(f"bad sluicegate offset: {exc}") from None
        return cls(
            checkpoint_id=_int(data, "checkpoint_id"),
            rows=_int(data, "rows"),
            subtasks=parsed,
            parked={str(sid): SplitEntry.from_json(e) for sid, e in parked.items()},
            source=source,
        )

    def locate(self, split_id: str) -> Located | None:
        return self.index().get(split_id)

    def index(self) -> dict[str, Located]:
        """Where each split is: under its subtask, or parked (subtask -1, no attempt)."""
        out = {sid: Located(-1, None, e) for sid, e in self.parked.items()}
        for s, sub in self.subtasks.items():
            for sid, e in sub.splits.items():
                out[sid] = Located(s, sub.attempt, e)
        return out

    def same_state(self, other: SourceOffset) -> bool:
        """Equal apart from checkpoint id and row count."""
        return dict(self.subtasks) == dict(other.subtasks) and dict(self.parked) == dict(other.parked)


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise OffsetError(f"{key!r} must be an integer, got {value!r}")
    return value


# -- planning -------------------------------------------------------------------


@dataclass(frozen=True)
class OwnedSplit:
    """A split the attempt of a subtask holds now, as the driver knows it."""

    split_id: str
    split: WireSplit
    seq: int
    assigned_pos: int
    end: int | None
    releasing: bool = False
    """A ReleaseRequest asked for it back: it is not planned any further, and the ack of
    the first offset planned after the request returns it at its position there."""


@dataclass(frozen=True)
class SubtaskView:
    """One subtask's session at planning time."""

    attempt: int | None
    epoch: int
    applied_seq: int
    no_more_splits: bool
    splits: Sequence[OwnedSplit] = ()
    max_allowed_watermark: int | None = None
    """The coordinator's last WatermarkAnnouncement bound (watermark alignment), if any."""


def allocate(backlog: Mapping[K, int], max_rows: int | None) -> dict[K, int]:
    """Share ``max_rows`` across the keys in proportion to their backlog, as Spark's Kafka
    source shares ``maxOffsetsPerTrigger`` across partitions (``rateLimit`` of
    KafkaMicroBatchStream): each key gets its share rounded down, but a share under one
    record is rounded up, so that small partitions are not starved (the total may be a
    little off ``max_rows`` either way). Everything when it fits or there is no limit."""
    wanted = {k: b for k, b in backlog.items() if b > 0}
    total = sum(wanted.values())
    if max_rows is None or total <= max_rows:
        return wanted
    if max_rows <= 0:
        return {}
    shares: dict[K, int] = {}
    for k, rows in wanted.items():
        prorate = max_rows * (rows / total)  # in doubles, as Spark computes it
        shares[k] = min(rows, math.ceil(prorate) if prorate < 1 else math.floor(prorate))
    return shares


def allocate_in_order(
    backlog: Mapping[tuple[int, str], int], order: Callable[[tuple[int, str]], Any], max_rows: int | None
) -> dict[tuple[int, str], int]:
    """Share ``max_rows`` among the subtasks in proportion to their backlog (``allocate``),
    then give each subtask's share to its splits one after another in ``order``: every
    split but at most one per subtask is planned whole or not at all."""
    by_subtask: dict[int, list[tuple[int, str]]] = {}
    for key, rows in backlog.items():
        if rows > 0:
            by_subtask.setdefault(key[0], []).append(key)
    shares = allocate({s: sum(backlog[k] for k in keys) for s, keys in by_subtask.items()}, max_rows)
    granted: dict[tuple[int, str], int] = {}
    for s, share in shares.items():
        for key in sorted(by_subtask[s], key=order):
            if share <= 0:
                break
            granted[key] = min(backlog[key], share)
            share -= granted[key]
    return granted


def first_splits(
    backlog: Mapping[tuple[int, str], int], order: Callable[[tuple[int, str]], Any], max_splits: int
) -> dict[tuple[int, str], int]:
    """The backlog of at most ``max_splits`` splits that have one: each subtask's in
    ``order``, the subtasks taking turns (so every subtask reads, as long as there are
    at least as many splits as subtasks)."""
    by_subtask: dict[int, list[tuple[int, str]]] = {}
    for key in sorted((k for k, rows in backlog.items() if rows > 0), key=order):
        by_subtask.setdefault(key[0], []).append(key)
    queues = [by_subtask[s] for s in sorted(by_subtask)]
    kept: dict[tuple[int, str], int] = {}
    turn = 0
    while len(kept) < max_splits and any(queues):
        queue = queues[turn % len(queues)]
        if queue:
            key = queue.pop(0)
            kept[key] = backlog[key]
        turn += 1
    return kept


def _paused(
    owned: OwnedSplit,
    base: int,
    max_allowed_watermark: int | None,
    event_time_before: Callable[[OwnedSplit, int], int | None] | None,
) -> bool:
    if max_allowed_watermark is None or event_time_before is None:
        return False
    read_up_to = event_time_before(owned, base)
    return read_up_to is not None and read_up_to > max_allowed_watermark


@dataclass(frozen=True)
class EventTimeBound:
    """Planning-time alignment over the splits of one query.

    ``event_time_at(split, position)``: the event time of the record at ``position``
    (None: unknown); ``position_after(split, t)``: the first position whose record's
    event time is past ``t`` (None: none is known, everything available is at or
    before ``t``). Records of a split are taken to come in event-time order."""

    max_drift_ms: int
    event_time_at: Callable[[OwnedSplit, int], int | None]
    position_after: Callable[[OwnedSplit, int], int | None]

    def clamp(self, readable: Mapping[K, tuple[OwnedSplit, int, int]]) -> dict[K, int]:
        """New limits for ``readable`` (key -> split, base, limit): no split is planned
        past the earliest next event time among them plus ``max_drift_ms``. A lagging
        split reads at full speed; the others wait for it, batch by batch."""
        nexts = {k: self.event_time_at(owned, base) for k, (owned, base, limit) in readable.items() if limit > base}
        known = [t for t in nexts.values() if t is not None]
        if not known:
            return {k: limit for k, (_, _, limit) in readable.items()}
        bound = min(known) + self.max_drift_ms
        out: dict[K, int] = {}
        for k, (owned, base, limit) in readable.items():
            after = self.position_after(owned, bound) if limit > base else None
            out[k] = limit if after is None else max(base, min(limit, after))
        return out


def plan_next(
    start: SourceOffset,
    views: Mapping[int, SubtaskView],
    max_rows: int | None,
    available: Callable[[OwnedSplit, int], int],
    reported_finished: Collection[str] = (),
    event_time_before: Callable[[OwnedSplit, int], int | None] | None = None,
    event_time_bound: EventTimeBound | None = None,
    in_order: bool = False,
    max_splits: int | None = None,
) -> SourceOffset:
    """The next offset after ``start``, or ``start`` itself when nothing changed.

    Active subtasks (``attempt`` set) list every split they own: one read under the
    same identity as in ``start`` advances to what is available
    (``available(split, base_position)``), within ``max_rows`` shared by backlog (or,
    ``in_order``, each subtask's share split after split: ``allocate_in_order``); a
    new identity starts where the assignment says, or further if this query already
    read further. A subtask that is not active (registering) keeps its entry from
    ``start``. Splits that leave every subtask are parked with their positions,
    unless they were reported finished (``reported_finished``).

    A split being given back (``releasing``) stays where it is. A split whose
    ``available`` is below its position moves back to it, reading nothing in this offset:
    its input was created again with fewer records and the source reads on from their
    end (Spark's ``failOnDataLoss=false``, ``SupportsPositionRanges.available_end``).

    Watermark alignment: a split whose last read record (``event_time_before(split,
    base)``) is past its subtask's ``max_allowed_watermark`` does not advance in this
    offset (it is paused, as a reader host pauses it) until the bound catches up.
    With ``event_time_bound`` no split is planned past the earliest next event time of
    the query's splits plus the bound's
    drift (``EventTimeBound.clamp``).

    ``max_splits`` (Spark's ``maxFilesPerTrigger``, with ``in_order``): at most that many
    splits are read in one batch, those started first, then in assignment order."""
    located = start.index()
    bases: dict[tuple[int, str], int] = {}
    firsts: dict[tuple[int, str], int | None] = {}
    readable: dict[tuple[int, str], tuple[OwnedSplit, int, int]] = {}
    claimed: set[str] = set()
    for s, view in views.items():
        if view.attempt is None:
            continue
        for owned in view.splits:
            claimed.add(owned.split_id)
            key = (s, owned.split_id)
            prev = located.get(owned.split_id)
            if prev is not None and prev.same_identity(s, view.attempt, owned.seq):
                base, first = prev.entry.pos, prev.entry.first
            else:  # a new identity: where it was assigned, or where this query already read to
                base = owned.assigned_pos if prev is None else max(owned.assigned_pos, prev.entry.pos)
                first = base
            if owned.releasing or _paused(owned, base, view.max_allowed_watermark, event_time_before):
                limit = base
            else:
                limit = available(owned, base)
                if limit < base:  # its input was created again, shorter: read on from its end
                    base = limit
                    if first is not None:
                        first = min(first, base)
            if owned.end is not None:
                limit = min(limit, owned.end)
            readable[key] = (owned, base, max(base, limit))
            bases[key], firsts[key] = base, first
    limits = {k: limit for k, (_, _, limit) in readable.items()}
    if event_time_bound is not None:
        limits = event_time_bound.clamp(readable)
    backlog = {k: max(0, limits[k] - readable[k][1]) for k in readable}
    if in_order:
        assigned_index = {(s, o.split_id): i for s, view in views.items() for i, o in enumerate(view.splits)}

        def started_then_assigned(key: tuple[int, str]) -> tuple[bool, int, int]:
            owned, base, _ = readable[key]
            return (base == owned.assigned_pos, owned.seq, assigned_index[key])

        if max_splits is not None:
            backlog = first_splits(backlog, started_then_assigned, max_splits)
        granted = allocate_in_order(backlog, started_then_assigned, max_rows)
    else:
        granted = allocate(backlog, max_rows)
    subtasks: dict[int, SubtaskOffset] = {}
    for s, view in sorted(views.items()):
        if view.attempt is None:
            kept = start.subtasks.get(s)
            if kept is not None:
                splits = {sid: e for sid, e in kept.splits.items() if sid not in claimed}
                subtasks[s] = SubtaskOffset(kept.attempt, kept.epoch, kept.applied_seq, kept.no_more_splits, splits)
                claimed.update(splits)
            continue
        entries = {
            owned.split_id: SplitEntry(
                split=owned.split,
                seq=owned.seq,
                pos=bases[(s, owned.split_id)] + granted.get((s, owned.split_id), 0),
                end=owned.end,
                first=firsts[(s, owned.split_id)],
            )
            for owned in view.splits
        }
        subtasks[s] = SubtaskOffset(view.attempt, view.epoch, view.applied_seq, view.no_more_splits, entries)
    done = set(reported_finished)
    parked = {
        sid: SplitEntry(where.entry.split, 0, where.entry.pos, where.entry.end)
        for sid, where in sorted(located.items())
        if sid not in claimed and sid not in done
    }
    candidate = SourceOffset(start.checkpoint_id, start.rows, subtasks, parked, start.source)
    if candidate.same_state(start):
        return start
    return SourceOffset(start.checkpoint_id + 1, start.rows + sum(granted.values()), subtasks, parked, start.source)


@dataclass(frozen=True)
class PlannedRange:
    split: WireSplit
    start: int
    end: int

    @property
    def rows(self) -> int:
        return self.end - self.start


def ranges_between(start: SourceOffset, end: SourceOffset) -> dict[int, list[PlannedRange]]:
    """What the batch ``(start, end]`` reads, per subtask: the advance of every split
    whose identity is the same in both offsets, and of every identity that appears in
    ``end`` from where it began (``SplitEntry.first``)."""
    located = start.index()
    out: dict[int, list[PlannedRange]] = {}
    for s in sorted(end.subtasks):
        sub = end.subtasks[s]
        for sid in sorted(sub.splits):
            entry = sub.splits[sid]
            prev = located.get(sid)
            if prev is not None and prev.same_identity(s, sub.attempt, entry.seq):
                begin: int | None = prev.entry.pos
            else:  # the identity appears in ``end``: it reads from where it began
                begin = entry.first
            if begin is not None and entry.pos > begin:
                out.setdefault(s, []).append(PlannedRange(entry.split, begin, entry.pos))
    return out
