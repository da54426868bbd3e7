"""The ``sequence`` connector: options, splits, reader, enumerator."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from core_harness import CoreHarness, sequence_source
from hypothesis import given, settings
from hypothesis import strategies as st

import sluicegate_connectors.sequence.reader as sequence_reader_module
from sluicegate.api import (
    Boundedness,
    ConfigError,
    InputStatus,
    Record,
    SourceReaderContext,
    SupportsSplitReassignmentOnRecovery,
)
from sluicegate.connectors import load_source
from sluicegate_connectors.sequence import (
    SequenceOptions,
    SequenceReader,
    SequenceSource,
    SequenceSplit,
)
from sluicegate_connectors.sequence.enumerator import FreshRuns
from sluicegate_connectors.sequence.split import UNBOUNDED_STRIDE

CTX = SourceReaderContext(subtask=0, attempt=1, location="test")


def reader_for(**options: str) -> SequenceReader:
    return SequenceSource.from_options(options).create_reader(CTX)


def drain(reader: SequenceReader, batch: int = 7, limit: int = 10_000) -> tuple[list[Record], list[str]]:
    records: list[Record] = []
    finished: list[str] = []
    for _ in range(limit):
        result = reader.next_batch(batch)
        assert len(result.records) <= batch
        records += result.records
        finished += result.finished_split_ids
        if result.status is not InputStatus.MORE_AVAILABLE:
            break
    return records, finished


def by_split(records: list[Record]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for r in records:
        out[r.split_id].append(r.value)
    return dict(out)


# -- options ----------------------------------------------------------------------------


def test_defaults() -> None:
    opts = SequenceOptions.parse({})
    assert opts == SequenceOptions(splits=8, records_per_split=1000, rate=0.0)
    source = SequenceSource.from_options({})
    assert source.boundedness is Boundedness.BOUNDED
    assert isinstance(source, SupportsSplitReassignmentOnRecovery)


def test_options_are_parsed() -> None:
    opts = SequenceOptions.parse(
        {
            "splits": "200",
            "records_per_split": "10",
            "rate": "2.5",
            "start_time_ms": "0",
            "event_interval_ms": "3",
        }
    )
    assert opts == SequenceOptions(200, 10, 2.5, 0, 3)


def test_unbounded() -> None:
    source = SequenceSource.from_options({"records_per_split": " Unbounded "})
    assert source.options.records_per_split is None
    assert source.boundedness is Boundedness.CONTINUOUS_UNBOUNDED


def test_the_connector_is_found_by_name() -> None:
    source = load_source("sequence", {"splits": "3"})
    assert isinstance(source, SequenceSource) and source.options.splits == 3


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"split": "3"}, "split"),
        ({"splits": "0"}, "splits"),
        ({"splits": "-2"}, "splits"),
        ({"splits": "many"}, "splits"),
        ({"splits": "1.5"}, "splits"),
        ({"records_per_split": "0"}, "records_per_split"),
        ({"records_per_split": "lots"}, "records_per_split"),
        ({"rate": "fast"}, "rate"),
        ({"rate": "-1"}, "rate"),
        ({"rate": "nan"}, "rate"),
        ({"rate": "inf"}, "rate"),
        ({"start_time_ms": "-1"}, "start_time_ms"),
        ({"start_time_ms": "yesterday"}, "start_time_ms"),
        ({"event_interval_ms": "-10"}, "event_interval_ms"),
    ],
)
def test_bad_options_raise_config_error_naming_the_option(options: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        SequenceSource.from_options(options)
    assert info.value.setting == setting
    assert repr(setting) in str(info.value)


# -- splits -----------------------------------------------------------------------------


def test_split_k_is_the_kth_range() -> None:
    splits = SequenceOptions.parse({"splits": "3", "records_per_split": "10"}).all_splits()
    assert splits == [
        SequenceSplit("seq-00000", 0, 10, 0),
        SequenceSplit("seq-00001", 10, 20, 10),
        SequenceSplit("seq-00002", 20, 30, 20),
    ]
    many = SequenceOptions.parse({"splits": "123456", "records_per_split": "1"}).all_splits()
    assert many[-1].split_id == "seq-123455"
    assert len({s.split_id for s in many}) == 123456
    unbounded = SequenceOptions.parse({"splits": "2", "records_per_split": "unbounded"}).all_splits()
    assert unbounded[1] == SequenceSplit("seq-00001", UNBOUNDED_STRIDE, None, UNBOUNDED_STRIDE)


def test_split_wire_codec_round_trips() -> None:
    codec = SequenceSource.from_options({}).split_codec
    for split in (SequenceSplit("seq-00004", 40, 50, 43), SequenceSplit("u", 5, None, 9)):
        assert codec.from_wire(codec.to_wire(split)) == split
    assert codec.to_wire(SequenceSplit("a", 1, 2, 1))["split_id"] == "a"


# -- reader -----------------------------------------------------------------------------


def test_reader_reads_every_value_of_its_splits_once_in_order() -> None:
    reader = reader_for(splits="5", records_per_split="10", start_time_ms="1000", event_interval_ms="5")
    splits = SequenceOptions.parse({"splits": "5", "records_per_split": "10"}).all_splits()
    reader.add_splits([splits[1], splits[3]])
    reader.add_splits([splits[4]])
    records, finished = drain(reader)
    assert by_split(records) == {
        "seq-00001": list(range(10, 20)),
        "seq-00003": list(range(30, 40)),
        "seq-00004": list(range(40, 50)),
    }
    assert sorted(finished) == ["seq-00001", "seq-00003", "seq-00004"]
    for r in records:  # event time of value n is start + (index of n in its split) * interval
        assert r.event_time_ms == 1000 + (r.value % 10) * 5
    assert reader.snapshot_state(1) == []
    assert reader.next_batch(10).records == []


def test_reader_starts_at_the_split_position() -> None:
    reader = reader_for()
    reader.add_splits([SequenceSplit("seq-00002", 20, 30, 27)])
    records, finished = drain(reader)
    assert [r.value for r in records] == [27, 28, 29]
    assert finished == ["seq-00002"]


def test_the_reader_knows_how_many_records_are_left_to_each_splits_end() -> None:
    reader = reader_for()
    reader.add_splits([SequenceSplit("seq-00002", 20, 30, 27), SequenceSplit("seq-00003", 30, 40, 30)])
    assert reader.records_to_end() == {"seq-00002": 3, "seq-00003": 10}
    reader.next_batch(4)
    assert sum(reader.records_to_end().values()) == 9
    drain(reader)
    assert reader.records_to_end() == {}


def test_a_split_already_at_its_end_reports_finished_without_records() -> None:
    reader = reader_for()
    reader.add_splits([SequenceSplit("seq-00002", 20, 30, 30)])
    result = reader.next_batch(10)
    assert result.records == [] and result.finished_split_ids == ["seq-00002"]


def test_the_reader_does_not_share_split_objects_with_its_caller() -> None:
    reader = reader_for()
    split = SequenceSplit("seq-00000", 0, 10, 0)
    reader.add_splits([split])
    reader.next_batch(4)
    assert split.position == 0
    snap = reader.snapshot_state(1)
    reader.next_batch(4)
    assert snap == [SequenceSplit("seq-00000", 0, 10, 4)]


def test_snapshot_and_restore_resume_at_the_position() -> None:
    options = {"splits": "4", "records_per_split": "25"}
    splits = SequenceOptions.parse(options).all_splits()
    first = reader_for(**options)
    first.add_splits(splits)
    before: list[Record] = []
    finished: list[str] = []
    for _ in range(5):
        result = first.next_batch(9)
        before += result.records
        finished += result.finished_split_ids
    state = first.snapshot_state(7)
    assert all(s.position > s.start for s in state)
    assert {s.split_id for s in state} == {s.split_id for s in splits} - set(finished)

    second = reader_for(**options)
    second.add_splits(state)
    after, finished_after = drain(second)
    values = [r.value for r in before + after]
    assert sorted(values) == list(range(100))  # every value exactly once
    assert sorted(finished + finished_after) == [s.split_id for s in splits]
    for split_id, vals in by_split(before + after).items():
        assert vals == sorted(vals), split_id


def test_paused_splits_are_not_read() -> None:
    reader = reader_for()
    reader.add_splits([SequenceSplit("a", 0, 10, 0), SequenceSplit("b", 10, 20, 10)])
    reader.pause_or_resume_splits(["a"], [])
    assert {r.split_id for r in reader.next_batch(6).records} == {"b"}
    reader.pause_or_resume_splits([], ["a"])
    assert "a" in {r.split_id for r in reader.next_batch(6).records}


def test_unbounded_splits_never_finish() -> None:
    reader = reader_for(splits="2", records_per_split="unbounded")
    reader.add_splits(SequenceOptions.parse({"splits": "2", "records_per_split": "unbounded"}).all_splits())
    seen: dict[str, list[int]] = defaultdict(list)
    for _ in range(500):
        result = reader.next_batch(50)
        assert result.finished_split_ids == []
        assert result.status is InputStatus.MORE_AVAILABLE
        for r in result.records:
            seen[r.split_id].append(r.value)
    assert seen["seq-00000"] == list(range(len(seen["seq-00000"])))
    assert seen["seq-00001"][:3] == [UNBOUNDED_STRIDE, UNBOUNDED_STRIDE + 1, UNBOUNDED_STRIDE + 2]
    assert len(seen["seq-00000"]) + len(seen["seq-00001"]) == 500 * 50
    assert len(reader.snapshot_state(1)) == 2


# -- rate limiting -----------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(sequence_reader_module, "time", fake)
    return fake


def test_rate_limits_records_per_second(clock: FakeClock) -> None:
    reader = reader_for(rate="10", records_per_split="unbounded")
    reader.add_splits([SequenceSplit("a", 0, None, 0)])
    assert reader.next_batch(100).records == []  # no tokens yet
    clock.now += 0.5
    assert len(reader.next_batch(100).records) == 5
    clock.now += 60  # the bucket holds at most one second of records
    assert len(reader.next_batch(100).records) == 10
    assert reader.next_batch(100).records == []
    clock.now += 0.25
    assert len(reader.next_batch(1).records) == 1  # max_records still bounds a batch
    total = 0
    for _ in range(100):
        clock.now += 0.1
        total += len(reader.next_batch(100).records)
    assert 95 <= total <= 101


def test_a_rate_below_one_record_per_second_still_reads(clock: FakeClock) -> None:
    reader = reader_for(rate="0.5", records_per_split="unbounded")
    reader.add_splits([SequenceSplit("a", 0, None, 0)])
    total = 0
    for _ in range(20):
        clock.now += 1.0
        total += len(reader.next_batch(100).records)
    assert 9 <= total <= 11  # 0.5 records per second over 20 s


def test_rate_limit_in_real_time_has_an_upper_bound() -> None:
    rate = 200
    reader = reader_for(rate=str(rate), records_per_split="unbounded")
    reader.add_splits([SequenceSplit("a", 0, None, 0), SequenceSplit("b", 10**9, None, 10**9)])
    start = time.monotonic()
    total = 0
    while time.monotonic() - start < 0.3:
        total += len(reader.next_batch(1_000).records)
        time.sleep(0.005)
    elapsed = time.monotonic() - start
    # at most one second's burst plus the rate over the elapsed time; generous slack
    assert total <= rate * (elapsed + 1) * 1.5


def test_without_rate_a_batch_is_as_large_as_asked() -> None:
    reader = reader_for(records_per_split="unbounded")
    reader.add_splits([SequenceSplit("a", 0, None, 0)])
    assert len(reader.next_batch(1_000).records) == 1_000


# -- enumerator ------------------------------------------------------------------------


def test_enumerator_state_restores_its_unassigned_splits() -> None:
    h = CoreHarness(sequence_source(splits=10, records_per_split=10), max_parallelism=4)
    h.register(0)  # takes its fair share: 3 of 10
    state: Any = h.core.enumerator.snapshot_state(1)
    assert state == {"unassigned": [[3, 10]]}  # never-read splits 3..9, abbreviated
    restored = sequence_source(splits=10, records_per_split=10).restore_enumerator(h.core._context, state)
    assert restored.pending_split_ids() == [f"seq-{k:05d}" for k in range(3, 10)]
    assert restored.snapshot_state(2) == state


def test_enumerator_state_keeps_read_splits_whole_and_the_order() -> None:
    source = sequence_source(splits=10, records_per_split=10)
    read = {"split_id": "seq-00001", "start": 10, "end": 20, "position": 14}
    old_format = [source.split_codec.to_wire(s) for s in source.options.splits_range(5, 8)]
    enumerator = source.restore_enumerator(CoreHarness(source).core._context, {"unassigned": [*old_format, read]})
    assert enumerator.snapshot_state(1) == {"unassigned": [[5, 8], read]}
    assert enumerator.pending_split_ids() == ["seq-00005", "seq-00006", "seq-00007", "seq-00001"]


def test_enumerator_gives_every_split_once_over_readers() -> None:
    h = CoreHarness(sequence_source(splits=200), max_parallelism=4)
    for s in range(4):
        h.register(s)
    owned = [h.owned(s) for s in range(4)]
    assert [len(o) for o in owned] == [50, 50, 50, 50]
    assert set().union(*owned) == {f"seq-{k:05d}" for k in range(200)}
    assert h.unassigned() == []


def test_a_rate_limited_reader_advances_every_split_even_when_a_batch_is_smaller_than_the_split_count() -> None:
    options = SequenceOptions(splits=8, records_per_split=None, rate=1_000)
    reader = SequenceReader(options)
    reader.add_splits(options.all_splits()[4:])
    seen: set[str] = set()
    for _ in range(8):
        reader._tokens = 3.0  # a call that may give 3 records to 4 splits
        reader._last_refill = time.monotonic()
        seen.update(r.split_id for r in reader.next_batch(100).records)
    assert seen == {s.split_id for s in options.all_splits()[4:]}, "no split starves"


def test_a_stalled_split_goes_quiet_at_its_stall_point_then_reads_on(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(sequence_reader_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    options = {"splits": "2", "records_per_split": "10", "stall_split": "0", "stall_at": "4", "stall_ms": "1000"}
    source = SequenceSource.from_options(options)
    reader = source.create_reader(CTX)
    reader.add_splits(source.options.all_splits())
    first = reader.next_batch(100)
    assert [r.value for r in first.records if r.split_id == "seq-00000"] == [0, 1, 2, 3]
    assert len([r for r in first.records if r.split_id == "seq-00001"]) == 10
    assert reader.next_batch(100).records == []  # quiet
    clock[0] += 0.999
    assert reader.next_batch(100).records == []
    clock[0] += 0.001
    assert [r.value for r in reader.next_batch(100).records] == [4, 5, 6, 7, 8, 9]


def test_spark_planning_sees_a_stalled_split_quiet_at_its_stall_point_then_available() -> None:
    options = {"splits": "2", "records_per_split": "10", "stall_split": "0", "stall_at": "4", "stall_ms": "1000"}
    source = SequenceSource.from_options(options)
    first, second = source.options.all_splits()
    assert source.available_end(first, 0) == 4  # planned up to the stall point
    assert source.available_end(second, 0) == 20  # the other split is not stalled
    at_stall = source.with_position(first, 4)
    assert source.available_end(at_stall, 5_000) == 4  # quiet from the first time planning got there
    assert source.available_end(at_stall, 5_999) == 4
    assert source.available_end(at_stall, 6_000) == 10  # then the rest is available


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 60), st.integers(1, 8)), max_size=40))
def test_fresh_runs_hold_the_same_indices_as_a_set(ops: list[tuple[bool, int, int]]) -> None:
    runs, model = FreshRuns(), set[int]()
    for add, k, width in ops:
        if add:
            new = [i for i in range(k, k + width) if i not in model]
            for i in new:  # add() takes indices not in the set yet, as new splits are
                runs.add(i, i + 1)
            model.update(new)
        else:
            runs.discard(k)
            model.discard(k)
        listed = runs.runs()
        assert {i for first, stop in listed for i in range(first, stop)} == model
        assert all(stop < after for (_, stop), (after, _) in itertools.pairwise(listed)), "runs not merged"


def test_the_state_of_a_large_source_stays_small_while_readers_take_their_share() -> None:
    h = CoreHarness(sequence_source(splits=100_000, records_per_split=10), max_parallelism=8)
    for s in range(4):
        h.register(s)
    state: Any = h.core.enumerator.snapshot_state(1)
    assert state == {"unassigned": [[50_000, 100_000]]}
    h.leave(0)  # its 12,500 splits come back (never read): whole wire splits, after the run
    state = h.core.enumerator.snapshot_state(2)
    restored = sequence_source(splits=100_000, records_per_split=10).restore_enumerator(h.core._context, state)
    assert sorted(restored.pending_split_ids()) == sorted(h.unassigned())
