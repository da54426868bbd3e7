"""Watermarks as people read them: ISO 8601 first, the raw milliseconds after."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sluicegate.protocol.event_time import event_time_text


def test_a_time_reads_as_iso_8601_utc_with_the_raw_value() -> None:
    assert event_time_text(1_767_225_600_123) == "2026-01-01T00:00:00.123Z (1767225600123)"
    assert event_time_text(0) == "1970-01-01T00:00:00.000Z (0)"


def test_no_value_and_values_out_of_range() -> None:
    assert event_time_text(None) == "none"
    assert event_time_text(-(2**63)) == str(-(2**63))  # Long.MIN_VALUE, Flink's "no watermark yet"


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_the_raw_value_is_always_there(ms: int) -> None:
    assert str(ms) in event_time_text(ms)
