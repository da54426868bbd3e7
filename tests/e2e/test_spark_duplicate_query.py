"""Two Spark queries started on one source (issue 11, item 1), real Spark and Kafka: the
second fails at start with an error naming the holder of the subtasks, and the first is
not disturbed (it keeps its attempts and keeps reading). Registrations of a Spark query
are exclusive: they do not fence a live attempt of another incarnation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import ProcessGroup, readers_messages
from pyspark.errors import StreamingQueryException

from sluicegate.spark.job import spark_session

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240), pytest.mark.spark]

OPTIONS = {"splits": "4", "records_per_split": "10000000"}
"""Far more than the test reads: maxRecordsPerTrigger keeps the first query busy throughout."""


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    yield group
    group.stop_all()


def _query(
    spark: Any, source: str, bootstrap: str, name: str, checkpoint: Path, options: dict[str, str] = OPTIONS
) -> Any:
    reader = spark.readStream.format("sluicegate").option("source", source).option("parallelism", "2")
    reader = reader.option("kafka.bootstrap.servers", bootstrap).option("sessionTimeoutMs", "3000")
    reader = reader.option("maxRecordsPerTrigger", "5000")
    for key, value in options.items():
        reader = reader.option(f"option.{key}", value)
    return (
        reader.load()
        .writeStream.format("noop")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def _rows(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def test_a_second_query_on_one_source_fails_at_start_and_the_first_runs_on(
    procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    procs.coordinator(unique_source, 2, OPTIONS, "--session-timeout-ms", "3000")
    spark = spark_session("sluicegate-duplicate-query", quiet=True)
    first = second = None
    try:
        first = _query(spark, unique_source, kafka_bootstrap, "first", tmp_path / "cp-1")
        deadline = time.monotonic() + 90
        while _rows(first) == 0:
            assert time.monotonic() < deadline, f"the first query read nothing: {first.lastProgress}"
            assert first.exception() is None, first.exception()
            time.sleep(0.5)
        before = asyncio.run(readers_messages(kafka_bootstrap, unique_source))

        second = _query(spark, unique_source, kafka_bootstrap, "second", tmp_path / "cp-2")
        # refused for longer than a session timeout (3 s) plus two heartbeats: it fails
        with pytest.raises(StreamingQueryException) as failure:
            second.awaitTermination(60)
        error = " ".join(str(failure.value).split())
        assert "held by another live reader" in error and "another query or reader runs this source" in error, error

        # the first query is not disturbed: no new attempt, and it keeps reading (a batch
        # after this one reads rows; recentProgress keeps only the last 100 batches)
        batch = first.lastProgress["batchId"]
        deadline = time.monotonic() + 30
        while not any(p["batchId"] > batch and p["numInputRows"] > 0 for p in first.recentProgress):
            assert first.isActive and first.exception() is None, first.exception()
            assert time.monotonic() < deadline, (
                f"the first query read nothing after batch {batch}: {first.lastProgress}"
            )
            time.sleep(0.5)
        after = asyncio.run(readers_messages(kafka_bootstrap, unique_source))
        registered = [m for m in after if m["type"] == "ReaderRegistered"]
        assert registered == [m for m in before if m["type"] == "ReaderRegistered"]
        fences = [m for m in after[len(before) :] if m["type"] == "SplitsReleased" and m["body"]["failed_attempt"]]
        assert not fences, fences
        assert any(m["type"] == "RegistrationRefused" for m in after[len(before) :])

        # a query that brings another definition of the source fails at once, naming the option
        other = {**OPTIONS, "records_per_split": "5"}
        started = time.monotonic()
        third = _query(spark, unique_source, kafka_bootstrap, "third", tmp_path / "cp-3", other)
        with pytest.raises(StreamingQueryException) as failure:
            third.awaitTermination(60)
        error = " ".join(str(failure.value).split())
        assert "option records_per_split: 10000000 (source) vs 5 (given)" in error, error
        assert time.monotonic() - started < 30, "the refusal took longer than a start"
        assert first.isActive and first.exception() is None
    finally:
        for query in (first, second):
            if query is not None and query.isActive:
                query.stop()
        spark.stop()
