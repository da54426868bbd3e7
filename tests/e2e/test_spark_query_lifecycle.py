"""A Spark query's whole life, through Spark's own sources and through sluicegate side by
side (issue 54): the query's checkpoint decides where it reads, whatever the trigger and
however it stopped, and a query that names no source reads one of its own.

For Kafka (``format("kafka")`` against ``format("sluicegate")``, the same options) and for
Parquet files (``readStream.parquet`` against ``format("sluicegate").load(path)``), each
side with a checkpoint of its own, every batch recorded by ``foreachBatch``:

- ``Trigger.AvailableNow`` run again from its checkpoint after new records (files)
  arrived: each run reads what arrived before it, in the same batches as Spark's;
- ``Trigger.Once`` twice from one checkpoint, new records in between;
- a query started at Spark's JSON ``startingOffsets``, restarted after new records;
- a query stopped mid-backlog (``maxOffsetsPerTrigger``) and restarted: every record once;
- ``maxOffsetsPerTrigger`` over partitions of 101, 11 and 1 records: Spark's batches;
- a second query of the same topic (directory), with a fresh checkpoint and
  ``startingOffsets=earliest``, while the first one's checkpoint stands: everything;
- records deleted past a checkpoint (``deleteRecords``): ``failOnDataLoss=false`` reads on
  from what is left, ``true`` fails the query;
- a batch DataFrame (``spark.read``) collected again after new records: to latest, it
  reads them too (Spark plans each action; sluicegate's tasks read to the end at run time),
  to JSON ``endingOffsets`` it stays where they say;
- one checkpoint run daily with ``Trigger.AvailableNow``, then as a processing-time stream,
  then daily again: ``readPath=auto`` reads the first and last on the native reader and the
  stream on the JVM path (read_path_choice.py), every record once.

One Spark process runs every scenario (this file as a script, as in
test_spark_kafka_parity.py: Spark's Kafka source is a jar on ``spark.jars``); the tests
below judge its results: each side's batches, as lists of values.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from processes import run_script

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.spark]

SIDES = ("spark", "sluicegate")
KAFKA_VALUE = "CAST(CAST(value AS STRING) AS BIGINT)"
"""The records' values are numbers: each batch is recorded as its sorted numbers."""
AVAILABLE_NOW = {"availableNow": True}
Batches = list[list[int]]
"""A run of a query: the sorted values of each batch it ran, in batch order."""


@pytest.fixture(scope="module")
def lifecycle(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """{scenario: {side: [run, ...]}}, a run being its batches (or {"error": ...})."""
    work = tmp_path_factory.mktemp("lifecycle")
    out, log = work / "results.json", work / "spark.log"
    prefix = secrets.token_hex(3)
    args = ["--out", str(out), "--work", str(work), "--prefix", prefix]
    returncode = run_script(__file__, args, log, kafka_bootstrap, timeout_s=840)
    assert returncode == 0, log.read_text()[-8000:]
    results: dict[str, Any] = json.loads(out.read_text())
    results["_log"] = log.read_text()
    results["_prefix"] = prefix
    return results


def values(run: Batches) -> list[int]:
    return sorted(v for batch in run for v in batch)


def same_batches(scenario: dict[str, Any]) -> list[Batches]:
    """The runs of a scenario, after asserting both sides ran the same batches."""
    assert scenario["sluicegate"] == scenario["spark"]
    runs: list[Batches] = scenario["spark"]
    return runs


# -- Kafka ------------------------------------------------------------------------------


def test_available_now_runs_again_read_what_arrived_before_each(lifecycle: dict[str, Any]) -> None:
    runs = same_batches(lifecycle["kafka_available_now"])
    assert [values(r) for r in runs] == [list(range(10)), list(range(10, 15)), list(range(15, 20))]
    assert all(len(r) == 1 for r in runs), "one batch a run, none empty"
    # Each run released the query's source at its end: the next took it back at once.
    own = [line for line in lifecycle["_log"].splitlines() if f"{lifecycle['_prefix']}-available-now.query-" in line]
    assert sum("its last coordinator released it when its host ended" in line for line in own) == 2, own
    assert not [line for line in own if "no coordinator committed for" in line]


def test_once_runs_read_what_arrived_before_each(lifecycle: dict[str, Any]) -> None:
    runs = same_batches(lifecycle["kafka_once"])
    assert [values(r) for r in runs] == [list(range(113)), list(range(113, 124))]
    # The first run's source process was SIGKILLed (one batch, no end the source sees): the
    # second found its coordinator's process gone and took the source back at once.
    own = [line for line in lifecycle["_log"].splitlines() if f"{lifecycle['_prefix']}-once.query-" in line]
    assert sum("its last coordinator's process" in line for line in own) == 1, own
    assert not [line for line in own if "no coordinator committed for" in line]


def test_a_restart_of_a_query_that_started_at_json_offsets_goes_on_from_its_checkpoint(
    lifecycle: dict[str, Any],
) -> None:
    runs = same_batches(lifecycle["kafka_json_start"])
    # partition 0 (even numbers) from its offset 3, partition 1 (odd) from its start
    assert [values(r) for r in runs] == [[1, 3, 5, 6, 7, 8, 9], [10, 11, 12, 13]]


def test_a_query_stopped_mid_backlog_reads_the_rest_after_its_restart(lifecycle: dict[str, Any]) -> None:
    for side in SIDES:
        stopped, restarted = lifecycle["kafka_stopped"][side]
        assert len(stopped) >= 3 and all(len(b) <= 20 for b in stopped + restarted), side
        # A stop that lands after foreachBatch ran but before Spark committed the batch leaves it
        # to the restart, which runs it again first, the same batch (foreachBatch is idempotent
        # by batch id): the committed batches hold every record once.
        committed = stopped[:-1] if restarted and restarted[0] == stopped[-1] else stopped
        assert values(committed + restarted) == list(range(200)), f"{side}: every record once"
    # The restart's batches (maxOffsetsPerTrigger=20 over 2 partitions) are cut as Spark's:
    # 10 records of each partition, the values in order, from wherever the stop left each
    # side (the stop lands after a batch or more, not at the same one on both sides).
    for side in SIDES:
        restarted = lifecycle["kafka_stopped"][side][1]
        start = restarted[0][0]
        assert restarted == [list(range(v, min(v + 20, 200))) for v in range(start, 200, 20)], side


def test_max_offsets_per_trigger_cuts_a_backlog_into_sparks_batches(lifecycle: dict[str, Any]) -> None:
    (run,) = same_batches(lifecycle["kafka_rate_limit"])
    assert values(run) == list(range(113))
    # Spark's rounding: 101/11/1 with a limit of 10 give 8, 1 and 1 first; no empty batch
    assert len(run[0]) == 10 and {101, 112} <= set(run[0]) and all(run)


def test_max_records_per_partition_cuts_a_streams_tasks_as_spark_cuts_them(lifecycle: dict[str, Any]) -> None:
    (batches,) = same_batches(lifecycle["kafka_partition_cut"])
    assert batches == [[1, 11, 25, 25, 25, 26]], "one batch, 101 records in 4 tasks of at most 30"


def test_a_second_query_of_a_topic_with_a_fresh_checkpoint_reads_it_all(lifecycle: dict[str, Any]) -> None:
    (run,) = same_batches(lifecycle["kafka_second_query"])
    assert values(run) == list(range(20))
    assert "reads a source of its own" in lifecycle["_log"]


def test_a_fresh_query_of_a_named_source_continues_where_it_stands_and_says_so(lifecycle: dict[str, Any]) -> None:
    first, second = lifecycle["kafka_named"]["sluicegate"]
    assert values(first) == list(range(20)), "the first query of the source reads from startingOffsets"
    assert values(second) == [], "the second one shares the first one's positions: nothing new to read"
    assert "was read before this query: a fresh query of a named source continues where the source" in lifecycle["_log"]


def test_records_deleted_past_a_checkpoint_are_skipped_or_fail_as_failOnDataLoss_says(
    lifecycle: dict[str, Any],
) -> None:
    skipping = same_batches(lifecycle["kafka_data_loss_skip"])
    assert [values(r) for r in skipping] == [list(range(10)), list(range(15, 20))]
    for side in SIDES:
        first, failed = lifecycle["kafka_data_loss_fail"][side]
        assert values(first) == list(range(10)) and "error" in failed, side


def test_one_checkpoint_read_daily_then_as_a_stream_then_daily_takes_each_trigger_s_path(
    lifecycle: dict[str, Any],
) -> None:
    daily, stream, again = lifecycle["kafka_trigger_switch"]["sluicegate"]
    assert values(daily) == list(range(10))
    # a stop that lands after foreachBatch ran but before Spark committed the batch leaves it
    # to the next run, which runs it again first, the same batch
    committed = stream[:-1] if again and stream and again[0] == stream[-1] else stream
    assert values(committed + again) == list(range(10, 25)), "every record once"
    said = [line for line in lifecycle["_log"].splitlines() if "trigger-switch: readPath=auto chose" in line]
    assert [line.split("readPath=auto chose ")[1].split(":")[0] for line in said] == ["python", "jvm", "python"], said


# -- files ------------------------------------------------------------------------------


def test_a_batch_dataframe_collected_again_reads_what_arrived_since_up_to_its_end(lifecycle: dict[str, Any]) -> None:
    first, second = same_batches(lifecycle["kafka_batch_again_latest"])
    assert values(first) == list(range(0, 20, 3))
    assert values(second) == sorted([*range(0, 20, 3), *range(20, 30)])  # partitions 1 and 2 too
    first, second = same_batches(lifecycle["kafka_batch_again_ending"])
    assert len(values(first)) == 5 and values(second) == sorted(values(first) + [n for n in range(20, 30) if n % 3])


def test_files_available_now_runs_again_read_the_new_files(lifecycle: dict[str, Any]) -> None:
    runs = same_batches(lifecycle["files_available_now"])
    assert [len(values(r)) for r in runs] == [2_000, 1_500]
    assert values(runs[0] + runs[1]) == list(range(3_500))


def test_files_once_runs_read_the_new_files(lifecycle: dict[str, Any]) -> None:
    runs = same_batches(lifecycle["files_once"])
    assert [len(values(r)) for r in runs] == [1_500, 1_000]


def test_files_second_query_with_a_fresh_checkpoint_reads_every_file(lifecycle: dict[str, Any]) -> None:
    (run,) = same_batches(lifecycle["files_second_query"])
    assert values(run) == list(range(3_500))


# -- the Spark side (this file run as a script) -----------------------------------------


class Recorder:
    """``foreachBatch`` of one query run: the sorted values of each batch, by batch id."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.batches: dict[int, list[int]] = {}
        self.lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = sorted(int(r[0]) for r in frame.selectExpr(self.column).collect())
        with self.lock:
            self.batches[batch_id] = rows

    def run(self) -> Batches:
        with self.lock:
            return [self.batches[b] for b in sorted(self.batches)]


def record_task_sizes(tasks: list[list[int]], frame: Any, batch_id: int) -> None:
    """``foreachBatch``: how many records each Spark task of the batch read."""
    tasks.append(sorted(len(rows) for rows in frame.rdd.glom().collect()))


class Scenarios:
    def __init__(self, spark: Any, bootstrap: str, work: Path, prefix: str) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.work = work
        self.prefix = prefix
        self.results: dict[str, dict[str, list[Any]]] = {}

    # -- Kafka helpers

    def topic(self, name: str, partitions: int) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = f"{self.prefix}-{name}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[topic].result(30)
        return topic

    def produce(self, topic: str, numbers: range, partitions: int) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        for n in numbers:
            producer.produce(topic, str(n).encode(), partition=n % partitions)
        assert producer.flush(30) == 0

    def kafka_reader(self, side: str, topic: str, **options: str) -> Any:
        reader = self.spark.readStream.format("kafka" if side == "spark" else "sluicegate")
        given = {"kafka.bootstrap.servers": self.bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
        for key, value in {**given, **options}.items():
            reader = reader.option(key, value)
        return reader.load()

    def kafka_batch_reader(self, side: str, topic: str, **options: str) -> Any:
        reader = self.spark.read.format("kafka" if side == "spark" else "sluicegate")
        for key, value in {"kafka.bootstrap.servers": self.bootstrap, "subscribe": topic, **options}.items():
            reader = reader.option(key, value)
        return reader.load()

    # -- files helpers

    def write_files(self, directory: Path, first_file: int, files: int, rows: int = 500) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        directory.mkdir(parents=True, exist_ok=True)
        for f in range(first_file, first_file + files):
            ids = pa.array(range(f * rows, (f + 1) * rows), pa.int64())
            tmp = directory / f".part-{f:04d}.parquet.tmp"  # hidden while written: neither side lists it
            pq.write_table(pa.table({"id": ids}), tmp)
            tmp.rename(directory / f"part-{f:04d}.parquet")
            os.utime(directory / f"part-{f:04d}.parquet", (time.time() - 60, time.time() - 60))

    def file_reader(self, side: str, directory: Path) -> Any:
        reader = self.spark.readStream.schema("id BIGINT")
        if side == "spark":
            return reader.parquet(str(directory))
        return reader.format("sluicegate").option("format", "parquet").load(str(directory))

    # -- running a query

    def run(
        self,
        scenario: str,
        side: str,
        frame: Any,
        checkpoint: str,
        trigger: dict[str, Any],
        column: str,
        stop_after_batches: int | None = None,
    ) -> None:
        recorder = Recorder(column)
        query = (
            frame.writeStream.foreachBatch(recorder)
            .option("checkpointLocation", str(self.work / "checkpoints" / checkpoint))
            .trigger(**trigger)
            .start()
        )
        error: str | None = None
        try:
            if stop_after_batches is None:
                query.awaitTermination(240)
            else:
                deadline = time.monotonic() + 240
                while len(recorder.run()) < stop_after_batches and time.monotonic() < deadline:
                    time.sleep(0.05)
        except Exception as exc:  # the query failed: its error is the run's result
            error = str(exc)[:2000]
        finally:
            query.stop()
        run: Any = recorder.run() if error is None else {"error": error, "batches": recorder.run()}
        self.results.setdefault(scenario, {}).setdefault(side, []).append(run)
        print(f"{scenario} {side} run {len(self.results[scenario][side])}: {json.dumps(run)[:300]}", flush=True)

    def both_kafka(
        self, scenario: str, topic: str, trigger: dict[str, Any], stop_after: int | None = None, **options: str
    ) -> None:
        """A run of ``scenario`` on each side, from each side's checkpoint of the scenario."""
        for side in SIDES:
            frame = self.kafka_reader(side, topic, **options)
            self.run(scenario, side, frame, f"{scenario}-{side}", trigger, KAFKA_VALUE, stop_after)

    def both_files(self, scenario: str, directory: Path, trigger: dict[str, Any]) -> None:
        for side in SIDES:
            self.run(scenario, side, self.file_reader(side, directory), f"{scenario}-{side}", trigger, "id")

    # -- the scenarios

    def kafka_available_now_and_second_query(self) -> None:
        topic = self.topic("available-now", 2)
        for numbers in (range(10), range(10, 15), range(15, 20)):
            self.produce(topic, numbers, 2)
            self.both_kafka("kafka_available_now", topic, AVAILABLE_NOW)
        # a named source is shared on purpose: a fresh query of it continues where it stands
        for run in ("first", "second"):
            frame = self.kafka_reader("sluicegate", topic, source=f"{self.prefix}-shared")
            self.run("kafka_named", "sluicegate", frame, f"named-{run}", AVAILABLE_NOW, KAFKA_VALUE)
        # a second query of the topic, fresh checkpoint, while the first one's stands
        self.both_kafka("kafka_second_query", topic, AVAILABLE_NOW)

    def kafka_once(self) -> None:
        topic = self.topic("once", 3)
        for numbers in (range(113), range(113, 124)):
            self.produce(topic, numbers, 3)
            self.both_kafka("kafka_once", topic, {"once": True})

    def kafka_json_start(self) -> None:
        """A fresh checkpoint at Spark's JSON starting offsets, then a restart: the restart
        goes on from the checkpoint, whatever startingOffsets say."""
        topic = self.topic("json-start", 2)
        starting = json.dumps({topic: {"0": 3, "1": -2}})
        for numbers in (range(10), range(10, 14)):
            self.produce(topic, numbers, 2)
            self.both_kafka("kafka_json_start", topic, AVAILABLE_NOW, startingOffsets=starting)

    def kafka_stopped(self) -> None:
        topic = self.topic("stopped", 2)
        self.produce(topic, range(200), 2)
        for trigger, stop_after in (({"processingTime": "0 seconds"}, 3), (AVAILABLE_NOW, None)):
            self.both_kafka("kafka_stopped", topic, trigger, stop_after, maxOffsetsPerTrigger="20")

    def kafka_rate_limit(self) -> None:
        """KafkaMicroBatchSourceSuite's maxOffsetsPerTrigger case: 101, 11 and 1 records."""
        from confluent_kafka import Producer

        topic = self.topic("rate-limit", 3)
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        n = 0
        for partition, count in ((0, 101), (1, 11), (2, 1)):
            for _ in range(count):
                producer.produce(topic, str(n).encode(), partition=partition)
                n += 1
        assert producer.flush(30) == 0
        for side in SIDES:  # a stream's tasks cut by maxRecordsPerPartition (Spark 4)
            tasks: list[list[int]] = []
            reader = self.kafka_reader(side, topic, maxRecordsPerPartition="30")
            query = (
                reader.writeStream.foreachBatch(functools.partial(record_task_sizes, tasks))
                .option("checkpointLocation", str(self.work / "checkpoints" / f"cut-{side}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(240)
            self.results.setdefault("kafka_partition_cut", {})[side] = [tasks]
            print(f"kafka_partition_cut {side}: {tasks}", flush=True)
        self.both_kafka("kafka_rate_limit", topic, AVAILABLE_NOW, maxOffsetsPerTrigger="10")

    def kafka_data_loss(self) -> None:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        topic = self.topic("data-loss", 1)
        self.produce(topic, range(10), 1)
        for scenario in ("kafka_data_loss_skip", "kafka_data_loss_fail"):
            self.both_kafka(scenario, topic, AVAILABLE_NOW)
        self.produce(topic, range(10, 20), 1)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.delete_records([TopicPartition(topic, 0, 15)]).values():
            future.result(30)
        for scenario, fail in (("kafka_data_loss_skip", "false"), ("kafka_data_loss_fail", "true")):
            self.both_kafka(scenario, topic, AVAILABLE_NOW, failOnDataLoss=fail)

    def kafka_batch_collected_again(self) -> None:
        """A ``spark.read`` DataFrame collected, then collected again after new records: to
        latest (with ``minPartitions`` cutting the ranges, and a partition empty at the
        first collect) it reads the new records too; to JSON ``endingOffsets`` it does not."""
        topic = self.topic("collected-again", 3)
        self.produce(topic, range(0, 20, 3), 1)  # partition 0 only: 1 and 2 empty
        ending = json.dumps({topic: {"0": 5, "1": -1, "2": -1}})
        frames = {
            (scenario, side): self.kafka_batch_reader(side, topic, **options)
            for scenario, options in (
                ("kafka_batch_again_latest", {"minPartitions": "4"}),
                ("kafka_batch_again_ending", {"endingOffsets": ending}),
            )
            for side in SIDES
        }
        for numbers in (range(0, 20, 3), range(20, 30)):
            if numbers.start:
                self.produce(topic, numbers, 3)
            for (scenario, side), frame in frames.items():
                rows = sorted(int(r[0]) for r in frame.selectExpr(KAFKA_VALUE).collect())
                self.results.setdefault(scenario, {}).setdefault(side, []).append([rows])

    def kafka_trigger_switch(self) -> None:
        topic = self.topic("trigger-switch", 2)
        self.produce(topic, range(10), 2)
        frame = self.kafka_reader("sluicegate", topic)
        self.run("kafka_trigger_switch", "sluicegate", frame, "trigger-switch", AVAILABLE_NOW, KAFKA_VALUE)
        self.produce(topic, range(10, 20), 2)
        frame = self.kafka_reader("sluicegate", topic)
        stream = {"processingTime": "0 seconds"}
        self.run("kafka_trigger_switch", "sluicegate", frame, "trigger-switch", stream, KAFKA_VALUE, 1)
        self.produce(topic, range(20, 25), 2)
        frame = self.kafka_reader("sluicegate", topic)
        self.run("kafka_trigger_switch", "sluicegate", frame, "trigger-switch", AVAILABLE_NOW, KAFKA_VALUE)

    def files(self) -> None:
        directory = self.work / "files"
        self.write_files(directory, 0, 4)
        for files in (0, 3):
            self.write_files(directory, 4, files)
            self.both_files("files_available_now", directory, AVAILABLE_NOW)
        self.both_files("files_second_query", directory, AVAILABLE_NOW)
        once = self.work / "files-once"
        for first, files in ((0, 3), (3, 2)):
            self.write_files(once, first, files)
            self.both_files("files_once", once, {"once": True})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()
    from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars
    from sluicegate.spark.job import spark_session

    jars = ",".join(str(p) for p in ensure_spark_kafka_jars())
    spark = spark_session("sluicegate-lifecycle", quiet=True, extra_conf={"spark.jars": jars})
    scenarios = Scenarios(spark, os.environ["KAFKA_BOOTSTRAP_SERVERS"], Path(args.work), args.prefix)
    only = os.environ.get("LIFECYCLE_ONLY", "")
    scenarios_in_order = (
        "kafka_available_now_and_second_query",
        "kafka_once",
        "kafka_json_start",
        "kafka_stopped",
        "kafka_rate_limit",
        "kafka_data_loss",
        "kafka_trigger_switch",
        "kafka_batch_collected_again",
        "files",
    )
    for name in scenarios_in_order:
        if not only or name in only.split(","):
            getattr(scenarios, name)()
    spark.stop()
    Path(args.out).write_text(json.dumps(scenarios.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
