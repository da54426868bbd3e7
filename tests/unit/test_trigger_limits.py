"""minOffsetsPerTrigger / maxTriggerDelay and minPartitions as pure rules (trigger_limits.py)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from sluicegate.spark.trigger_limits import MinRowsPerTrigger, PlannedPart, cut_ranges


def test_a_batch_waits_for_min_rows_until_the_delay_has_passed_since_the_last_batch() -> None:
    gate = MinRowsPerTrigger(min_rows=100, max_delay_ms=1000, last_batch_ms=0)
    assert not gate.admits(40, now_ms=500)
    assert gate.admits(100, now_ms=600), "enough rows"
    assert not gate.admits(40, now_ms=1500), "the delay counts from the last batch (600)"
    assert gate.admits(40, now_ms=1600), "the delay has passed"
    assert gate.admits(0, now_ms=1601), "bookkeeping only is never held back"


def test_enough_partitions_are_left_alone() -> None:
    parts = [PlannedPart(0, (("a", 0, 1000),)), PlannedPart(1, (("b", 0, 10),))]
    assert cut_ranges(parts, 2) == parts and cut_ranges(parts, None) == parts


def test_a_large_range_is_cut_in_proportion_and_small_ones_stay_with_their_subtask() -> None:
    parts = [PlannedPart(0, (("big", 100, 900), ("small", 0, 10))), PlannedPart(1, (("mid", 0, 190),))]
    cut = cut_ranges(parts, 8)
    assert PlannedPart(0, (("small", 0, 10),)) in cut
    big = sorted(r for part in cut for r in part.ranges if r[0] == "big")
    assert len(big) == 6 and big[0][1] == 100 and big[-1][2] == 900
    assert all(b[2] == c[1] for b, c in itertools.pairwise(big)), "pieces touch"
    assert len(cut) >= 8


@given(
    st.lists(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=4), max_size=6),
    st.integers(1, 64),
    st.one_of(st.none(), st.integers(1, 3000)),
)
def test_cutting_keeps_every_position_exactly_once(
    subtasks: list[list[tuple[int, int]]], minimum: int, most: int | None
) -> None:
    parts = [
        PlannedPart(s, tuple((f"{s}-{i}", start, start + size) for i, (start, size) in enumerate(ranges)))
        for s, ranges in enumerate(subtasks)
    ]
    cut = cut_ranges(parts, minimum, most)

    def positions(ps: list[PlannedPart[str]]) -> list[tuple[int, str, int]]:
        return sorted((p.subtask, split, i) for p in ps for split, a, b in p.ranges for i in range(a, b))

    assert positions(cut) == positions(parts)
    assert all(a <= b for p in cut for _, a, b in p.ranges)
    if most is not None:
        assert all(b - a <= most for p in cut for _, a, b in p.ranges)


def test_max_rows_per_part_cuts_a_range_in_even_pieces_as_sparks_max_records_per_partition() -> None:
    parts = [PlannedPart(0, (("a", 0, 25), ("b", 100, 104))), PlannedPart(1, (("c", 0, 10),))]
    cut = cut_ranges(parts, None, 10)
    # 25 rows at most 10 a part: ceil(25 / 10) = 3 pieces of 8, 8 and 9; the others are small
    assert [p.ranges for p in cut] == [
        (("b", 100, 104),),
        (("a", 0, 8),),
        (("a", 8, 16),),
        (("a", 16, 25),),
        (("c", 0, 10),),
    ]
    assert cut_ranges(parts, None, None) == parts
