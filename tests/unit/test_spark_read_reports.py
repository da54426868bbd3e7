"""Executors' read figures reach the driver's metrics (spark/read_reports.py): a task's
report counts what it handed to Spark, the driver adds reports up, keeps per-split
series bounded, and refuses what is not a report of its query."""

from __future__ import annotations

import socket
from typing import Any

import pyarrow as pa
import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.spark.offsets import OwnedSplit, SourceOffset, SplitEntry, SubtaskOffset
from sluicegate.spark.options import SparkSourceOptions
from sluicegate.spark.planner import NextOffsetPlanner, offsets_behind_latest
from sluicegate.spark.read_reports import (
    ReadReport,
    ReadTally,
    SplitRead,
    counted,
    driver_host,
    report_url,
    send_report,
)
from sluicegate_connectors.sequence import SequenceSource


def batch(rows: int) -> pa.RecordBatch:
    return pa.record_batch({"value": pa.array(range(rows), pa.int64())})


def test_a_range_counts_the_rows_and_bytes_it_handed_over_once_read_to_its_end() -> None:
    reads: list[SplitRead] = []
    batches = counted(iter([batch(3), batch(5)]), reads, "p-0")
    assert next(batches).num_rows == 3 and reads == [], "nothing is counted before the range is read"
    assert [b.num_rows for b in batches] == [5]
    assert reads == [SplitRead("p-0", 8, batch(3).nbytes + batch(5).nbytes)]
    stopped: list[SplitRead] = []
    early = counted(iter([batch(3), batch(5)]), stopped, "p-1")
    next(early)
    early.close()  # a task stopped early reports nothing of that range
    assert stopped == []


def test_the_tally_adds_reports_per_subtask_and_per_split_and_keeps_the_latest_splits() -> None:
    tally = ReadTally("orders", max_split_series=2)
    tally.add(ReadReport("orders", 0, 1.5, (SplitRead("a", 10, 100), SplitRead("b", 5, 50))))
    tally.add(ReadReport("orders", 1, 0.25, (SplitRead("a", 2, 20),)))  # a moved to subtask 1
    tally.add(ReadReport("orders", 1, 0.5, (SplitRead("c", 1, 10),)))
    assert (tally.subtasks[0].rows, tally.subtasks[0].bytes, tally.subtasks[0].tasks) == (15, 150, 1)
    assert (tally.subtasks[1].rows, tally.subtasks[1].seconds, tally.subtasks[1].tasks) == (3, 0.75, 2)
    assert list(tally.splits) == ["a", "c"], "b, reported longest ago, is dropped"
    assert (tally.splits["a"].rows, tally.splits["a"].subtask) == (12, 1)
    tally.add(ReadReport("payments", 0, 1.0, (SplitRead("x", 1, 1),)))
    assert not tally.add_raw(b'{"source": "orders"}') and not tally.add_raw(b"\xff")
    assert tally.refused == 3 and "x" not in tally.splits


def test_a_report_survives_its_wire_form() -> None:
    report = ReadReport("orders", 3, 0.125, (SplitRead("orders-0", 7, 700),))
    assert ReadReport.from_json(report.to_json()) == report


def test_where_executors_send_reports() -> None:
    assert driver_host("127.0.0.1:9092") == "127.0.0.1"
    assert report_url("10.0.0.5", 9401) == "http://10.0.0.5:9401/reads"
    assert report_url("fe80::1", 9401) == "http://[fe80::1]:9401/reads"
    base = {"source": "s", "parallelism": "1", "kafka.bootstrap.servers": "127.0.0.1:9092"}
    assert SparkSourceOptions.from_options(base).report_url() is None, "no metricsPort: no reports"
    options = SparkSourceOptions.from_options({**base, "metricsPort": "9401"})
    assert options.report_url() == "http://127.0.0.1:9401/reads"
    named = SparkSourceOptions.from_options({**base, "metricsPort": "9401", "metricsHost": "driver-1"})
    assert named.report_url() == "http://driver-1:9401/reads"
    with pytest.raises(ConfigError) as bad:
        SparkSourceOptions.from_options({**base, "metricsPort": "9401", "metricsHost": "driver-1:9401"})
    assert bad.value.setting == "metricsHost"


def test_a_report_nobody_takes_is_dropped_without_failing_the_task(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    send_report(report_url("127.0.0.1", port), ReadReport("s", 0, 0.1, ()))
    send_report(report_url("127.0.0.1", port), ReadReport("s", 0, 0.1, ()))
    warned = [r for r in caplog.records if "could not send read figures" in r.getMessage()]
    assert len(warned) <= 1


def test_a_split_s_lag_is_what_planning_found_available_beyond_the_planned_position() -> None:
    """``sluicegate_spark_split_lag_records``: records available at the last planning and
    not planned yet (Spark's "offsets behind latest"), by the subtask owning the split."""
    source = SequenceSource.from_options({"splits": "2", "records_per_split": "100"})
    planner = NextOffsetPlanner("s", source, driver=None)  # type: ignore[arg-type]  # lag needs no driver
    wires: list[dict[str, Any]] = [
        {"split_id": f"seq-{k:05d}", "start": k * 100, "end": (k + 1) * 100, "position": k * 100} for k in (0, 1)
    ]
    for wire in wires:
        owned = OwnedSplit(wire["split_id"], wire, 1, wire["start"], wire["end"])
        assert planner._available_end(owned, wire["start"]) == wire["end"]  # bounded: all of it
    offset = SourceOffset(
        checkpoint_id=2,
        rows=130,
        subtasks={
            0: SubtaskOffset(1, splits={"seq-00000": SplitEntry(wires[0], 1, 60, 100)}),
            1: SubtaskOffset(1, splits={"seq-00001": SplitEntry(wires[1], 1, 170, 200)}),
        },
    )
    assert planner.lag_after(offset) == {"seq-00000": (0, 40), "seq-00001": (1, 30)}
    assert planner.lag_after(offset, most=1) == {"seq-00000": (0, 40)}, "the split furthest behind"


def test_offsets_behind_latest_count_every_split_from_the_consumed_offset_as_spark_s_source() -> None:
    wire: dict[str, Any] = {"split_id": "orders-0"}
    consumed = SourceOffset(
        checkpoint_id=3,
        subtasks={0: SubtaskOffset(1, splits={"orders-0": SplitEntry(wire, 1, 60, None)})},
        parked={"orders-1": SplitEntry({"split_id": "orders-1"}, 1, 25, None)},
    )
    available = {"orders-0": 100, "orders-1": 25, "orders-2": 7}
    # a split the offset does not hold yet (found since) counts from 0, as Spark's source counts
    assert offsets_behind_latest(available, consumed) == [40, 0, 7]
    assert offsets_behind_latest({}, consumed) == []
