"""Split idleness in SplitWatermarks (FLIP-182 / FLIP-217): a quiet split stops holding the
reader's watermark back until its next record; a paused split is never idle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.api.errors import ConfigError
from sluicegate.api.reader import Record
from sluicegate.reader.host import ReaderSettings
from sluicegate.reader.output import OutputSpec
from sluicegate.reader.watermark import SplitWatermarks
from sluicegate.spark.options import SparkSourceOptions

TIMEOUT = 1_000


def two_splits() -> SplitWatermarks:
    wm = SplitWatermarks(TIMEOUT)
    wm.add(["quiet", "busy"], now_ms=0)
    wm.observe([Record("quiet", 1, 100), Record("busy", 1, 500)], now_ms=0)
    return wm


def test_off_by_default_a_quiet_split_holds_the_watermark_for_ever() -> None:
    wm = SplitWatermarks()
    wm.add(["quiet", "busy"])
    wm.observe([Record("quiet", 1, 100), Record("busy", 1, 500)])
    assert wm.current(10**9) == 100 and not wm.all_idle(10**9) and wm.idle_splits(10**9) == []


def test_a_quiet_split_stops_counting_after_the_timeout() -> None:
    wm = two_splits()
    wm.observe([Record("busy", 2, 900)], now_ms=TIMEOUT - 1)
    assert wm.current(TIMEOUT - 1) == 100  # not yet: the quiet split still holds it back
    assert wm.idle_splits(TIMEOUT) == ["quiet"]
    assert wm.current(TIMEOUT) == 900 and not wm.all_idle(TIMEOUT)


def test_a_record_makes_an_idle_split_count_again() -> None:
    wm = two_splits()
    wm.observe([Record("busy", 2, 900)], now_ms=1_500)
    assert wm.current(1_500) == 900
    wm.observe([Record("quiet", 2, 200)], now_ms=1_600)
    assert wm.idle_splits(1_600) == [] and wm.current(1_600) == 200
    # a record without an event time is data too
    wm.observe([Record("quiet", 3, None), Record("busy", 3, 950)], now_ms=3_000)
    assert wm.idle_splits(3_000) == []


def test_every_split_idle_makes_the_reader_idle_with_the_min_over_all_splits() -> None:
    wm = two_splits()
    assert wm.all_idle(TIMEOUT)
    assert wm.current(TIMEOUT) == 100  # the reader reports itself idle: this holds nothing back


def test_a_new_split_gets_a_full_timeout_before_it_is_idle() -> None:
    wm = two_splits()
    wm.add(["late"], now_ms=900)
    assert wm.idle_splits(1_800) == ["busy", "quiet"]
    assert wm.idle_splits(1_900) == ["busy", "late", "quiet"]


def test_no_split_is_not_all_idle() -> None:
    wm = SplitWatermarks(TIMEOUT)
    assert not wm.all_idle(10**6) and wm.current(10**6) is None


def test_a_paused_split_is_never_idle_and_gets_a_fresh_timeout_on_resume() -> None:
    # FLINK-32496: a split quiet because it is *ahead* must not go idle, or every reader
    # could end up idle with the bound stuck where it is
    wm = two_splits()
    assert wm.align(300, now_ms=0).to_pause == ["busy"]
    assert wm.idle_splits(5_000) == ["quiet"]
    assert wm.current(5_000) == 500 and not wm.all_idle(5_000)
    assert wm.align(600, now_ms=5_000).to_resume == ["busy"]
    assert wm.idle_splits(5_000 + TIMEOUT - 1) == ["quiet"]
    assert wm.all_idle(5_000 + TIMEOUT)


def test_removed_splits_forget_their_clock() -> None:
    wm = two_splits()
    wm.remove(["quiet"])
    assert wm.current(TIMEOUT - 1) == 500 and wm.split_ids == ["busy"]
    wm.clear()
    assert wm.split_ids == [] and not wm.all_idle(TIMEOUT)


def test_a_negative_timeout_is_refused() -> None:
    with pytest.raises(ValueError):
        SplitWatermarks(-1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 10_000), st.integers(0, 400)),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 3_000),
)
def test_the_watermark_is_the_min_over_splits_with_a_record_within_the_timeout(
    steps: list[tuple[str, int, int]], later_ms: int
) -> None:
    """Against a direct model: last record time and max event time per split."""
    wm = SplitWatermarks(TIMEOUT)
    wm.add(["a", "b", "c"], now_ms=0)
    now = 0
    last: dict[str, int] = {"a": 0, "b": 0, "c": 0}
    high: dict[str, int] = {}
    for split_id, event_time, advance in steps:
        now += advance
        wm.observe([Record(split_id, None, event_time)], now_ms=now)
        last[split_id] = now
        high[split_id] = max(high.get(split_id, event_time), event_time)
    now += later_ms
    idle = {s for s, t in last.items() if now - t >= TIMEOUT}
    assert set(wm.idle_splits(now)) == idle
    assert wm.all_idle(now) == (idle == {"a", "b", "c"})
    counted = [t for s, t in high.items() if s not in idle] if not wm.all_idle(now) else list(high.values())
    assert wm.current(now) == (min(counted) if counted else None)


def test_the_spark_option_and_the_reader_setting() -> None:
    base = {"source": "orders", "parallelism": "2", "kafka.bootstrap.servers": "k:9092"}
    assert SparkSourceOptions.from_options(base).driver_settings().split_idle_timeout_ms == 0
    config = SparkSourceOptions.from_options({**base, "splitIdleTimeoutMs": "1500"})
    assert config.driver_settings().split_idle_timeout_ms == 1500
    with pytest.raises(ConfigError, match="splitidletimeoutms"):
        SparkSourceOptions.from_options({**base, "splitIdleTimeoutMs": "-1"})
    with pytest.raises(ConfigError, match="--split-idle-timeout-ms"):
        ReaderSettings("orders", 0, "sequence", OutputSpec.parse("jsonl:/tmp/x"), "k:9092", split_idle_timeout_ms=-5)
