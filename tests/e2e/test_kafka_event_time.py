"""A lagging Kafka partition and Spark's watermark: Spark's own Kafka source against
``format("sluicegate")`` with planning-time event-time alignment (``alignmentMaxDriftMs``).

Spark has one global watermark per query: the largest event time seen so far minus the
``withWatermark`` delay. Spark's Kafka source plans each micro-batch by offsets only
(``maxOffsetsPerTrigger`` shared across partitions in proportion to their backlog), so
when one partition holds a backlog of older events, the current partitions push the
watermark past that backlog within the first batches, and the backlog's rows that come
in later batches are behind it: the windowed aggregation drops them
(``numRowsDroppedByWatermark``). sluicegate's Spark source with ``alignmentMaxDriftMs``
never plans a split past the earliest next event time of the query's splits plus the
drift, so the lagging partition is read first and, with a drift no larger than the
watermark delay, no row is ever behind the watermark.

The topic: 4 partitions, one record per ``STEP_MS`` of event time (CreateTime set by
the producer). Partitions 1..3 hold ``CURRENT_MS`` of events from T0 on; partition 0
holds a backlog from ``T0 - BACKLOG_MS`` to the same end. ``retention.ms=-1``: records
with old CreateTime would otherwise be deleted by retention at once.

The same query runs twice, one after the other, each in its own SparkSession of one Spark
driver process (this file is its script, ``python test_kafka_event_time.py SPEC``):
``withWatermark("timestamp", "2 minutes")``, 1-minute tumbling windows on ``timestamp``,
count, update mode into ``foreachBatch``, ``Trigger.AvailableNow`` with a per-batch row
limit that makes several batches:

(a) ``readStream.format("kafka")`` (Spark's source, jars from ``ensure_spark_kafka_jars``);
(b) ``readStream.format("sluicegate")``, connector ``kafka``, 4 reader subtasks,
    ``alignmentMaxDriftMs`` = 60 s, with a coordinator process for the source.

Dropped rows are summed over the stateful operator of every batch's progress. Spark
counts them after the partial aggregation (one row per window and input partition),
so it is a count of partial aggregates, not of records; the records the native run lost
are shown as well (the produced total minus its window table's total).

Which window table is exact: in update mode every batch emits each window it changed
with the window's whole count so far, and a window's state is evicted only once the
watermark passes its end; a row that comes for it after that is late, i.e. dropped and
counted. So with zero drops, the last emitted count of each window (the highest batch
that emitted it) is the window's exact count, for the windows that closed and for the
last ones that stay open at the end of an AvailableNow run alike (in append mode those
would never be emitted). That table is compared with the one computed from the
produced timestamps, window for window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from processes import Proc, ProcessGroup, support_pythonpath

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(360), pytest.mark.spark]

PARTITIONS = 4
STEP_MS = 50
"""One record per 50 ms of event time in every partition."""
CURRENT_MS = 4 * 60_000
"""Partitions 1..3: 4 minutes of events from T0 (4,800 records each)."""
BACKLOG_MS = 8 * 60_000
"""Partition 0 starts 8 minutes before T0 (14,400 records): 28,800 records in all. The
aligned run advances at most the drift (60 s) of event time per batch, so it takes about
(BACKLOG_MS + CURRENT_MS) / DRIFT_MS = 12 batches (an hour's backlog would take 64)."""
WINDOW_MS = 60_000
WATERMARK_DELAY = "2 minutes"
DRIFT_MS = 60_000
"""alignmentMaxDriftMs: at most the watermark delay, so no aligned row is ever late."""
MAX_PER_TRIGGER = 3_200
"""9 batches for Spark's source, which shares each by backlog: 1,600 records (80 s) of
partition 0 and 533 (27 s) of each other partition. Spark filters late rows with the
watermark of the batch before (the one its previous batch evicted with), so batches 0
and 1 drop nothing; from batch 2 on the watermark is past T0 - 93 s while partition 0 is
still minutes before it: about 5 of its 8 minutes of backlog are dropped. Deterministic:
Spark's source plans by offsets only."""
QUERY_TIMEOUT_S = 120.0


# -- the data ---------------------------------------------------------------------------


def _timestamps(t0: int) -> dict[int, list[int]]:
    """partition -> the CreateTime of each of its records, in offset order."""
    end = t0 + CURRENT_MS
    out = {0: list(range(t0 - BACKLOG_MS, end, STEP_MS))}
    for p in range(1, PARTITIONS):
        out[p] = list(range(t0, end, STEP_MS))
    return out


def _create_and_fill(bootstrap: str, topic: str, timestamps: dict[int, list[int]]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1, config={"retention.ms": "-1"})
    for future in admin.create_topics([new], operation_timeout=30).values():
        future.result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for partition, stamps in timestamps.items():
        for i, ts in enumerate(stamps):
            while True:
                try:
                    producer.produce(topic, value=b"%d-%d" % (partition, i), partition=partition, timestamp=ts)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
    assert producer.flush(60) == 0, "not every record was delivered"


def _expected_windows(timestamps: dict[int, list[int]]) -> dict[int, int]:
    return dict(Counter(ts // WINDOW_MS * WINDOW_MS for stamps in timestamps.values() for ts in stamps))


# -- the runs, in a Spark process of their own (this file run as a script) -------------------


def child(spec: dict[str, Any]) -> None:
    """Run the windowed query over each side in turn, each in its own SparkSession of one
    Spark driver (one JVM start, not two); write the window tables and progress as JSON."""
    from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars
    from sluicegate.spark.job import spark_session

    conf = {
        "spark.jars": ",".join(str(p) for p in ensure_spark_kafka_jars()),
        "spark.sql.streaming.numRecentProgressUpdates": "10000",
    }
    spark = spark_session("event-time", "local[2]", shuffle_partitions=2, quiet=True, extra_conf=conf)
    # format("sluicegate") is registered in the session spark_session made, not in new ones
    results = {"native": _run_query(spark.newSession(), "native", spec)}
    _wait_for_text(Path(spec["coordinator_log"]), "is serving", 90.0)
    results["sluicegate"] = _run_query(spark, "sluicegate", spec)
    spark.stop()
    Path(spec["out"]).write_text(json.dumps(results), encoding="utf-8")


def _wait_for_text(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and text in path.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path.name} has no {text!r} after {timeout_s} s")
        time.sleep(0.2)


def _run_query(spark: Any, side: str, spec: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    bootstrap, topic, limit = spec["bootstrap"], spec["topic"], str(spec["max_per_trigger"])
    if side == "native":
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", limit)
        )
    else:
        reader = spark.readStream.format("sluicegate").option("source", spec["source"]).option("connector", "kafka")
        for key, value in spec["connector_options"].items():
            reader = reader.option(f"option.{key}", value)
        reader = (
            reader.option("parallelism", str(PARTITIONS))
            .option("maxRecordsPerTrigger", limit)
            .option("alignmentMaxDriftMs", str(spec["drift_ms"]))
            .option("kafka.bootstrap.servers", bootstrap)
        )
    windows = (
        reader.load()
        .withWatermark("timestamp", WATERMARK_DELAY)
        .groupBy(F.window("timestamp", "1 minute").alias("window"))
        .agg(F.count(F.lit(1)).alias("count"))
    )
    table: dict[int, int] = {}

    def write_batch(batch: Any, batch_id: int) -> None:
        # batches run one after the other: a later batch's row for a window replaces the earlier
        for row in batch.select(F.expr("unix_millis(window.start)").alias("start"), "count").collect():
            table[int(row["start"])] = int(row["count"])

    started = time.monotonic()
    query = (
        windows.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(Path(spec["workdir"]) / f"checkpoint-{side}"))
        .trigger(availableNow=True)
        .start()
    )
    deadline = started + spec["timeout"]
    while not query.awaitTermination(1):
        if time.monotonic() > deadline:
            query.stop()
            raise RuntimeError(f"the {side} query did not finish within {spec['timeout']} s")
    if query.exception() is not None:
        raise RuntimeError(f"the {side} query failed: {query.exception()}")
    return {
        "elapsed_s": time.monotonic() - started,
        "progress": [json.loads(p.json) for p in query.recentProgress],
        "windows": {str(k): v for k, v in sorted(table.items())},
    }


# -- the parent -----------------------------------------------------------------------------


def _run_spark(procs: ProcessGroup, tmp_path: Path, spec: dict[str, Any]) -> dict[str, Any]:
    out = tmp_path / "results.json"
    spec = {**spec, "out": str(out), "workdir": str(tmp_path), "timeout": QUERY_TIMEOUT_S}
    log_path = tmp_path / "spark.log"
    args = [str(Path(__file__).resolve()), json.dumps(spec)]
    with log_path.open("ab") as handle:
        popen = subprocess.Popen(
            [sys.executable, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=dict(
                os.environ,
                KAFKA_BOOTSTRAP_SERVERS=procs.bootstrap,
                PYTHONPATH=support_pythonpath(),
                PYTHONUNBUFFERED="1",
            ),
            start_new_session=True,
        )
    proc = Proc("spark", popen, log_path, args)
    procs.procs.append(proc)
    assert proc.wait(2 * QUERY_TIMEOUT_S + 60) == 0, f"the Spark run failed:\n{proc.tail(60)}\n{procs.describe()}"
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def _batches(progress: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The progress of each batch that ran (an idle trigger reports the next batch's id
    with nothing in it): the last report per batch id."""
    return {int(p["batchId"]): p for p in progress if p.get("stateOperators")}


def _dropped(progress: list[dict[str, Any]]) -> int:
    return sum(
        int(op.get("numRowsDroppedByWatermark") or 0) for p in _batches(progress).values() for op in p["stateOperators"]
    )


def _input_rows(progress: list[dict[str, Any]]) -> int:
    return sum(int(p.get("numInputRows") or 0) for p in _batches(progress).values())


def test_a_lagging_partition_is_dropped_by_spark_watermark_and_aligned_by_sluicegate(
    procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    topic = f"{unique_source}-events"
    t0 = (int(time.time() * 1000) - CURRENT_MS - 10 * 60_000) // WINDOW_MS * WINDOW_MS + 250  # all in the past
    timestamps = _timestamps(t0)
    total = sum(len(s) for s in timestamps.values())
    _create_and_fill(kafka_bootstrap, topic, timestamps)
    expected = _expected_windows(timestamps)

    connector_options = {"topics": topic, "bootstrap_servers": kafka_bootstrap, "stopping_offsets": "latest"}
    args = ["coordinator", "--source", unique_source, "--connector", "kafka", "--max-parallelism", str(PARTITIONS)]
    for key, value in connector_options.items():
        args += ["--option", f"{key}={value}"]
    # started after the data is in: stopping_offsets=latest are the ends at its first discovery
    coordinator = procs.start(f"coordinator-{unique_source}", args)
    results = _run_spark(
        procs,
        tmp_path,
        {
            "bootstrap": kafka_bootstrap,
            "topic": topic,
            "max_per_trigger": MAX_PER_TRIGGER,
            "source": unique_source,
            "connector_options": connector_options,
            "drift_ms": DRIFT_MS,
            "coordinator_log": str(coordinator.log_path),
        },
    )
    native, aligned = results["native"], results["sluicegate"]

    native_dropped, aligned_dropped = _dropped(native["progress"]), _dropped(aligned["progress"])
    native_table = {int(k): v for k, v in native["windows"].items()}
    aligned_table = {int(k): v for k, v in aligned["windows"].items()}
    native_lost = total - sum(native_table.values())
    print(
        f"\nnumRowsDroppedByWatermark: Spark's Kafka source {native_dropped} "
        f"({native_lost} of {total} records missing from its windows, "
        f"{len(_batches(native['progress']))} batches, {native['elapsed_s']:.1f} s); "
        f"sluicegate with alignmentMaxDriftMs={DRIFT_MS} {aligned_dropped} "
        f"({len(_batches(aligned['progress']))} batches, {aligned['elapsed_s']:.1f} s); "
        f"test {time.monotonic() - started:.1f} s"
    )

    # both read every record; Spark's source loses some of them to its watermark
    assert _input_rows(native["progress"]) == total
    assert native_dropped > 0, "Spark's own Kafka source dropped nothing: the data no longer shows the point"
    assert native_lost > 0
    # sluicegate: nothing dropped, and the window table is exact
    assert _input_rows(aligned["progress"]) == total
    assert aligned_dropped == 0
    assert aligned_table == expected


if __name__ == "__main__":
    child(json.loads(sys.argv[1]))
