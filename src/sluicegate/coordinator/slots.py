"""A reader subtask slot across its attempts, and which slot a SlotRequest gets.

The slots are part of the coordinator core's state (``slot/<subtask>`` parts). A
slot is handed out as a consumer group hands out member ids (docs/protocol.md,
"Slots and duplicates"): ``slot_for_request`` is that choice, pure.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluicegate.api.split import WireSplit
from sluicegate.protocol.pieces import Assembly


class SlotState(enum.Enum):
    NEVER_REGISTERED = "never-registered"
    LIVE = "live"
    FAILED = "failed"  # awaiting its next attempt; may still own checkpointed splits
    LEFT = "left"


@dataclass
class SubtaskSlot:
    """One reader subtask across its attempts."""

    subtask: int
    state: SlotState = SlotState.NEVER_REGISTERED
    attempt: int = 0
    """The current attempt if LIVE, else the last one (0: none yet)."""
    incarnation: str = ""
    location: str = ""
    last_seen_ms: int = 0
    """Not persisted: a successor gives every live attempt a fresh session window."""
    failed_at_ms: int | None = None
    seq: int = 0
    """Last AddSplits/NoMoreSplits/ReleaseRequest seq sent to this subtask."""
    checkpoint_id: int | None = None
    no_more_splits: bool = False
    reported_splits: list[WireSplit] = field(default_factory=list)
    name: str | None = None
    """The member name of the last SlotRequest granted this slot (Kafka's group.instance.id)."""
    reserved_for: str | None = None
    """The incarnation of a SlotRequest granted this slot, until it registers or ``reserved_until_ms``."""
    reserved_until_ms: int = 0
    pieces: Assembly = field(default_factory=Assembly)
    """The subtask's records still arriving in pieces (v6): committed with the slot, so a
    successor goes on assembling them."""
    deferred_registrations: list[dict[str, Any]] = field(default_factory=list)
    """Registrations (their bodies' JSON) read while the subtask's transactional id was
    being fenced, in the order read: answered once the fence is done."""

    @property
    def live(self) -> bool:
        return self.state is SlotState.LIVE

    def reserved(self, now_ms: int) -> bool:
        return self.reserved_for is not None and now_ms < self.reserved_until_ms

    def to_json(self) -> dict[str, Any]:
        data = {
            "state": self.state.value,
            "attempt": self.attempt,
            "incarnation": self.incarnation,
            "location": self.location,
            "failed_at_ms": self.failed_at_ms,
            "seq": self.seq,
            "checkpoint_id": self.checkpoint_id,
            "no_more_splits": self.no_more_splits,
            "reported_splits": self.reported_splits,
            "name": self.name,
            "reserved_for": self.reserved_for,
            "reserved_until_ms": self.reserved_until_ms,
            "pieces": self.pieces.to_json(),
        }
        if self.deferred_registrations:  # rare: not a key in every slot of a large source
            data["deferred_registrations"] = self.deferred_registrations
        return data

    @classmethod
    def from_json(cls, subtask: int, data: Mapping[str, Any]) -> SubtaskSlot:
        return cls(
            subtask=subtask,
            state=SlotState(data["state"]),
            attempt=data["attempt"],
            incarnation=data["incarnation"],
            location=data["location"],
            failed_at_ms=data["failed_at_ms"],
            seq=data["seq"],
            checkpoint_id=data["checkpoint_id"],
            no_more_splits=data["no_more_splits"],
            reported_splits=list(data["reported_splits"]),
            name=data.get("name"),
            reserved_for=data.get("reserved_for"),
            reserved_until_ms=data.get("reserved_until_ms", 0),
            pieces=Assembly(data.get("pieces")),
            deferred_registrations=list(data.get("deferred_registrations", [])),
        )


def slot_for_request(
    slots: Sequence[SubtaskSlot],
    incarnation: str,
    name: str | None,
    now_ms: int,
    departed: Callable[[SubtaskSlot], bool],
) -> SubtaskSlot | None:
    """The slot for a SlotRequest, or None when none is free:

    1. the slot already held for this request (a request sent again gets the same one);
    2. the slot last granted to ``name``, even if an attempt of it is live: that is the
       member restarting (Kafka's static membership);
    3. the first slot never registered or left;
    4. the first slot whose reader failed and ``departed`` (its splits went back to the
       enumerator). A slot whose reader failed recently stays for that reader.
    """
    held = next((s for s in slots if s.reserved_for == incarnation and s.reserved(now_ms)), None)
    if held is not None:
        return held
    if name is not None:
        named = next((s for s in slots if s.name == name and not s.reserved(now_ms)), None)
        if named is not None:
            return named
    first_departed: SubtaskSlot | None = None
    for slot in slots:
        if slot.live or slot.reserved(now_ms):
            continue
        if slot.state in (SlotState.NEVER_REGISTERED, SlotState.LEFT):
            return slot
        if first_departed is None and departed(slot):
            first_departed = slot
    return first_departed
