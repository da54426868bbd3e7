"""A split is a range of primary keys [low, high); its position is the next key to read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluicegate.api import WireSplit


@dataclass
class KeyRangeSplit:
    split_id: str
    low: int
    high: int
    position: int

    @property
    def finished(self) -> bool:
        return self.position >= self.high


class KeyRangeSplitCodec:
    """The split, with its position, as JSON for the control topics and checkpoints."""

    def to_wire(self, split: KeyRangeSplit) -> WireSplit:
        return {"split_id": split.split_id, "low": split.low, "high": split.high, "position": split.position}

    def from_wire(self, data: Mapping[str, Any]) -> KeyRangeSplit:
        return KeyRangeSplit(data["split_id"], data["low"], data["high"], data["position"])
