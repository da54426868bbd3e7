"""WatermarkAggregator: the low-watermark service (FLINK-4576) with the alignment bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.coordinator.watermarks import WatermarkAggregator, WatermarkState


def test_nothing_reported_means_no_low_watermark() -> None:
    agg = WatermarkAggregator(max_drift_ms=50)
    assert agg.state == WatermarkState(None, None)
    assert agg.update(0, None, False) is False
    assert agg.state.low_watermark is None


def test_low_is_min_over_non_idle_readers() -> None:
    agg = WatermarkAggregator()
    assert agg.update(0, 300, False) is True
    assert agg.state.low_watermark == 300
    # a slower reader cannot pull the published low watermark back ...
    assert agg.update(1, 100, False) is False
    assert agg.state.low_watermark == 300
    # ... but it holds it: the low only moves once the min moves past it
    assert agg.update(0, 1000, False) is False
    assert agg.state.low_watermark == 300
    assert agg.update(1, 500, False) is True
    assert agg.state.low_watermark == 500
    # idle readers do not count
    assert agg.update(1, 500, True) is True
    assert agg.state.low_watermark == 1000


def test_min_over_several_readers_from_the_start() -> None:
    agg = WatermarkAggregator(low_watermark=None)
    agg.update(0, None, False)
    agg.update(1, 70, True)
    agg.update(2, 40, False)
    agg.update(3, 90, False)
    assert agg.state.low_watermark == 40


def test_none_does_not_hold_back() -> None:
    agg = WatermarkAggregator()
    agg.update(0, None, False)
    assert agg.update(1, 200, False) is True
    assert agg.state.low_watermark == 200
    # once the reader reports a number it counts (but cannot move the low back)
    agg.update(0, 250, False)
    agg.update(1, 400, False)
    assert agg.state.low_watermark == 250


def test_a_reader_reporting_none_after_a_number_keeps_its_last_watermark() -> None:
    agg = WatermarkAggregator()
    agg.update(0, 100, False)
    agg.update(1, 500, False)
    agg.update(0, None, False)
    assert agg.state.low_watermark == 100
    agg.update(0, 50, False)  # a reader's own watermark never goes back either
    agg.update(1, 600, False)
    assert agg.state.low_watermark == 100


def test_removed_reader_stops_counting() -> None:
    agg = WatermarkAggregator()
    agg.update(0, 100, False)
    agg.update(1, 900, False)
    assert agg.state.low_watermark == 100
    assert agg.remove(0) is True
    assert agg.state.low_watermark == 900
    assert agg.remove(0) is False  # removing twice is harmless
    assert agg.remove(42) is False


def test_all_idle_keeps_the_value() -> None:
    agg = WatermarkAggregator()
    agg.update(0, 100, False)
    agg.update(1, 200, False)
    assert agg.update(0, 100, True) is True  # only 1 counts now
    assert agg.update(1, 200, True) is False
    assert agg.state.low_watermark == 200
    assert agg.remove(1) is False
    assert agg.remove(0) is False
    assert agg.state.low_watermark == 200


def test_alignment_bound_is_low_plus_drift() -> None:
    agg = WatermarkAggregator(max_drift_ms=5_000)
    assert agg.state.max_allowed_watermark is None
    agg.update(0, 1_000, False)
    assert agg.state == WatermarkState(1_000, 6_000)
    agg.update(0, 2_500, False)
    assert agg.state == WatermarkState(2_500, 7_500)
    assert WatermarkAggregator(max_drift_ms=0, low_watermark=10).state == WatermarkState(10, 10)


def test_without_alignment_there_is_no_bound() -> None:
    agg = WatermarkAggregator()
    agg.update(0, 1_000, False)
    assert agg.state == WatermarkState(1_000, None)


def test_restored_low_watermark_is_a_floor() -> None:
    agg = WatermarkAggregator(max_drift_ms=10, low_watermark=700)
    assert agg.snapshot() == {"low_watermark": 700}
    assert agg.update(0, 300, False) is False
    assert agg.state == WatermarkState(700, 710)
    assert agg.update(0, 701, False) is True


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("update"),
            st.integers(0, 4),
            st.none() | st.integers(0, 10_000),
            st.booleans(),
        ),
        st.tuples(st.just("remove"), st.integers(0, 4), st.none(), st.just(False)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_low_watermark_never_decreases_and_is_bounded_by_active_readers(
    ops: list[tuple[str, int, int | None, bool]],
) -> None:
    agg = WatermarkAggregator(max_drift_ms=100)
    latest: dict[int, int | None] = {}
    idle: dict[int, bool] = {}
    previous = None
    for op, subtask, wm, is_idle in ops:
        if op == "update":
            advanced = agg.update(subtask, wm, is_idle)
            old = latest.get(subtask)
            latest[subtask] = wm if old is None else (old if wm is None else max(old, wm))
            idle[subtask] = is_idle
        else:
            advanced = agg.remove(subtask)
            latest.pop(subtask, None)
            idle.pop(subtask, None)
        low = agg.state.low_watermark
        assert advanced == (low != previous)
        if previous is not None:
            assert low is not None and low >= previous
        active = [w for s, w in latest.items() if w is not None and not idle[s]]
        if active and (previous is None or min(active) > previous):
            assert low == min(active)
        else:
            assert low == previous
        if low is not None:
            assert agg.state.max_allowed_watermark == low + 100
        previous = low
