"""SplitAssignmentTracker: ownership per subtask, keyed by the AddSplits seq."""

from __future__ import annotations

import orjson
import pytest

from sluicegate.coordinator.tracker import SplitAlreadyOwnedError, SplitAssignmentTracker


def split(split_id: str, position: int = 0) -> dict[str, object]:
    return {"split_id": split_id, "position": position}


def ids(splits: list[dict[str, object]]) -> list[str]:
    return [str(s["split_id"]) for s in splits]


@pytest.fixture
def tracker() -> SplitAssignmentTracker:
    t = SplitAssignmentTracker()
    t.record_assignment(0, 1, [split("a"), split("b")])
    t.record_assignment(0, 2, [split("c")])
    t.record_assignment(1, 1, [split("d")])
    return t


def test_assignment_records_owner_and_counts(tracker: SplitAssignmentTracker) -> None:
    assert tracker.owner_of("a") == tracker.owner_of("c") == 0
    assert tracker.owner_of("d") == 1
    assert tracker.owner_of("zzz") is None
    assert tracker.owned_ids(0) == {"a", "b", "c"}
    assert ids(tracker.owned(1)) == ["d"]
    assert tracker.owned_count(0) == 3
    assert tracker.owned_count(7) == 0
    assert tracker.total_owned() == 4
    assert tracker.applied_seq(0) == 0
    assert tracker.uncheckpointed_count(0) == 3


@pytest.mark.parametrize("subtask", [0, 1, 2])
def test_double_assignment_is_refused(tracker: SplitAssignmentTracker, subtask: int) -> None:
    with pytest.raises(SplitAlreadyOwnedError, match="'a' is owned by subtask 0") as info:
        tracker.check_assignable(subtask, ["new", "a"])
    assert info.value.split_id == "a"
    with pytest.raises(SplitAlreadyOwnedError):
        tracker.record_assignment(subtask, 9, [split("a")])
    assert tracker.owner_of("a") == 0
    assert tracker.owner_of("new") is None


def test_an_assignment_is_recorded_whole_or_not_at_all(tracker: SplitAssignmentTracker) -> None:
    before = {s: tracker.snapshot_subtask(s) for s in (0, 1, 2)}
    with pytest.raises(
        SplitAlreadyOwnedError, match=r"'x' appears more than once in one assignment \(to subtasks \[1, 2\]\)"
    ):
        tracker.record_assignments({1: [(2, [split("w"), split("x")])], 2: [(1, [split("y")]), (2, [split("x")])]})
    with pytest.raises(SplitAlreadyOwnedError, match="'d' is owned by subtask 1"):  # owned already
        tracker.record_assignments({2: [(1, [split("y")])], 0: [(3, [split("z")]), (4, [split("d")])]})
    assert {s: tracker.snapshot_subtask(s) for s in (0, 1, 2)} == before
    assert [tracker.owner_of(sid) for sid in "wxyz"] == [None] * 4

    tracker.record_assignments({1: [(2, [split("w")]), (3, [split("x")])], 2: [(1, [split("y")])]})
    assert tracker.snapshot_subtask(1)["owned"] == [[1, split("d")], [2, split("w")], [3, split("x")]]
    assert [tracker.owner_of(sid) for sid in "wxy"] == [1, 1, 2]


def test_check_assignable_accepts_free_splits(tracker: SplitAssignmentTracker) -> None:
    tracker.check_assignable(1, ["x", "y"])  # does not raise, records nothing
    assert tracker.total_owned() == 4


def test_checkpoint_updates_positions_and_applied_seq(tracker: SplitAssignmentTracker) -> None:
    outcome = tracker.on_checkpoint(0, 1, [split("a", 5), split("b", 7)])
    assert outcome.missing == [] and outcome.unknown == []
    assert tracker.applied_seq(0) == 1
    assert {s["split_id"]: s["position"] for s in tracker.owned(0)} == {"a": 5, "b": 7, "c": 0}
    assert tracker.uncheckpointed_count(0) == 1


def test_checkpoint_reports_missing_and_unknown(tracker: SplitAssignmentTracker) -> None:
    outcome = tracker.on_checkpoint(0, 2, [split("a", 5), split("d", 3)])
    assert sorted(outcome.missing) == ["b", "c"]
    assert outcome.unknown == ["d"]
    # unknown splits are ignored: d stays with subtask 1, unmoved
    assert tracker.owner_of("d") == 1
    assert tracker.owned(1) == [split("d")]


def test_applied_seq_never_goes_back(tracker: SplitAssignmentTracker) -> None:
    tracker.on_checkpoint(0, 2, [split("a"), split("b"), split("c")])
    tracker.on_checkpoint(0, 1, [split("a"), split("b"), split("c")])
    assert tracker.applied_seq(0) == 2
    assert tracker.take_uncheckpointed(0) == []


def test_take_uncheckpointed_returns_exactly_seq_above_applied() -> None:
    t = SplitAssignmentTracker()
    for seq in range(1, 6):
        t.record_assignment(0, seq, [split(f"s{seq}a"), split(f"s{seq}b")])
    t.on_checkpoint(0, 3, [split(f"s{q}{x}", 10 * q) for q in (1, 2, 3) for x in "ab"])
    released = t.take_uncheckpointed(0)
    assert sorted(ids(released)) == ["s4a", "s4b", "s5a", "s5b"]
    assert t.owned_ids(0) == {"s1a", "s1b", "s2a", "s2b", "s3a", "s3b"}
    assert all(t.owner_of(sid) is None for sid in ids(released))
    # the checkpointed ones keep the checkpoint's positions
    assert {s["split_id"]: s["position"] for s in t.owned(0)}["s2a"] == 20
    assert t.take_uncheckpointed(0) == []


def test_take_uncheckpointed_without_any_checkpoint_takes_everything(
    tracker: SplitAssignmentTracker,
) -> None:
    assert sorted(ids(tracker.take_uncheckpointed(0))) == ["a", "b", "c"]
    assert tracker.owned_count(0) == 0
    assert tracker.owner_of("d") == 1


def test_taking_every_split_forgets_its_owner_and_release_requests(tracker: SplitAssignmentTracker) -> None:
    tracker.request_release(0, 3, ["b"])
    assert ids(tracker.take_uncheckpointed(0)) == ["a", "b", "c"]  # nothing checkpointed: all, in order
    assert tracker.releasing_ids(0) == set()
    assert [tracker.owner_of(sid) for sid in "abcd"] == [None, None, None, 1]
    assert tracker.snapshot_subtask(0) == {"applied_seq": 0, "owned": []}
    tracker.record_assignment(0, 3, [split("b")])  # free to be assigned again, with its new seq
    tracker.on_checkpoint(0, 3, [split("b", 2)])
    assert tracker.take_uncheckpointed(0) == []


def test_finish_drops_owned_and_reports_the_rest(tracker: SplitAssignmentTracker) -> None:
    assert tracker.finish(0, ["a", "d", "nope"]) == ["d", "nope"]
    assert tracker.owned_ids(0) == {"b", "c"}
    assert tracker.owner_of("a") is None
    assert tracker.owner_of("d") == 1  # another subtask's split is untouched
    assert tracker.total_owned() == 3
    # a finished split can be assigned again (e.g. by a buggy enumerator) without error
    tracker.record_assignment(1, 2, [split("a")])
    assert tracker.owner_of("a") == 1


def test_take_all_with_positions(tracker: SplitAssignmentTracker) -> None:
    tracker.on_checkpoint(0, 1, [split("a", 4), split("b", 6)])
    released = tracker.take_all(0, {"b": split("b", 9), "zzz": split("zzz", 1)})
    by_id = {s["split_id"]: s["position"] for s in released}
    assert by_id == {"a": 4, "b": 9, "c": 0}  # given position wins, else the checkpointed one
    assert tracker.owned_count(0) == 0
    assert tracker.owner_of("zzz") is None
    assert tracker.total_owned() == 1
    assert tracker.take_all(0) == []


def test_take_some(tracker: SplitAssignmentTracker) -> None:
    assert ids(tracker.take(0, ["c", "d", "missing"])) == ["c"]
    assert tracker.owner_of("d") == 1
    assert tracker.owned_ids(0) == {"a", "b"}


def test_snapshot_restore_equality(tracker: SplitAssignmentTracker) -> None:
    tracker.on_checkpoint(0, 1, [split("a", 3), split("b", 4)])
    tracker.on_checkpoint(3, 0, [])
    snap = tracker.snapshot()
    restored = SplitAssignmentTracker.restore(orjson.loads(orjson.dumps(snap)))  # as stored
    assert restored.snapshot() == snap
    for s in (0, 1, 3):
        assert restored.owned(s) == tracker.owned(s)
        assert restored.applied_seq(s) == tracker.applied_seq(s)
    assert restored.owner_of("c") == 0
    # behaviour carries over too: the seq of each assignment survives
    assert ids(restored.take_uncheckpointed(0)) == ["c"]


def test_restore_of_an_empty_tracker() -> None:
    t = SplitAssignmentTracker.restore(SplitAssignmentTracker().snapshot())
    assert t.total_owned() == 0
    assert t.snapshot() == SplitAssignmentTracker().snapshot()
    assert t.owned(0) == [] and t.applied_seq(0) == 0


def test_a_release_request_records_owned_splits_once_and_survives_a_snapshot(tracker: SplitAssignmentTracker) -> None:
    first = tracker.request_release(0, 3, ["a", "d", "zz"])
    assert (first.requested, first.not_owned) == (["a"], ["d", "zz"])
    assert tracker.request_release(0, 4, ["a", "b"]).requested == ["b"]  # a: asked already
    part = orjson.loads(orjson.dumps(tracker.snapshot_subtask(0)))
    assert part["releasing"] == [["a", 3], ["b", 4]]
    assert "releasing" not in tracker.snapshot_subtask(1), "absent when empty: parts look as before v3"
    restored = SplitAssignmentTracker.restore(orjson.loads(orjson.dumps(tracker.snapshot())))
    assert restored.releasing_ids(0) == {"a", "b"} and restored.owner_of("a") == 0


def test_returned_splits_leave_at_the_returned_positions(tracker: SplitAssignmentTracker) -> None:
    tracker.request_release(0, 3, ["a"])
    outcome = tracker.take_returned(0, [split("a", 7), split("c", 2), split("d")])
    assert outcome.taken == [split("a", 7), split("c", 2)]
    assert (outcome.unrequested, outcome.not_owned) == (["c"], ["d"])
    assert tracker.owned_ids(0) == {"b"} and tracker.releasing_ids(0) == set() and tracker.owner_of("d") == 1


def test_a_checkpoint_covering_a_request_that_keeps_the_split_refuses_it(tracker: SplitAssignmentTracker) -> None:
    tracker.request_release(0, 3, ["a", "b"])
    tracker.request_release(0, 4, ["c"])
    assert tracker.refused_releases(0, 2) == [], "not applied yet"
    tracker.take_returned(0, [split("a", 7)])
    assert tracker.refused_releases(0, 3) == ["b"], "given back: a; still owned: b"
    assert tracker.releasing_ids(0) == {"c"}
    tracker.take(0, ["c"])  # finished or failed: the request goes with it
    assert tracker.releasing_ids(0) == set() and tracker.drop_releases(0) == []
