"""The Spark source's offsets (pure planning) and the sequence connector's position ranges."""

from __future__ import annotations

import json

import pytest

from sluicegate.spark.job import WINDOW_MS, WindowRow, expected_sequence_windows
from sluicegate.spark.offsets import (
    OFFSET_VERSION,
    EventTimeBound,
    OffsetError,
    OwnedSplit,
    SourceOffset,
    SplitEntry,
    SubtaskOffset,
    SubtaskView,
    allocate,
    allocate_in_order,
    plan_next,
    ranges_between,
)
from sluicegate_connectors.sequence import SequenceOptions, SequenceReader, SequenceSource, SequenceSplit


def wire(k: int, size: int = 100, position: int | None = None) -> dict[str, object]:
    start = k * size
    return {
        "split_id": f"seq-{k:05d}",
        "start": start,
        "end": start + size,
        "position": start if position is None else position,
    }


def owned(k: int, seq: int, size: int = 100, position: int | None = None) -> OwnedSplit:
    w = wire(k, size, position)
    return OwnedSplit(str(w["split_id"]), w, seq, int(w["position"]), int(w["end"]))  # type: ignore[call-overload]


def all_available(split: OwnedSplit, base: int) -> int:
    assert split.end is not None
    return split.end


def ten_more(split: OwnedSplit, base: int) -> int:
    return base + 10


def read(start: SourceOffset, end: SourceOffset) -> dict[str, tuple[int, int]]:
    """What the batch ``(start, end]`` reads, by split: (from, to)."""
    return {r.split["split_id"]: (r.start, r.end) for rs in ranges_between(start, end).values() for r in rs}


def view(attempt: int | None, *splits: OwnedSplit, applied_seq: int = 1, no_more: bool = False) -> SubtaskView:
    return SubtaskView(attempt, 1, applied_seq, no_more, splits)


# -- JSON ---------------------------------------------------------------------------


def test_offset_json_round_trip_is_canonical() -> None:
    entries = {
        "seq-00001": SplitEntry(wire(1), 2, 150, 200),
        "seq-00000": SplitEntry(wire(0), 1, 0, 100),
    }
    offset = SourceOffset(
        7,
        rows=150,
        subtasks={1: SubtaskOffset(3, 2, 2, False, entries), 0: SubtaskOffset(None)},
        parked={"seq-00009": SplitEntry(wire(9), 0, 950, 1000)},
    )
    data = offset.to_json()
    assert list(data["subtasks"]) == ["0", "1"]
    assert list(data["subtasks"]["1"]["splits"]) == ["seq-00000", "seq-00001"]
    again = SourceOffset.from_json(json.loads(json.dumps(data)))
    assert again == offset
    assert json.dumps(again.to_json()) == json.dumps(data)  # Spark compares offsets as JSON text


def test_offset_json_round_trips_source_and_first() -> None:
    entries = {
        "seq-00000": SplitEntry(wire(0), 1, 60, 100, first=40),
        "seq-00001": SplitEntry(wire(1), 1, 150, 200),  # from an older offset: no first
    }
    offset = SourceOffset(7, 110, {0: SubtaskOffset(2, 1, 1, False, entries)}, source="orders-query-7")
    data = offset.to_json()
    assert data["source"] == "orders-query-7"
    assert data["subtasks"]["0"]["splits"]["seq-00000"]["first"] == 40
    assert "first" not in data["subtasks"]["0"]["splits"]["seq-00001"]  # written only when known
    again = SourceOffset.from_json(json.loads(json.dumps(data)))
    assert again == offset
    assert again.source == "orders-query-7"
    assert again.subtasks[0].splits["seq-00000"].first == 40 and again.subtasks[0].splits["seq-00001"].first is None
    assert json.dumps(again.to_json()) == json.dumps(data)
    # without a source, the key is not written (offsets as earlier versions wrote them)
    assert (
        "source" not in SourceOffset(7).to_json() and SourceOffset.from_json(SourceOffset(7).to_json()).source is None
    )
    # plan_next carries the source from the start offset
    end = plan_next(SourceOffset(1, source="orders-query-7"), {0: view(1, owned(0, 1))}, None, ten_more)
    assert end.checkpoint_id == 2 and end.source == "orders-query-7"
    assert SourceOffset.from_json(end.to_json()).source == "orders-query-7"


def test_an_offset_written_without_first_reads_nothing_for_an_identity_new_in_it() -> None:
    # An old checkpoint (before SplitEntry.first): the offset in which an identity appeared
    # read nothing from it, its position there being where it would start. seq-00000 was
    # read to 60 by subtask 0 attempt 1 and given to subtask 1 attempt 2 at 40; seq-00001
    # is new at its start.
    def entry(k: int, seq: int, pos: int, position: int | None = None) -> dict[str, object]:
        return {"split": wire(k, position=position), "seq": seq, "pos": pos, "end": (k + 1) * 100}

    def subtask(attempt: int, applied_seq: int, splits: dict[str, object]) -> dict[str, object]:
        return {"attempt": attempt, "epoch": 1, "applied_seq": applied_seq, "no_more_splits": False, "splits": splits}

    start = {
        "v": OFFSET_VERSION,
        "checkpoint_id": 5,
        "rows": 60,
        "subtasks": {"0": subtask(1, 1, {"seq-00000": entry(0, 1, 60)})},
        "parked": {},
    }
    end = {
        "v": OFFSET_VERSION,
        "checkpoint_id": 6,
        "rows": 60,
        "subtasks": {
            "0": subtask(2, 1, {}),
            "1": subtask(2, 3, {"seq-00000": entry(0, 3, 60, position=40), "seq-00001": entry(1, 3, 100)}),
        },
        "parked": {},
    }
    old_start, old_end = SourceOffset.from_json(start), SourceOffset.from_json(end)
    assert {sid: e.first for sid, e in old_end.subtasks[1].splits.items()} == {"seq-00000": None, "seq-00001": None}
    assert ranges_between(old_start, old_end) == {}  # not [40, 60) again, nor anything of seq-00001
    assert json.dumps(old_end.to_json()) == json.dumps(end)  # written back as it was (Spark compares the text)
    # the identities advance from the next offset on, from their positions there
    views = {0: view(2), 1: view(2, owned(0, 3, position=40), owned(1, 3), applied_seq=3)}
    nxt = plan_next(old_end, views, None, ten_more)
    assert read(old_end, nxt) == {"seq-00000": (60, 70), "seq-00001": (100, 110)}


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"v": 99, "checkpoint_id": 1, "rows": 0, "subtasks": {}},
        {"v": 1, "checkpoint_id": "1", "rows": 0, "subtasks": {}},
        {"v": 1, "checkpoint_id": 1, "rows": 0},
        {"v": 1, "checkpoint_id": 1, "rows": 0, "subtasks": {"x": {"splits": {}}}},
    ],
)
def test_foreign_offsets_are_refused(bad: object) -> None:
    with pytest.raises(OffsetError):
        SourceOffset.from_json(bad)


# -- admission control --------------------------------------------------------------


def test_allocate_gives_everything_when_it_fits_or_without_limit() -> None:
    assert allocate({"a": 5, "b": 0, "c": 3}, None) == {"a": 5, "c": 3}
    assert allocate({"a": 5, "c": 3}, 8) == {"a": 5, "c": 3}


def test_allocate_shares_in_proportion_to_backlog() -> None:
    shares = allocate({"a": 300, "b": 100}, 100)
    assert shares == {"a": 75, "b": 25}


def test_allocate_rounds_as_sparks_kafka_source_not_starving_small_backlogs() -> None:
    # KafkaMicroBatchSourceSuite's case: 101/11/1 records and a limit of 10 give 8/1/1
    # (10 * 101/113 = 8.9 -> 8; 0.97 and 0.09 are under one record -> 1 each)
    assert allocate({"p0": 101, "p1": 11, "p2": 1}, 10) == {"p0": 8, "p1": 1, "p2": 1}
    # shares round down, so a budget may be left over: 6.67 each -> 6
    assert allocate({"a": 100, "b": 100, "c": 100}, 20) == {"a": 6, "b": 6, "c": 6}
    # a share is never more than its backlog
    assert allocate({"a": 1, "b": 1, "c": 1}, 2) == {"a": 1, "b": 1, "c": 1}


def test_allocate_with_a_zero_budget_gives_nothing() -> None:
    assert allocate({"a": 10}, 0) == {}


# -- planning -----------------------------------------------------------------------


def test_a_new_identity_reads_from_where_it_was_assigned_in_the_offset_where_it_appears() -> None:
    start = SourceOffset(100)
    end = plan_next(start, {0: view(1, owned(0, 1), owned(1, 1, position=130))}, None, ten_more)
    assert end.checkpoint_id == 101 and end.rows == 20
    assert {sid: (e.first, e.pos) for sid, e in end.subtasks[0].splits.items()} == {
        "seq-00000": (0, 10),
        "seq-00001": (130, 140),
    }
    assert read(start, end) == {"seq-00000": (0, 10), "seq-00001": (130, 140)}  # [assigned, available)


def test_the_same_identity_advances_to_what_is_available() -> None:
    views = {0: view(1, owned(0, 1)), 1: view(4, owned(1, 2), applied_seq=2)}
    first = plan_next(SourceOffset(1), views, None, ten_more)  # 10 of each are available at first
    second = plan_next(first, views, None, all_available)
    assert second.checkpoint_id == 3 and second.rows == 20 + 180
    planned = ranges_between(first, second)
    assert [(r.split["split_id"], r.start, r.end) for r in planned[0]] == [("seq-00000", 10, 100)]
    assert [(r.split["split_id"], r.start, r.end) for r in planned[1]] == [("seq-00001", 110, 200)]
    assert {sid: e.first for sub in second.subtasks.values() for sid, e in sub.splits.items()} == {
        "seq-00000": 0,
        "seq-00001": 100,
    }, "an identity that continues keeps where it began"
    assert second.subtasks[1].attempt == 4 and second.subtasks[1].applied_seq == 2
    assert all(e.finished for sub in second.subtasks.values() for e in sub.splits.values())


def test_nothing_new_returns_the_start_offset_itself() -> None:
    views = {0: view(1, owned(0, 1))}
    first = plan_next(SourceOffset(1), views, None, all_available)
    second = plan_next(first, views, None, all_available)
    assert plan_next(second, views, None, all_available) is second


def test_max_rows_is_shared_by_backlog_across_subtasks() -> None:
    views = {0: view(1, owned(0, 1, size=300)), 1: view(1, owned(1, 1, size=100))}
    start = SourceOffset(1)
    first = plan_next(start, views, 100, all_available)
    assert first.rows == 100
    assert first.subtasks[0].splits["seq-00000"].pos == 75
    assert first.subtasks[1].splits["seq-00001"].pos == 100 + 25
    assert read(start, first) == {"seq-00000": (0, 75), "seq-00001": (100, 125)}


def test_in_order_a_subtask_s_share_goes_to_its_splits_one_after_another() -> None:
    # two subtasks of four 100-row splits each, 300 rows a batch: each subtask gets 150,
    # that is one split whole and half of the next; no split is sliced thinner
    views = {
        0: view(1, owned(0, 1), owned(1, 1), owned(2, 1), owned(3, 1)),
        1: view(1, owned(4, 1), owned(5, 1), owned(6, 1), owned(7, 1)),
    }
    start = SourceOffset(1)
    first = plan_next(start, views, 300, all_available, in_order=True)
    rows = {
        sid: e.pos - k * 100
        for s in (0, 1)
        for k, (sid, e) in enumerate(sorted(first.subtasks[s].splits.items()), start=4 * s)
    }
    assert first.rows == 300
    assert rows == {
        "seq-00000": 100,
        "seq-00001": 50,
        "seq-00002": 0,
        "seq-00003": 0,
        "seq-00004": 100,
        "seq-00005": 50,
        "seq-00006": 0,
        "seq-00007": 0,
    }
    # the next batch finishes the split started first, then takes the next one
    second = plan_next(first, views, 300, all_available, in_order=True)
    assert second.subtasks[0].splits["seq-00001"].pos == 100 + 100
    assert second.subtasks[0].splits["seq-00002"].pos == 200 + 100
    assert second.subtasks[0].splits["seq-00003"].pos == 300  # not yet
    # by backlog, the same limit slices every split
    shared = plan_next(start, views, 300, all_available)
    assert all(0 < e.pos % 100 < 100 for s in (0, 1) for e in shared.subtasks[s].splits.values())


def test_max_splits_reads_that_many_splits_a_batch_in_assignment_order_subtasks_taking_turns() -> None:
    # Spark's maxFilesPerTrigger: 3 splits a batch over 2 subtasks, whatever the row limit;
    # within a subtask in the order the coordinator assigned them (not by id)
    views = {
        0: view(1, owned(3, 1), owned(1, 1), owned(2, 1)),
        1: view(1, owned(5, 1), owned(4, 1)),
    }
    start = SourceOffset(1)
    first = plan_next(start, views, None, all_available, in_order=True, max_splits=3)
    assert read(start, first) == {"seq-00003": (300, 400), "seq-00001": (100, 200), "seq-00005": (500, 600)}
    assert first.rows == 300
    second = plan_next(first, views, None, all_available, in_order=True, max_splits=3)
    assert read(first, second) == {"seq-00002": (200, 300), "seq-00004": (400, 500)}, "the two splits left"
    assert second.rows - first.rows == 200


def test_allocate_in_order_spends_each_subtask_s_share_and_no_more_than_a_backlog() -> None:
    backlog = {(0, "a"): 30, (0, "b"): 30, (1, "c"): 10, (1, "d"): 50}
    granted = allocate_in_order(backlog, lambda key: key[1], 60)
    assert granted == {(0, "a"): 30, (1, "c"): 10, (1, "d"): 20}
    assert allocate_in_order(backlog, lambda key: key[1], None) == backlog


def test_available_limits_the_advance_and_is_asked_at_the_base_position() -> None:
    asked: list[tuple[str, int]] = []

    def asked_ten_more(split: OwnedSplit, base: int) -> int:
        asked.append((split.split_id, base))
        return base + 10

    views = {0: view(1, owned(0, 1))}
    first = plan_next(SourceOffset(1), views, None, asked_ten_more)
    second = plan_next(first, views, None, asked_ten_more)
    assert [e.pos for e in first.subtasks[0].splits.values()] == [10]
    assert [e.pos for e in second.subtasks[0].splits.values()] == [20]
    assert asked == [("seq-00000", 0), ("seq-00000", 10)]


def test_an_end_below_the_position_moves_the_split_back_reading_nothing_then_reads_on_from_there() -> None:
    """A Kafka partition created again with fewer records, failOnDataLoss=false: the batch
    that finds it ends at its new end, the next reads from there (Spark's source)."""
    views = {0: view(1, owned(0, 1, size=1_000), owned(1, 1, size=1_000, position=1_000))}
    ends = {"seq-00000": 60, "seq-00001": 1_010}
    first = plan_next(SourceOffset(1), views, None, lambda split, base: ends[split.split_id])
    ends["seq-00000"] = 4  # the input now ends below the 60 read
    moved = plan_next(first, views, None, lambda split, base: ends[split.split_id])
    assert moved.checkpoint_id == first.checkpoint_id + 1 and moved.rows == first.rows
    assert {sid: (e.first, e.pos) for sid, e in moved.subtasks[0].splits.items()} == {
        "seq-00000": (0, 4),
        "seq-00001": (1_000, 1_010),
    }
    assert read(first, moved) == {}, "nothing of the old range is read"
    ends["seq-00000"] = 9
    on = plan_next(moved, views, None, lambda split, base: ends[split.split_id])
    assert read(moved, on) == {"seq-00000": (4, 9)}
    assert on.rows == first.rows + 5


def test_a_split_past_the_allowed_watermark_is_paused_until_the_bound_catches_up() -> None:
    # Event time = value here: a split read up to position p has read event time p - 1.
    def event_time_before(split: OwnedSplit, base: int) -> int | None:
        return None if base <= int(split.split["start"]) else base - 1

    def views(bound: int | None) -> dict[int, SubtaskView]:
        return {0: SubtaskView(1, 1, 1, False, (owned(0, 1), owned(1, 1)), bound)}

    def positions(offset: SourceOffset) -> dict[str, int]:
        return {sid: e.pos for sid, e in offset.subtasks[0].splits.items()}

    second = plan_next(SourceOffset(1), views(None), None, ten_more, (), event_time_before)
    assert positions(second) == {"seq-00000": 10, "seq-00001": 110}  # read up to event times 9 and 109
    # Bound 50: seq-00001 (at 109) pauses and takes no share of max_rows; seq-00000 gets it all.
    third = plan_next(second, views(50), 10, ten_more, (), event_time_before)
    assert positions(third) == {"seq-00000": 20, "seq-00001": 110}
    assert third.rows == second.rows + 10
    # The bound moves past it: it resumes.
    fourth = plan_next(third, views(200), None, ten_more, (), event_time_before)
    assert positions(fourth) == {"seq-00000": 30, "seq-00001": 120}
    # Everything paused: nothing new, the start offset itself.
    assert plan_next(fourth, views(0), None, ten_more, (), event_time_before) is fourth


def test_a_reassigned_split_starts_where_this_query_stopped_not_before() -> None:
    # Subtask 0 attempt 1 read seq-00000 to 60; after a restart the coordinator gives it
    # to subtask 1 attempt 2 at an older (acknowledged) position 40.
    stopped = SourceOffset(5, 60, {0: SubtaskOffset(1, 1, 1, False, {"seq-00000": SplitEntry(wire(0), 1, 60, 100)})})
    views = {0: view(2), 1: view(2, owned(0, 3, position=40), applied_seq=3)}
    end = plan_next(stopped, views, None, ten_more)
    assert end.subtasks[1].splits["seq-00000"].first == 60
    assert end.subtasks[1].splits["seq-00000"].pos == 70
    assert end.subtasks[0].splits == {}
    assert read(stopped, end) == {"seq-00000": (60, 70)}  # from where it stopped, not [40, 60) again
    assert end.rows == 60 + 10
    # a position further than what this query read is taken as given
    views = {1: view(2, owned(0, 3, position=80), applied_seq=3)}
    further = plan_next(stopped, views, None, ten_more)
    assert read(stopped, further) == {"seq-00000": (80, 90)}


def test_a_registering_subtask_keeps_its_entry_until_it_is_active() -> None:
    entries = {"seq-00000": SplitEntry(wire(0), 1, 60, 100), "seq-00001": SplitEntry(wire(1), 1, 130, 200)}
    restored = SourceOffset(5, 90, {0: SubtaskOffset(1, 1, 1, False, entries)})
    # nobody registered yet: nothing changes
    assert plan_next(restored, {0: view(None), 1: view(None)}, None, all_available) is restored
    # subtask 1 is active and got seq-00001: subtask 0 keeps only seq-00000 until it is active
    end = plan_next(restored, {0: view(None), 1: view(2, owned(1, 1, position=130))}, None, all_available)
    assert set(end.subtasks[0].splits) == {"seq-00000"} and end.subtasks[0].attempt == 1
    assert set(end.subtasks[1].splits) == {"seq-00001"}


def test_splits_that_leave_every_subtask_are_parked_unless_reported_finished() -> None:
    entries = {
        "seq-00000": SplitEntry(wire(0), 1, 60, 100),
        "seq-00001": SplitEntry(wire(1), 1, 200, 200),
        "seq-00002": SplitEntry(wire(2), 1, 300, 300),
    }
    start = SourceOffset(5, 0, {0: SubtaskOffset(1, 1, 1, False, entries)})
    end = plan_next(start, {0: view(2, applied_seq=2)}, None, all_available, reported_finished={"seq-00002"})
    assert {sid: e.pos for sid, e in end.parked.items()} == {"seq-00000": 60, "seq-00001": 200}
    # given back later at an older position, it resumes from the parked one
    later = plan_next(end, {0: view(2, owned(0, 3, position=40), applied_seq=3)}, None, ten_more)
    assert later.subtasks[0].splits["seq-00000"].first == 60
    assert read(end, later) == {"seq-00000": (60, 70)}
    assert set(later.parked) == {"seq-00001"}


def test_no_more_splits_and_attempt_changes_make_a_new_offset_without_rows() -> None:
    views = {0: view(1, owned(0, 1))}
    first = plan_next(SourceOffset(1), views, None, all_available)
    done = plan_next(first, views, None, all_available)
    finished = plan_next(done, {0: view(1, applied_seq=2, no_more=True)}, None, all_available, {"seq-00000"})
    assert finished.checkpoint_id == done.checkpoint_id + 1 and finished.rows == done.rows
    assert finished.subtasks[0].finished and finished.parked == {}


# -- the sequence connector's position ranges ---------------------------------------


@pytest.mark.parametrize("skew_ms", [0, 5_000])
def test_sequence_ranges_give_what_its_reader_gives(skew_ms: int) -> None:
    options = SequenceOptions(splits=3, records_per_split=50, event_interval_ms=7, split_time_offset_ms=skew_ms)
    source = SequenceSource(options)
    reader = SequenceReader(options)
    reader.add_splits(options.all_splits())
    expected: dict[str, list[tuple[int, int | None]]] = {}
    while True:
        result = reader.next_batch(1000)
        for record in result.records:
            expected.setdefault(record.split_id, []).append((record.value, record.event_time_ms))
        if not reader.snapshot_state(0):
            break
    for split in options.all_splits():
        got: list[tuple[int, int | None]] = []
        for a, b in ((split.start, split.start + 17), (split.start + 17, split.end)):
            assert b is not None
            for chunk in source.read_range(split, a, b, 8):
                assert len(chunk) <= 8 and chunk.event_times_ms is not None
                got.extend(zip(chunk.values.to_pylist(), chunk.event_times_ms.to_pylist(), strict=True))
        assert got == expected[split.split_id]
        assert source.event_time_before(split, split.start) is None
        assert source.event_time_before(split, split.start + 17) == expected[split.split_id][16][1]
    firsts = [expected[split.split_id][0][1] for split in options.all_splits()]
    assert firsts == [options.start_time_ms + k * skew_ms for k in range(3)]


@pytest.mark.parametrize("skew_ms", [0, 45_000])
def test_expected_sequence_windows_are_the_windows_of_what_the_reader_reads(skew_ms: int) -> None:
    raw = {"splits": "4", "records_per_split": "900", "event_interval_ms": "100", "split_time_offset_ms": str(skew_ms)}
    options = SequenceOptions.parse(raw)
    reader = SequenceReader(options)
    reader.add_splits(options.all_splits())
    windows: dict[int, list[int]] = {}
    while reader.snapshot_state(0):
        for record in reader.next_batch(500).records:
            assert record.event_time_ms is not None
            row = windows.setdefault(record.event_time_ms // WINDOW_MS * WINDOW_MS, [0, 0])
            row[0] += 1
            row[1] += record.value
    expected = [WindowRow(start, start + WINDOW_MS, c, v) for start, (c, v) in sorted(windows.items())]
    assert expected_sequence_windows(raw) == expected
    assert len(expected) > 1  # the records span several windows


def test_sequence_available_end() -> None:
    bounded = SequenceSource(SequenceOptions(splits=2, records_per_split=1000))
    split = SequenceSplit("seq-00001", 1000, 2000, 1200)
    assert bounded.available_end(split, 0) == 2000
    assert bounded.is_finished_at(split, 2000) and not bounded.is_finished_at(split, 1999)
    rated = SequenceSource(SequenceOptions(splits=2, records_per_split=1000, rate=10, start_time_ms=1_000_000))
    assert rated.available_end(split, 1_000_000) == 1200  # never below the position
    assert rated.available_end(split, 1_000_000 + 30_000) == 1300
    assert rated.available_end(split, 1_000_000 + 3_000_000) == 2000
    unbounded = SequenceSource(SequenceOptions(splits=2, records_per_split=None))
    far = SequenceSplit("seq-00000", 0, None, 5)
    assert unbounded.available_end(far, 0) > 5 and unbounded.split_end(far) is None
    with pytest.raises(ValueError):
        next(bounded.read_range(split, 999, 1100, 10))


# -- planning-time event-time alignment (EventTimeBound) ---------------------------------


def test_an_event_time_bound_reads_the_lagging_split_first_and_holds_the_others() -> None:
    # Split 0 lags: its records have event time 1000 * position ms from the start of an
    # hour ago; split 1 is current. With a 60 s drift, split 1 waits while split 0 catches
    # up, and in every batch nothing is planned more than 60 s past the earliest split.
    hour_ms = 3_600_000
    lag = {"seq-00000": -hour_ms, "seq-00001": 0}

    def time_at(split: OwnedSplit, position: int) -> int | None:
        base = int(split.split["start"])
        return lag[split.split_id] + (position - base) * 1000

    def after(split: OwnedSplit, event_time_ms: int) -> int | None:
        base = int(split.split["start"])
        first = base + (event_time_ms - lag[split.split_id]) // 1000 + 1
        assert split.end is not None
        return max(base, first) if first < split.end else None

    bound = EventTimeBound(60_000, time_at, after)
    views = {0: view(1, owned(0, 1, size=10_000), owned(1, 1, size=10_000))}
    offset = SourceOffset(1)
    reads: list[dict[str, tuple[int, int]]] = []
    while True:
        nxt = plan_next(offset, views, None, all_available, event_time_bound=bound)
        if nxt is offset:
            break
        reads.append({r.split["split_id"]: (r.start, r.end) for r in ranges_between(offset, nxt)[0]})
        offset = nxt
    first = reads[0]
    assert first == {"seq-00000": (0, 61)}, "only the lagging split, up to 60 s past its next record"
    spans: list[int] = []
    for batch in reads:
        times = [time_at(views[0].splits[int(sid[-1])], a) for sid, (a, _) in batch.items()]
        ends = [time_at(views[0].splits[int(sid[-1])], b - 1) for sid, (_, b) in batch.items()]
        spans.append(max(t for t in ends if t is not None) - min(t for t in times if t is not None))
    assert max(spans) <= 60_000, "no batch spans more event time than the drift"
    final = offset.subtasks[0].splits
    assert final["seq-00000"].pos == 10_000 and final["seq-00001"].pos == 20_000, "both read to the end"


def test_without_event_times_the_bound_changes_nothing() -> None:
    bound = EventTimeBound(0, lambda s, p: None, lambda s, t: None)
    views = {0: view(1, owned(0, 1), owned(1, 1))}
    first = plan_next(SourceOffset(1), views, None, all_available)
    assert plan_next(first, views, None, all_available, event_time_bound=bound) == plan_next(
        first, views, None, all_available
    )


def test_a_split_that_starts_under_a_new_identity_bounds_the_batch_in_which_it_appears() -> None:
    # Split 0 is being read; split 1, an hour behind, arrives (its subtask registered
    # later). It reads in the batch where its identity appears, and its next record bounds
    # that batch: had split 0 been planned a minute further, Spark's watermark would be
    # past all of split 1. So split 0 waits for it.
    hour_ms = 3_600_000
    lag = {"seq-00000": 0, "seq-00001": -hour_ms}

    def time_at(split: OwnedSplit, position: int) -> int | None:
        base = int(split.split["start"])
        return lag[split.split_id] + (position - base) * 1000

    def after(split: OwnedSplit, event_time_ms: int) -> int | None:
        base = int(split.split["start"])
        first = base + (event_time_ms - lag[split.split_id]) // 1000 + 1
        assert split.end is not None
        return max(base, first) if first < split.end else None

    bound = EventTimeBound(60_000, time_at, after)
    s0, s1 = owned(0, 1, size=10_000), owned(1, 1, size=10_000)
    start = SourceOffset(1)
    first = plan_next(start, {0: view(1, s0), 1: view(None)}, None, all_available, event_time_bound=bound)
    assert read(start, first) == {"seq-00000": (0, 61)}, "split 0 alone: up to 60 s past its next record"
    both = {0: view(1, s0), 1: view(1, s1)}
    arrived = plan_next(first, both, None, all_available, event_time_bound=bound)
    assert arrived.subtasks[1].splits["seq-00001"].first == 10_000, "split 1 appears"
    # split 0 is not planned past split 1's next record + 60 s; split 1 reads up to there
    assert read(first, arrived) == {"seq-00001": (10_000, 10_061)}
    assert arrived.subtasks[0].splits["seq-00000"].pos == 61
