"""The ``sequence`` connector's split: an integer range read in order, and its wire form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluicegate.api import (
    WireSplit,
)

UNBOUNDED_STRIDE = 2**40
"""Unbounded split k starts at k * UNBOUNDED_STRIDE, so values never collide."""
UNBOUNDED_READ_AHEAD = 1_000_000
"""Position ranges: how far past its position an unbounded split without a rate can be read."""


@dataclass(slots=True)
class SequenceSplit:
    split_id: str
    start: int
    end: int | None
    """Exclusive; None for an unbounded split."""
    position: int
    """The next value to read."""

    @property
    def finished(self) -> bool:
        return self.end is not None and self.position >= self.end


class SequenceSplitCodec:
    def to_wire(self, split: SequenceSplit) -> WireSplit:
        return {"split_id": split.split_id, "start": split.start, "end": split.end, "position": split.position}

    def from_wire(self, data: Mapping[str, Any]) -> SequenceSplit:
        return SequenceSplit(data["split_id"], data["start"], data["end"], data["position"])
