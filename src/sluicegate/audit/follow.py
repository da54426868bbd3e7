"""``AuditFollower``: the audit as a monitor, checking records as they arrive. No I/O.

The batch audit replays the whole history on every run. The follower keeps one
``OwnershipModel`` alive and applies each record once, in the coordinator's order
(follow_order.py), so a check costs one record, not a replay. What it returns from
``step`` are the violations that record showed, each with the record; counters for
the metrics endpoint are kept as it goes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from sluicegate.audit.follow_order import Duplicate, FollowOrder, Gap, Ready
from sluicegate.audit.invariants import OwnershipModel
from sluicegate.audit.replay import Location, ReplayRecord, Violation, ViolationKind, numbered
from sluicegate.audit.split_events import SplitEvents
from sluicegate.protocol import DecodeError, Direction, decode
from sluicegate.protocol.state_records import MANIFEST_MAGIC, state_key

GAP_TIMEOUT_MS = 10_000
"""How long a missing cseq may stay missing while later ones wait: a committed step's
markers take milliseconds, so this much means records are missing (or forged ahead)."""


@dataclass(frozen=True)
class Finding:
    """A violation and the record that showed it (for a gap: the first record after it)."""

    violation: Violation
    record: ReplayRecord


class AuditFollower:
    def __init__(
        self,
        source: str,
        max_parallelism: int | None,
        inbox_topic: str,
        readers_topic: str,
        clock: Callable[[], float],
        gap_timeout_ms: int = GAP_TIMEOUT_MS,
        split_id: str | None = None,
    ) -> None:
        """``split_id``: also describe each applied record that names this split (``events``)."""
        self.model = OwnershipModel(source=source, max_parallelism=max_parallelism)
        self.order = FollowOrder(gap_timeout_ms, clock)
        self.inbox_topic, self.readers_topic = inbox_topic, readers_topic
        self._meta_key = state_key(source, "meta")
        self._split = None if split_id is None else SplitEvents(split_id)
        self.events: list[tuple[ReplayRecord, str]] = []
        """What applied records did to ``split_id``, until the caller takes them."""
        self.reader_events: list[str] = []
        """Readers that joined, left or failed, in the words of a ``--follow`` line, until
        the caller takes them."""
        self.applied = 0
        self.received: Counter[str] = Counter()
        """Records received, by topic."""
        self.undecodable: Counter[str] = Counter()
        self.violations: Counter[str] = Counter()
        """Violations found, by kind."""

    def inbox(self, offset: int, raw: bytes | None) -> None:
        self.received[self.inbox_topic] += 1
        record = self._decode(Location(self.inbox_topic, 0, offset), raw, Direction.TO_COORDINATOR)
        if record is not None:
            self.order.add_inbox(record)

    def inbox_read_to(self, end: int) -> None:
        self.order.inbox_read_to(end)

    def readers(self, partition: int, offset: int, raw: bytes | None) -> None:
        self.received[self.readers_topic] += 1
        record = self._decode(Location(self.readers_topic, partition, offset), raw, Direction.TO_READER)
        if record is not None:
            self.order.add_readers(record)
        elif (cseq := numbered(raw).cseq) is not None:
            self.order.skip(cseq)

    def coordinator_state(self, key: bytes | None, value: bytes | None) -> None:
        """A record of the coordinator's state topic: its ``meta`` part says how far the
        coordinator had got at that commit (the other parts are not needed here)."""
        if key != self._meta_key or not value or value.startswith(MANIFEST_MAGIC):
            return
        try:
            meta = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        cseq, inbox_offset = meta.get("cseq"), meta.get("inbox_offset")
        if isinstance(cseq, int) and isinstance(inbox_offset, int):
            self.order.progress(cseq, inbox_offset)

    def step(self) -> list[Finding]:
        """Apply what is ready; the violations it showed, in order."""
        found: list[Finding] = []
        for item in self.order.ready():
            found += self._apply(item)
        for finding in found:
            self.violations[finding.violation.kind.value] += 1
        return found

    def _apply(self, item: Ready) -> list[Finding]:
        if isinstance(item, Gap):
            missing = str(item.first) if item.first == item.last else f"{item.first} to {item.last}"
            message = (
                f"cseq {missing} did not come while later records waited: coordinator records are missing "
                f"before this one (cseq {item.before.env.cseq})"
            )
            return [
                Finding(Violation(ViolationKind.CSEQ_GAP, item.before.location, message, self.applied), item.before)
            ]
        if isinstance(item, Duplicate):
            message = f"cseq {item.cseq} was already used: cseq must be unique (this record is not applied)"
            return [
                Finding(Violation(ViolationKind.CSEQ_ORDER, item.record.location, message, self.applied), item.record)
            ]
        before = len(self.model.violations)
        subtask = item.env.subtask
        was = self._reader_state(subtask)
        self.model.apply(item, self.applied)
        self.applied += 1
        if (now := self._reader_state(subtask)) != was:
            self.reader_events.append(reader_event(subtask, was, now, self.model.subtasks[subtask].ended_by))
        if self._split is not None and (event := self._split.describe(item)) is not None:
            self.events.append((item, event))
        return [Finding(v, item) for v in self.model.violations[before:]]

    def _reader_state(self, subtask: int) -> tuple[bool, int | None]:
        slot = self.model.subtasks.get(subtask)
        return (False, None) if slot is None else (slot.live, slot.attempt)

    def _decode(self, location: Location, raw: bytes | None, direction: Direction) -> ReplayRecord | None:
        try:
            return ReplayRecord(location, direction, decode(raw, direction))
        except DecodeError:
            self.undecodable[location.topic] += 1
            return None

    # -- what the metrics show ------------------------------------------------------------

    def splits_by_state(self) -> dict[str, int]:
        return {
            "owned": len(self.model.owner),
            "finished": len(self.model.finished),
            "unowned": len(self.model.unowned_since),
        }

    def oldest_unowned_ms(self) -> int | None:
        """When the split unowned longest was released (its record's ``ts``), if any is."""
        return next(iter(self.model.unowned_since.values()), None)

    def readers_live(self) -> int:
        return sum(1 for slot in self.model.subtasks.values() if slot.live)


def reader_event(subtask: int, was: tuple[bool, int | None], now: tuple[bool, int | None], ended_by: str | None) -> str:
    """What a change of a subtask's (live, attempt) says: a reader joined, left or failed."""
    (was_live, was_attempt), (live, attempt) = was, now
    if live and was_live:
        return f"subtask {subtask}: attempt {attempt} took over from attempt {was_attempt}"
    if live:
        return f"subtask {subtask}: a reader joined (attempt {attempt})"
    if ended_by == "left":
        return f"subtask {subtask}: its reader left (attempt {attempt})"
    return f"subtask {subtask}: its reader failed (attempt {attempt}, {ended_by or 'gone'})"


@dataclass(frozen=True)
class FollowSnapshot:
    """What the metrics endpoint serves, replaced whole after every step (the scrape
    thread never reads the follower's own, changing, state)."""

    applied: int = 0
    received: dict[str, int] = field(default_factory=dict)
    undecodable: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)
    readers_live: int = 0
    waiting: int = 0
    oldest_unowned_ms: int | None = None

    @classmethod
    def of(cls, follower: AuditFollower, lag: dict[str, int]) -> FollowSnapshot:
        return cls(
            applied=follower.applied,
            received=dict(follower.received),
            undecodable=dict(follower.undecodable),
            violations=dict(follower.violations),
            lag=dict(lag),
            splits=follower.splits_by_state(),
            readers_live=follower.readers_live(),
            waiting=follower.order.waiting,
            oldest_unowned_ms=follower.oldest_unowned_ms(),
        )
