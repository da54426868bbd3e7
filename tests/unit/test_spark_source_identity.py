"""A Spark query that names no source reads one of its own (issue 54 item 2): named when the
query starts from a fresh checkpoint, carried by every offset of its offset log, read back
from there on a restart. A query that names a source reads that one."""

from __future__ import annotations

import pytest

from sluicegate.protocol.names import NAME_PATTERN
from sluicegate.spark.datasource import SluicegateStreamReader
from sluicegate.spark.offsets import SourceOffset, SplitEntry, SubtaskOffset, plan_next
from sluicegate.spark.options import SparkSourceOptions
from sluicegate.spark.source_identity import OWN_MARK, own_source_name

KAFKA = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "orders"}


def reader(**options: str) -> SluicegateStreamReader:
    return SluicegateStreamReader(SparkSourceOptions.from_options({**KAFKA, **options}))


def test_own_names_are_valid_source_names_different_every_time_and_keep_what_is_read() -> None:
    names = {own_source_name("orders") for _ in range(50)}
    assert len(names) == 50
    assert all(n.startswith(f"orders{OWN_MARK}") and NAME_PATTERN.fullmatch(n) for n in names)
    long = own_source_name("x" * 100)
    assert NAME_PATTERN.fullmatch(long) and len(long) <= 100


def test_two_fresh_queries_of_one_topic_get_sources_of_their_own() -> None:
    first, second = (SourceOffset.from_json(reader().initialOffset()) for _ in range(2))
    assert first.source is not None and second.source is not None
    assert first.source != second.source
    assert first.source.startswith(f"orders{OWN_MARK}")


def test_every_offset_planned_from_the_initial_one_names_the_source() -> None:
    initial = SourceOffset.from_json(reader().initialOffset())
    assert initial.source is not None
    entry = SplitEntry({"split_id": "orders-0"}, 1, 0, None, first=0)
    start = SourceOffset(
        initial.checkpoint_id, 0, {0: SubtaskOffset(1, 1, 1, False, {"orders-0": entry})}, {}, initial.source
    )
    # a restored offset read back from JSON keeps it, and so does the next one planned
    restored = SourceOffset.from_json(start.to_json())
    assert restored.source == initial.source
    assert plan_next(restored, {}, None, lambda split, base: base).source == initial.source


def test_a_restart_reads_the_source_its_offsets_name() -> None:
    written = SourceOffset(5, source=own_source_name("orders"))
    restarted = reader()  # a new stream reader, as Spark makes for a restarted query
    assert restarted._source_name(written) == written.source


def test_offsets_written_before_the_name_was_recorded_go_on_with_the_derived_name() -> None:
    assert reader()._source_name(SourceOffset(5)) == "orders"


def test_a_named_source_is_read_whatever_the_offsets_say(caplog: pytest.LogCaptureFixture) -> None:
    named = reader(source="shared")
    assert SourceOffset.from_json(named.initialOffset()).source == "shared"
    assert named._source_name(SourceOffset(5, source="orders.query-00000000")) == "shared"
    assert "it now reads source shared, as named" in caplog.text
