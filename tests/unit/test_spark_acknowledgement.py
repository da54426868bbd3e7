"""What acknowledging a subtask's planned offset says about its splits (spark/acknowledgement.py)."""

from __future__ import annotations

from sluicegate.spark.acknowledgement import PlannedPositions, acknowledged_splits
from sluicegate.spark.offsets import SplitEntry, SubtaskOffset


def entry(pos: int, end: int | None) -> SplitEntry:
    return SplitEntry(split={"split_id": "x"}, seq=1, pos=pos, end=end)


def test_splits_planned_to_their_end_are_finished_if_owned_and_the_others_stay_open() -> None:
    offset = SubtaskOffset(
        attempt=1,
        splits={"b": entry(10, 10), "a": entry(12, 10), "c": entry(3, 10), "d": entry(7, None), "gone": entry(5, 5)},
    )
    splits = acknowledged_splits(offset, owned={"a", "b", "c", "d"})
    assert splits.finished == ["a", "b"], "in id order; a split no longer owned is not reported"
    assert sorted(splits.unfinished) == ["c", "d"]
    assert splits.unfinished["c"].pos == 3


def test_a_split_is_active_when_its_planned_position_moved() -> None:
    planned = PlannedPositions()
    assert planned.moved("a", 0), "a split never seen moved"
    assert not planned.moved("a", 0)
    assert planned.moved("a", 5)
    planned.forget(["a"])
    assert planned.moved("a", 5), "forgotten: seen anew"
