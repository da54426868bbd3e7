"""What acknowledging a subtask's planned offset says about its splits, as pure data.

Spark's offset log holds, per subtask, every split with its planned position. When the
driver acknowledges an offset to the coordinator (driver.py), a split planned to its end
is finished (reported in ``SplitsFinished``, if the attempt still owns it) and the others
are checkpointed at their planned positions. For split idleness, a split is active only
when its planned position moved since the last acknowledgement: a position re-planned
where it was means no new data.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sluicegate.spark.offsets import SplitEntry, SubtaskOffset


@dataclass(frozen=True)
class AcknowledgedSplits:
    finished: list[str]
    """Splits planned to their end that the attempt owns, in id order."""
    unfinished: dict[str, SplitEntry]
    """Splits still open, at their planned positions."""


def acknowledged_splits(offset: SubtaskOffset, owned: Collection[str]) -> AcknowledgedSplits:
    return AcknowledgedSplits(
        finished=[sid for sid, e in sorted(offset.splits.items()) if e.finished and sid in owned],
        unfinished={sid: e for sid, e in offset.splits.items() if not e.finished},
    )


class PlannedPositions:
    """Each open split's position at its last acknowledgement."""

    def __init__(self) -> None:
        self._positions: dict[str, int] = {}

    def moved(self, split_id: str, position: int) -> bool:
        """Whether ``position`` differs from the split's last one (a split never seen
        moved); remembers it."""
        moved = self._positions.get(split_id) != position
        self._positions[split_id] = position
        return moved

    def forget(self, split_ids: Iterable[str]) -> None:
        for split_id in split_ids:
            self._positions.pop(split_id, None)
