"""The main job is event-time correct on an unbounded source (issue 12, item 4), real
Spark and Kafka: an unbounded ``sequence`` source whose 4 splits are skewed by 90 s of
event time each (split 3 is 4.5 minutes ahead of split 0), read with
``alignment_max_drift_ms`` = 20 s, so the job declares ``withWatermark`` of 20 s.

- no row is dropped by the watermark (``numRowsDroppedByWatermark`` stays 0), though
  the skew is far beyond the watermark's delay: alignment keeps split 3 back;
- the state is evicted: the aggregation holds a few windows at the end, while many
  more were written;
- every window closed by the final watermark is exact (count and sum).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from processes import ProcessGroup

from sluicegate.spark.job import JobSettings, expected_sequence_windows, read_windows, spark_session, start_query

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300), pytest.mark.spark]

DRIFT_MS = 20_000
OPTIONS = {"splits": "4", "records_per_split": "unbounded", "split_time_offset_ms": "90000"}
BATCHES = 16
"""24,000 rows a batch is about one minute of event time per split: 16 batches read past
the skew and close several windows."""


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    yield group
    group.stop_all()


def _watermark_ms(progress: dict[str, Any]) -> int:
    text = (progress.get("eventTime") or {}).get("watermark", "1970-01-01T00:00:00.000Z")
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def test_with_alignment_the_watermark_drops_no_row_evicts_state_and_closed_windows_are_exact(
    procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    procs.coordinator(unique_source, 4, OPTIONS)
    config = JobSettings(
        source=unique_source,
        output_dir=tmp_path / "windows",
        checkpoint_dir=tmp_path / "checkpoint",
        bootstrap_servers=kafka_bootstrap,
        parallelism=4,
        connector_options=OPTIONS,
        max_records_per_trigger=24_000,
        available_now=False,
        alignment_max_drift_ms=DRIFT_MS,
    )
    spark = spark_session("sluicegate-event-time", quiet=True)
    try:
        query = start_query(spark, config)
        try:
            deadline = time.monotonic() + 200
            while (query.lastProgress or {}).get("batchId", -1) < BATCHES:
                assert time.monotonic() < deadline, f"only {query.lastProgress} after 200 s"
                assert query.exception() is None, query.exception()
                time.sleep(0.5)
            progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0 or p.get("stateOperators")]
        finally:
            query.stop()
        table = read_windows(spark, config.output_dir)
    finally:
        spark.stop()

    states = [p["stateOperators"][0] for p in progress if p.get("stateOperators")]
    dropped = sum(s.get("numRowsDroppedByWatermark", 0) for s in states)
    assert dropped == 0, f"{dropped} rows dropped by the watermark"

    watermark = max(_watermark_ms(p) for p in progress)
    closed = [row for row in table if row.end_ms <= watermark]
    expected = expected_sequence_windows(OPTIONS, until_ms=watermark)
    assert len(expected) >= 3, f"the watermark ({watermark}) closed too few windows: {len(expected)}"
    assert closed == expected

    written = {row.start_ms for row in table}
    held = states[-1]["numRowsTotal"]
    assert held <= 4 < len(written), f"state holds {held} windows of {len(written)} written"
    print(
        f"{sum(p['numInputRows'] for p in progress)} rows in {len(progress)} batches; 0 dropped; "
        f"{len(closed)} closed windows exact; state holds {held} of {len(written)} windows"
    )
