"""Merge a source's two control topics into the coordinator's own order. Pure: no I/O.

Input is what a read of the topics returns: the inbox (``NS.S.coordinator``, one
partition) as ``(offset, value)`` pairs and the readers topic (``NS.S.readers``)
as ``(partition, offset, value)`` triples. Every value is decoded with the
protocol's codec; a value that does not decode is dead-letter material (the
coordinator skips it too): it is listed and counted, never a violation.

The order (docs/protocol.md, Audit) is the coordinator's: readers-topic records
in ``cseq`` order, each one after every inbox record whose offset is at most its
``inbox_offset``; inbox records after the last one referenced go at the end.
``cseq`` must already be strictly increasing inside each partition, unique
across partitions, and without gaps from 1 (the coordinator numbers every record
it sends, and a step's records are committed or aborted together, its successor
numbering on from the last committed one), and ``inbox_offset`` must never go
backwards in ``cseq`` order; a break of these is reported as a violation at the
offending record. A record that does not decode but shows its ``cseq`` fills
its place (it is counted as skipped, not as a gap).

Fallback (readers-topic records without ``cseq``, i.e. written by a protocol v1
coordinator): each partition keeps its own order and the partitions and the
inbox are merged by the sender's wall clock ``ts``. That order is only an
approximation: the coordinator's clock and the readers' clocks differ, records
of one millisecond tie, and v1 coordinators announce no releases, so checks
that depend on the order across subtasks, or on releases, may report false
violations or miss real ones there. The summary says which order was used.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from sluicegate.protocol import DecodeError, Direction, Envelope, decode
from sluicegate.protocol.topics import ControlTopics

InboxRecord = tuple[int, bytes | None]
"""One record of ``NS.S.coordinator``: (offset, value)."""
ReadersRecord = tuple[int, int, bytes | None]
"""One record of ``NS.S.readers``: (partition, offset, value)."""


def topic_names(source: str, namespace: str = "sluicegate") -> tuple[str, str]:
    """(inbox topic, readers topic) of ``source``, as the project's topic definitions name them."""
    topics = ControlTopics.for_source(source, ns=namespace)
    return topics.coordinator, topics.readers


class Ordering(enum.StrEnum):
    CSEQ = "cseq"
    """The coordinator's own order (protocol v2)."""
    TS = "ts-fallback"
    """Per-partition order merged by sender wall clock (protocol v1 records); approximate."""


class ViolationKind(enum.StrEnum):
    CSEQ_ORDER = "cseq-order"
    INBOX_OFFSET_BACKWARDS = "inbox-offset-backwards"
    WRONG_PARTITION = "wrong-partition"
    WRONG_SOURCE = "wrong-source"
    EPOCH_BACKWARDS = "epoch-backwards"
    ATTEMPT_NOT_INCREASING = "attempt-not-increasing"
    UNANNOUNCED_FENCE = "unannounced-fence"
    SPLIT_OWNED_TWICE = "split-owned-twice"
    FINISHED_SPLIT_ASSIGNED = "finished-split-assigned"
    SEQ_GAP = "seq-gap"
    SEQ_REUSED = "seq-reused"
    MISADDRESSED = "misaddressed"
    NO_LIVE_ATTEMPT = "no-live-attempt"
    SPLITS_AFTER_NO_MORE_SPLITS = "splits-after-no-more-splits"
    WATERMARK_DECREASED = "watermark-decreased"
    RELEASE_NOT_OWNED = "release-not-owned"
    RELEASE_IMPRECISE = "release-imprecise"
    RELEASE_INCONSISTENT = "release-inconsistent"
    CSEQ_GAP = "cseq-gap"
    INCARNATION_WITHOUT_REGISTRATION = "incarnation-without-registration"


@dataclass(frozen=True, slots=True)
class Location:
    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic} partition {self.partition} offset {self.offset}"

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class Violation:
    kind: ViolationKind
    location: Location
    message: str
    """One plain sentence."""
    position: int = -1
    """Index of the record in the replay order (-1: not placed)."""

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            **self.location.to_json(),
            "position": self.position,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """A value that does not decode: dead-letter material, skipped by the coordinator too."""

    location: Location
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {**self.location.to_json(), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    location: Location
    direction: Direction
    env: Envelope

    @property
    def from_reader(self) -> bool:
        """An inbox record (reader -> coordinator)."""
        return self.direction is Direction.TO_COORDINATOR


@dataclass
class Replay:
    records: list[ReplayRecord]
    """Decoded records of both topics, in the coordinator's order."""
    ordering: Ordering
    skipped: list[SkippedRecord] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    """Breaks of the order itself (cseq, inbox_offset), placed at their records."""
    notes: list[str] = field(default_factory=list)


def _decode_all(
    items: Iterable[tuple[Location, bytes | None]],
    direction: Direction,
    skipped: list[SkippedRecord],
    skipped_cseqs: set[int] | None = None,
) -> list[ReplayRecord]:
    """Decoded records; each undecodable one is added to ``skipped``, and its ``cseq``,
    if it shows one, to ``skipped_cseqs``."""
    out: list[ReplayRecord] = []
    for location, raw in items:
        try:
            env = decode(raw, direction)
        except DecodeError as exc:
            skipped.append(SkippedRecord(location, f"skipped: dead-letter material ({exc})"))
            if skipped_cseqs is not None and (cseq := numbered(raw).cseq) is not None:
                skipped_cseqs.add(cseq)
            continue
        out.append(ReplayRecord(location, direction, env))
    return out


@dataclass(frozen=True, slots=True)
class Numbered:
    """A readers-topic record's place in the coordinator's order, read leniently (from a
    value that may not decode: None where it shows none)."""

    cseq: int | None
    inbox_offset: int | None


def numbered(raw: bytes | None) -> Numbered:
    try:
        value = orjson.loads(raw or b"")
    except orjson.JSONDecodeError:
        return Numbered(None, None)
    if not isinstance(value, dict):
        return Numbered(None, None)
    return Numbered(_int_or_none(value.get("cseq")), _int_or_none(value.get("inbox_offset")))


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def replay(
    inbox: Sequence[InboxRecord],
    readers: Sequence[ReadersRecord],
    *,
    inbox_topic: str = "coordinator",
    readers_topic: str = "readers",
) -> Replay:
    skipped: list[SkippedRecord] = []
    inbox_records = _decode_all(
        ((Location(inbox_topic, 0, offset), raw) for offset, raw in sorted(inbox, key=lambda r: r[0])),
        Direction.TO_COORDINATOR,
        skipped,
    )
    skipped_cseqs: set[int] = set()
    readers_records = _decode_all(
        (
            (Location(readers_topic, partition, offset), raw)
            for partition, offset, raw in sorted(readers, key=lambda r: (r[0], r[1]))
        ),
        Direction.TO_READER,
        skipped,
        skipped_cseqs,
    )
    if all(r.env.cseq is not None for r in readers_records):
        result = _merge_by_cseq(inbox_records, readers_records)
        result.violations += _gaps(readers_records, skipped_cseqs)
    else:
        result = _merge_by_ts(inbox_records, readers_records)
    result.skipped = skipped
    positions = {id(r): i for i, r in enumerate(result.records)}
    by_location = {r.location: positions[id(r)] for r in result.records}
    result.violations = [
        Violation(v.kind, v.location, v.message, by_location.get(v.location, -1)) for v in result.violations
    ]
    return result


def _by_partition(records: list[ReplayRecord]) -> dict[int, list[ReplayRecord]]:
    out: dict[int, list[ReplayRecord]] = {}
    for r in records:
        out.setdefault(r.location.partition, []).append(r)
    return out


def _cseq(r: ReplayRecord) -> int:
    assert r.env.cseq is not None
    return r.env.cseq


def _gaps(readers: list[ReplayRecord], skipped_cseqs: set[int]) -> list[Violation]:
    """A violation at the first record after each run of missing cseqs (from 1 on)."""
    first_at: dict[int, ReplayRecord] = {}
    for r in readers:
        first_at.setdefault(_cseq(r), r)
    violations: list[Violation] = []
    expected = 1
    for cseq in sorted(first_at.keys() | skipped_cseqs):
        if cseq > expected and cseq in first_at:
            missing = str(expected) if cseq == expected + 1 else f"{expected} to {cseq - 1}"
            violations.append(
                Violation(
                    ViolationKind.CSEQ_GAP,
                    first_at[cseq].location,
                    f"no record carries cseq {missing} before this one (cseq {cseq}): the coordinator "
                    "numbers its records without gaps, so coordinator records are missing",
                )
            )
        expected = max(expected, cseq + 1)
    return violations


def _merge_by_cseq(inbox: list[ReplayRecord], readers: list[ReplayRecord]) -> Replay:
    violations: list[Violation] = []
    for partition, records in sorted(_by_partition(readers).items()):
        previous: ReplayRecord | None = None
        for r in records:
            if previous is not None and _cseq(r) <= _cseq(previous):
                violations.append(
                    Violation(
                        ViolationKind.CSEQ_ORDER,
                        r.location,
                        f"cseq {_cseq(r)} follows cseq {_cseq(previous)} "
                        f"(offset {previous.location.offset}) on partition {partition}: "
                        "cseq must strictly increase",
                    )
                )
            # compare with the highest so far, so one stray record is reported once
            if previous is None or _cseq(r) > _cseq(previous):
                previous = r
    ordered = sorted(readers, key=lambda r: (_cseq(r), r.location.partition, r.location.offset))
    for before, r in itertools.pairwise(ordered):
        if _cseq(r) == _cseq(before) and r.location.partition != before.location.partition:
            violations.append(
                Violation(
                    ViolationKind.CSEQ_ORDER,
                    r.location,
                    f"cseq {_cseq(r)} is also used at {before.location}: cseq must be unique across partitions",
                )
            )
    merged: list[ReplayRecord] = []
    i = 0
    highest: int | None = None
    highest_at: ReplayRecord | None = None
    for r in ordered:
        processed = r.env.inbox_offset
        if highest is not None and (processed is None or processed < highest):
            assert highest_at is not None
            violations.append(
                Violation(
                    ViolationKind.INBOX_OFFSET_BACKWARDS,
                    r.location,
                    f"inbox_offset {processed} is lower than {highest} of the earlier cseq "
                    f"{highest_at.env.cseq} ({highest_at.location}): "
                    "the coordinator cannot un-process its inbox",
                )
            )
        if processed is not None and (highest is None or processed > highest):
            highest, highest_at = processed, r
        while i < len(inbox) and processed is not None and inbox[i].location.offset <= processed:
            merged.append(inbox[i])
            i += 1
        merged.append(r)
    merged.extend(inbox[i:])
    return Replay(records=merged, ordering=Ordering.CSEQ, violations=violations)


def _merge_by_ts(inbox: list[ReplayRecord], readers: list[ReplayRecord]) -> Replay:
    def keyed(records: list[ReplayRecord], rank: int) -> Iterator[tuple[tuple[int, int, int, int], ReplayRecord]]:
        for r in records:
            yield (r.env.ts, rank, r.location.partition, r.location.offset), r

    streams = [keyed(inbox, 0)] + [keyed(rs, 1) for _, rs in sorted(_by_partition(readers).items())]
    merged = [r for _, r in heapq.merge(*streams, key=lambda item: item[0])]
    without = sum(1 for r in readers if r.env.cseq is None)
    note = (
        f"{without} of {len(readers)} readers-topic records carry no cseq "
        "(protocol v1 coordinator): "
        "replayed in per-partition order merged by sender wall clock (ts), which is approximate; "
        "checks across subtasks and of releases may be wrong for those records"
    )
    return Replay(records=merged, ordering=Ordering.TS, notes=[note])
