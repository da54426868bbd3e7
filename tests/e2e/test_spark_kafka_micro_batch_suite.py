"""Spark's ``KafkaMicroBatchSourceSuite`` (streams of Kafka) as the specification (issue 54
item 3): its cases that PySpark can observe, each run through Spark's own Kafka source and
through ``format("sluicegate")`` with the same options on the same data, side by side.

A case is the suite's ``testStream``: a query started, records written, the query's
answer checked after ``processAllAvailable`` (every committed batch, recorded by
``foreachBatch`` across the query's restarts), stopped and started again from its
checkpoint, records written while it is stopped, partitions added. Both sides run each step
together; where the suite names the answer, both must give it; where Spark fails the query,
ours must fail too (its message is ours).

- where a query starts (``startingOffsets`` latest / earliest / JSON with -2 and -1,
  ``startingOffsetsByTimestamp``, ``startingTimestamp``) under each subscription
  (``assign``, ``subscribe``, ``subscribePattern``), with ``failOnDataLoss`` true and
  false: restarts, records written while stopped, partitions added (read from their
  start); a start timestamp no record of a partition matches, under each
  ``startingOffsetsByTimestampStrategy``;
- ``Trigger.AvailableNow``: its batches; the topic deleted and created again under it
  with fewer partitions, or with fewer records; a batch that fails, run again after the
  topic grew (SPARK-53560);
- initial offsets through a restart of an empty topic, a rate limit of Long.MaxValue
  (SPARK-26718), ``numInputRows`` in the progress;
- pattern subscriptions whose topics are deleted (``failOnDataLoss=false``: read on) or
  created again between runs with fewer records (fails; ``failOnDataLoss=false``: read on
  from the new end);
- records: a watermarked window, transactions written while a batch runs (SPARK-25495),
  null keys and values (SPARK-27494), the column types, ``minPartitions``, a timestamp
  no Spark timestamp holds (SPARK-56243);
- records deleted before a query's start offsets with ``failOnDataLoss=false``
  (KafkaDontFailOnDataLossSuite): no record twice;
- what ``load()`` refuses: Spark's bad source options and unsupported ``kafka.*`` settings.

Cases run four at a time, each on topics of its own, in one Spark process (this file as a
script, as in test_spark_kafka_parity.py); the tests below judge its results.
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
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from processes import run_script

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.spark]

SIDES = ("spark", "sluicegate")
LONG_MAX = 9223372036854775807
INT_VALUE = "CAST(CAST(value AS STRING) AS BIGINT)"
TRIGGER = {"processingTime": "100 milliseconds"}
STARTS = (
    ("assign", "earliest", True),
    ("assign", "offsets", False),
    ("subscribe", "latest", True),
    ("subscribe", "timestamps", False),
    ("subscribe", "global_timestamp", True),
    ("pattern", "earliest", False),
    ("pattern", "latest", True),
    ("pattern", "timestamps", False),
)
"""The suite's loop (every start under every subscription, failOnDataLoss true and false)
cut to each start and each subscription at least once, failOnDataLoss alternating."""
Step = dict[str, Any]
"""A step's result: ``{"answer": [...]}`` (sorted values), ``{"error": "..."}``, or what the
step records (``{"batches": ...}``, ``{"metrics": ...}``)."""


@pytest.fixture(scope="module")
def suite(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """{case: {side: [step result, ...]}}."""
    work = tmp_path_factory.mktemp("micro-batch-suite")
    out, log = work / "results.json", work / "spark.log"
    args = ["--out", str(out), "--work", str(work), "--prefix", secrets.token_hex(3)]
    returncode = run_script(__file__, args, log, kafka_bootstrap, timeout_s=840)
    assert returncode == 0, log.read_text()[-8000:]
    results: dict[str, Any] = json.loads(out.read_text())
    return results


def same(case: dict[str, list[Step]]) -> list[Any]:
    """The answers of a case's checks, after asserting both sides gave the same steps."""
    spark, ours = case["spark"], case["sluicegate"]
    assert not [step for step in spark if "error" in step], spark
    assert ours == spark
    return [step["answer"] for step in spark if "answer" in step]


def failed(side: list[Step]) -> str:
    """The error a side's query ended with (its last step)."""
    assert side and "error" in side[-1], f"did not fail: {side}"
    error: str = side[-1]["error"]
    return error


def up_to(*groups: range | list[int]) -> list[int]:
    return sorted(v for group in groups for v in group)


# -- where a query starts, under each subscription ----------------------------------------

LATEST = [[], [1, 2, 3], [1, 2, 3], up_to(range(1, 7)), up_to(range(1, 9)), up_to(range(1, 17))]
EARLIEST = [up_to(range(1, 7)), up_to(range(1, 7)), up_to(range(1, 9)), up_to(range(1, 17))]
AT_OFFSETS = up_to([-20, -21, -22, 0, 1, 2, 11, 12, 22])
AT_TIMESTAMPS = up_to([-21, -22, -11, -12, 2, 12, 20, 21, 22])
AT_GLOBAL_TIMESTAMP = up_to([-21, -22, -11, -12, 2, 12, 23, 24])


def timestamp_answers(first: list[int]) -> list[list[int]]:
    return [first, first, up_to(first, [30, 31, 32]), up_to(first, [30, 31, 32], range(40, 45))]


EXPECTED_STARTS = {
    "latest": LATEST,
    "earliest": EARLIEST,
    "offsets": [AT_OFFSETS, AT_OFFSETS, up_to(AT_OFFSETS, range(30, 35))],
    "timestamps": timestamp_answers(AT_TIMESTAMPS),
    "global_timestamp": timestamp_answers(AT_GLOBAL_TIMESTAMP),
}


@pytest.mark.parametrize(("strategy", "start", "fail_on_data_loss"), STARTS)
def test_a_query_starts_restarts_and_reads_added_partitions_as_spark_does(
    suite: dict[str, Any], strategy: str, start: str, fail_on_data_loss: bool
) -> None:
    answers = same(suite[f"{strategy}-{start}-{str(fail_on_data_loss).lower()}"])
    assert answers == EXPECTED_STARTS[start]


@pytest.mark.parametrize("by", ["partition", "global"])
def test_a_start_time_a_partition_has_no_record_for_fails_unless_the_strategy_is_latest(
    suite: dict[str, Any], by: str
) -> None:
    for strategy in ("default", "error"):
        case = suite[f"unmatched-{by}-{strategy}"]
        failed(case["spark"]), failed(case["sluicegate"])
    first = up_to([-21, -22, -11, -12, 2, 12])
    assert same(suite[f"unmatched-{by}-latest"]) == [first, up_to(first, [23, 24, 25])]


# -- Trigger.AvailableNow -----------------------------------------------------------------


def test_available_now_reads_a_backlog_in_the_batches_its_rate_limit_cuts_and_ends(suite: dict[str, Any]) -> None:
    case = suite["available-now"]
    assert (
        case["sluicegate"] == case["spark"] == [{"batches": [list(range(5)), list(range(5, 10)), list(range(10, 15))]}]
    )


@pytest.mark.parametrize(
    ("case", "we_say"),
    [
        # Spark's task reading a deleted partition fails before its planning says so
        ("available-now-lost", "gone from the data cluster"),
        ("available-now-short", "this Trigger.AvailableNow run found when it began"),
    ],
)
def test_available_now_fails_when_its_topic_is_replaced_under_it(suite: dict[str, Any], case: str, we_say: str) -> None:
    failed(suite[case]["spark"])
    assert we_say in failed(suite[case]["sluicegate"]) or "no records for 5000 ms" in failed(suite[case]["sluicegate"])


def test_a_failing_batch_fails_again_after_the_topic_grew_and_nothing_else(suite: dict[str, Any]) -> None:
    for side in SIDES:
        runs = suite["failing-batch"][side]
        assert len(runs) == 2 and all("error for 7" in run.get("error", "") for run in runs), (side, runs)


# -- offsets, limits and progress ---------------------------------------------------------


def test_initial_offsets_of_an_empty_topic_go_through_a_restart(suite: dict[str, Any]) -> None:
    assert same(suite["initial-offsets"]) == [[], []]


def test_a_rate_limit_of_long_max_does_not_overflow(suite: dict[str, Any]) -> None:
    assert same(suite["long-max"]) == [[], list(range(30, 35))]


def test_the_progress_counts_every_input_row_once(suite: dict[str, Any]) -> None:
    case = suite["input-rows"]
    assert case["sluicegate"] == case["spark"]
    assert case["spark"] == [{"answer": []}, {"answer": [1, 2, 3]}, {"input_rows": 3}]


def test_the_progress_has_the_offsets_behind_latest_of_spark_s_source(suite: dict[str, Any]) -> None:
    """On the JVM read path, which a processing-time stream takes where the jar is in the
    session (this suite's): Spark asks a Python data source for no metrics."""
    assert same(suite["metrics-rate-limit"]) == [list(range(1, 11))]
    behind = {"minOffsetsBehindLatest": True, "maxOffsetsBehindLatest": True, "avgOffsetsBehindLatest": True}
    assert suite["metrics-rate-limit"]["spark"][-1] == {"metrics": behind}
    assert same(suite["metrics-no-limit"]) == [list(range(1, 11))]
    caught_up = {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "0", "avgOffsetsBehindLatest": "0.0"}
    assert suite["metrics-no-limit"]["spark"][-1] == {"metrics": caught_up}


# -- pattern subscriptions ----------------------------------------------------------------


def test_a_pattern_reads_on_when_its_topic_is_deleted_and_another_is_created(suite: dict[str, Any]) -> None:
    assert same(suite["pattern-deleted"]) == [[], [1, 2, 3], list(range(1, 7))]


def test_a_pattern_s_topic_created_again_with_fewer_records_fails_the_restart(suite: dict[str, Any]) -> None:
    for side in SIDES:
        first, _ = suite["pattern-recreated"][side]
        assert first == {"answer": [1, 2, 3, 4]}, side
        failed(suite["pattern-recreated"][side])


def test_a_pattern_s_topic_created_again_with_fewer_records_is_read_on_from_its_end_without_fail_on_data_loss(
    suite: dict[str, Any],
) -> None:
    assert same(suite["pattern-recreated-read-on-jvm"]) == [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4, 5, 7]]


# -- records ------------------------------------------------------------------------------


def test_a_watermarked_window_counts_the_record(suite: dict[str, Any]) -> None:
    assert same(suite["watermark"]) == [[[1, 1]]]


def test_a_transaction_committed_while_a_batch_runs_is_in_a_later_batch(suite: dict[str, Any]) -> None:
    case = suite["txn-during-batch"]
    assert case["sluicegate"] == case["spark"]
    assert case["spark"][-1] == {"batches": [list(range(4)), list(range(4, 8))]}


def test_null_keys_and_values_are_read_as_nulls(suite: dict[str, Any]) -> None:
    (rows,) = same(suite["nulls"])
    expected = [[None, None]] * 5 + [[str(k), None] for k in range(1, 6)] + [[None, str(v)] for v in range(6, 11)]
    assert sorted(rows, key=json.dumps) == sorted(expected, key=json.dumps)


def test_the_columns_and_their_types_are_sparks(suite: dict[str, Any]) -> None:
    case = suite["column-types"]
    assert case["sluicegate"] == case["spark"]
    (row,) = case["spark"][0]["answer"]
    assert row == {
        "key": None,
        "value": "1",
        "topic": True,
        "partition": 0,
        "offset": 0,
        "timestamp_after_start": True,
        "timestampType": 0,
        "headers": [["a", "b"], ["c", "d"]],
    }


def test_min_partitions_cuts_a_batch_into_at_least_that_many_tasks(suite: dict[str, Any]) -> None:
    for side in SIDES:
        answer, tasks = suite["min-partitions"][side]
        assert answer == {"answer": list(range(21))} and tasks["tasks"][0] >= 6, (side, tasks)


def test_a_timestamp_past_what_spark_holds_is_what_spark_makes_of_it(suite: dict[str, Any]) -> None:
    case = suite["malformed-timestamp"]
    if "error" in case["spark"][-1]:
        failed(case["sluicegate"])
    else:
        assert case["sluicegate"] == case["spark"]


def test_records_deleted_before_the_start_are_skipped_without_a_record_twice(suite: dict[str, Any]) -> None:
    assert same(suite["deleted-records"]) == [list(range(20, 50))]


# -- what load() refuses ------------------------------------------------------------------

REFUSED = [
    "bad-no-subscription",
    "bad-subscribe-and-pattern",
    "bad-subscribe-and-assign",
    "bad-empty-assign",
    "bad-empty-subscribe",
    "bad-empty-pattern",
    "bad-min-above-max",
    *(f"unsupported-{s}" for s in ("enable.auto.commit", "interceptor.classes", "key.deserializer")),
    *(f"unsupported-{s}" for s in ("value.deserializer", "auto.offset.reset")),
    *(f"unsupported-auto.offset.reset-{reset}" for reset in ("none", "earliest", "latest")),
]


@pytest.mark.parametrize("case", REFUSED)
def test_what_sparks_stream_refuses_at_load_is_refused_naming_the_option(suite: dict[str, Any], case: str) -> None:
    (spark,), (ours,) = suite[case]["spark"], suite[case]["sluicegate"]
    assert "error" in spark and "error" in ours, (spark, ours)
    assert "invalid setting '" in ours["error"]


@pytest.mark.parametrize("case", ["bad-ending-offsets", "bad-ending-timestamps"])
def test_an_end_in_a_stream_is_the_one_deliberate_difference(suite: dict[str, Any], case: str) -> None:
    # Spark refuses it; here it makes a bounded stream (docs/kafka.md)
    assert "error" in suite[case]["spark"][0] and suite[case]["sluicegate"] == [{"loaded": True}]


# -- the Spark side (this file run as a script) -------------------------------------------


class Recorder:
    """``foreachBatch`` over a query's whole life, restarts included: each batch's sorted
    rows by batch id (a batch run again after a restart replaces its first run, as Spark's
    memory sink does), and how many tasks read it. ``before`` runs first in each batch."""

    def __init__(self, row: Callable[[Any], Any], before: Callable[[int], None] | None = None) -> None:
        self.row = row
        self.before = before
        self.batches: dict[int, list[Any]] = {}
        self.tasks: dict[int, int] = {}
        self.lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        if self.before is not None:
            self.before(batch_id)
        rows = sorted((self.row(r) for r in frame.collect()), key=in_order)
        with self.lock:
            self.batches[batch_id] = rows
            self.tasks[batch_id] = frame.rdd.getNumPartitions()

    def runs(self) -> list[list[Any]]:
        with self.lock:
            return [self.batches[b] for b in sorted(self.batches)]

    def answer(self) -> list[Any]:
        return sorted((row for batch in self.runs() for row in batch), key=in_order)


def in_order(row: Any) -> tuple[int, str]:
    """Numbers by value, other rows by their JSON."""
    return (row, "") if isinstance(row, int) else (0, json.dumps(row))


def int_value(row: Any) -> int:
    return int(row["value"].decode() if isinstance(row["value"], bytearray | bytes) else row["value"])


class Pair:
    """One case's query on each side, each step taken by both: started, checked after
    ``processAllAvailable``, stopped, started again from its checkpoint. A side whose query
    failed records the error and takes no further step."""

    def __init__(
        self,
        cases: Cases,
        case: str,
        frames: Callable[[str], Any],
        trigger: dict[str, Any] = TRIGGER,
        row: Callable[[Any], Any] = int_value,
        before: Callable[[str, int], None] | None = None,
        output_mode: str = "append",
    ) -> None:
        self.cases, self.case, self.frames = cases, case, frames
        self.trigger, self.output_mode = trigger, output_mode
        self.recorders = {
            side: Recorder(row, None if before is None else functools.partial(before, side)) for side in SIDES
        }
        self.queries: dict[str, Any] = {}
        self.failed: set[str] = set()

    def checkpoint(self, side: str) -> str:
        return str(self.cases.work / "checkpoints" / f"{self.case}-{side}")

    def start(self) -> None:
        for side in SIDES:
            if side in self.failed:
                continue
            try:
                self.queries[side] = (
                    self.frames(side)
                    .writeStream.foreachBatch(self.recorders[side])
                    .outputMode(self.output_mode)
                    .option("checkpointLocation", self.checkpoint(side))
                    .trigger(**self.trigger)
                    .start()
                )
            except Exception as exc:  # refused at load() or start(): the step's result
                self.fail(side, exc)

    def check(self, timeout_s: float = 150) -> None:
        """Each side's answer once it has processed everything available. Ours first: a
        check right after a change (a topic created) gives it the least time to see it."""
        for side, query in sorted(self.running(), key=lambda running: running[0] != "sluicegate"):
            error = wait_for(query.processAllAvailable, timeout_s, query)
            if error is None:
                self.cases.record(self.case, side, {"answer": self.recorders[side].answer()})
            else:
                self.fail(side, error)

    def end(self, timeout_s: float = 240) -> None:
        """Each side's batches once its query ended by itself (AvailableNow, Once)."""
        for side, query in self.running():
            error = wait_for(functools.partial(query.awaitTermination, timeout_s), timeout_s + 10, query)
            if error is None and query.isActive:
                error = TimeoutError(f"the query did not end in {timeout_s} s")
            if error is None:
                self.cases.record(self.case, side, {"batches": self.recorders[side].runs()})
            else:
                self.fail(side, error)
            query.stop()

    def stop(self) -> None:
        for _, query in self.running():
            query.stop()
        self.queries.clear()

    def running(self) -> list[tuple[str, Any]]:
        return [(side, query) for side, query in self.queries.items() if side not in self.failed]

    def fail(self, side: str, error: BaseException | str) -> None:
        self.failed.add(side)
        self.cases.record(self.case, side, {"error": str(error)[:3000]})
        query = self.queries.pop(side, None)
        if query is not None:
            query.stop()


def wait_for(call: Callable[[], Any], timeout_s: float, query: Any) -> BaseException | None:
    """Run a blocking query call with a time limit: its exception, or None; a call that
    outlives the limit stops the query (PySpark's processAllAvailable has no limit)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except Exception as exc:  # the query failed: the caller records it
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        query.stop()
        thread.join(30)
        return TimeoutError(f"no answer in {timeout_s} s: {query.lastProgress}")
    return raised[0] if raised else None


class Cases:
    def __init__(self, spark: Any, bootstrap: str, work: Path, prefix: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.spark, self.bootstrap, self.work, self.prefix = spark, bootstrap, work, prefix
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.results: dict[str, dict[str, list[Step]]] = {}
        self.lock = threading.Lock()

    def record(self, case: str, side: str, step: Step) -> None:
        with self.lock:
            self.results.setdefault(case, {}).setdefault(side, []).append(step)
        print(f"{case} {side}: {json.dumps(step)[:300]}", flush=True)

    # -- Kafka

    def topic(self, name: str, partitions: int) -> str:
        from confluent_kafka.admin import NewTopic

        topic = f"{self.prefix}-{name}"
        for _ in range(100):  # a topic deleted a moment ago is still being deleted
            try:
                new = NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})
                self.admin.create_topics([new])[topic].result(30)
                return topic
            except Exception as exc:
                if "marked for deletion" not in str(exc) and "already exists" not in str(exc):
                    raise
                time.sleep(0.1)
        raise TimeoutError(f"topic {topic} could not be created again")

    def delete_topic(self, topic: str) -> None:
        self.admin.delete_topics([topic])[topic].result(30)
        deadline = time.monotonic() + 30
        while topic in self.admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.1)

    def add_partitions(self, topic: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        self.admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)

    def produce(self, topic: str, records: Sequence[tuple[int, str | None]], **extra: Any) -> None:
        """``records``: (partition, value); ``extra``: timestamp, key for each."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        for partition, value in records:
            producer.produce(topic, None if value is None else value.encode(), partition=partition, **extra)
        assert producer.flush(30) == 0

    def spread(self, topic: str, values: range | list[int], partitions: int, **extra: Any) -> None:
        self.produce(topic, [(i % partitions, str(v)) for i, v in enumerate(values)], **extra)

    def transactional(self, topic: str) -> Any:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"{topic}-txn-{time.time_ns()}"})
        producer.init_transactions(30)
        return producer

    def stream(self, side: str, options: dict[str, str]) -> Any:
        reader = self.spark.readStream.format("kafka" if side == "spark" else "sluicegate")
        for key, value in {"kafka.bootstrap.servers": self.bootstrap, **options}.items():
            reader = reader.option(key, value)
        return reader.load()

    def pair(self, case: str, options: dict[str, str] | Callable[[str], dict[str, str]], **kwargs: Any) -> Pair:
        """A Pair reading the same options on both sides (or each side's, from a callable)."""

        def frames(side: str) -> Any:
            return self.stream(side, options(side) if callable(options) else options)

        return Pair(self, case, frames, **kwargs)

    # -- where a query starts, under each subscription (KafkaSourceSuiteBase's loop)

    def subscription(self, case: str, strategy: str) -> tuple[str, dict[str, str]]:
        """The case's topic and the options that read it by ``strategy``."""
        if strategy == "pattern":
            return f"{self.prefix}-{case}-suffix", {"subscribePattern": f"{self.prefix}-{case}-.*"}
        topic = f"{self.prefix}-{case}"
        if strategy == "assign":
            return topic, {"assign": json.dumps({topic: list(range(5))})}
        return topic, {"subscribe": topic}

    def start_case(self, strategy: str, start: str, fail_on_data_loss: bool) -> None:
        case = f"{strategy}-{start}-{str(fail_on_data_loss).lower()}"
        topic, options = self.subscription(case, strategy)
        self.topic(topic.removeprefix(f"{self.prefix}-"), 5)
        grows = strategy != "assign"  # the suite adds partitions to subscriptions only
        options = {**options, "failOnDataLoss": str(fail_on_data_loss).lower(), "kafka.metadata.max.age.ms": "1"}
        {
            "latest": self.from_latest,
            "earliest": self.from_earliest,
            "offsets": self.from_offsets,
            "timestamps": self.from_timestamps,
            "global_timestamp": self.from_timestamps,
        }[start](case, topic, options, grows, start)

    def from_latest(self, case: str, topic: str, options: dict[str, str], grows: bool, _: str) -> None:
        self.spread(topic, [-1], 5)
        pair = self.pair(case, {**options, "startingOffsets": "latest"})
        pair.start()
        pair.check()  # the start is resolved before records come: -1 is never read
        self.spread(topic, [1, 2, 3], 5)
        pair.check()
        self.restart_and_grow(pair, topic, grows, [4, 5, 6], [7, 8], range(9, 17))

    def from_earliest(self, case: str, topic: str, options: dict[str, str], grows: bool, _: str) -> None:
        self.spread(topic, [1, 2, 3], 5)
        pair = self.pair(case, {**options, "startingOffsets": "earliest"})
        pair.start()
        self.spread(topic, [4, 5, 6], 5)
        pair.check()
        self.restart_and_grow(pair, topic, grows, [7, 8], [], range(9, 17))

    def restart_and_grow(
        self, pair: Pair, topic: str, grows: bool, while_stopped: list[int], more: list[int], after_growth: range
    ) -> None:
        """Stop and start again (the same answer), records while stopped, more records, the
        topic grown to 10 partitions (where the case may grow it), records in every one."""
        pair.stop()
        pair.start()
        pair.check()
        pair.stop()
        if while_stopped:
            self.spread(topic, while_stopped, 5)
        pair.start()
        pair.check()
        if more:
            self.spread(topic, more, 5)
            pair.check()
        if grows:
            self.add_partitions(topic, 10)
        self.spread(topic, after_growth, 10 if grows else 5)
        pair.check()
        pair.stop()

    def from_offsets(self, case: str, topic: str, options: dict[str, str], grows: bool, _: str) -> None:
        for partition, values in enumerate(([-20, -21, -22], [-10, -11, -12], [0, 1, 2], [10, 11, 12], [20, 21, 22])):
            self.produce(topic, [(partition, str(v)) for v in values])
        starting = json.dumps({topic: {"0": -2, "1": -1, "2": 0, "3": 1, "4": 2}})
        pair = self.pair(case, {**options, "startingOffsets": starting})
        pair.start()
        pair.check()
        pair.stop()
        pair.start()
        pair.check()
        self.spread(topic, range(30, 35), 5)
        pair.check()
        pair.stop()

    def timestamped(self, topic: str) -> tuple[int, int]:
        """The suite's records at two times: p0 -20 | -21 -22, p1 -10 | -11 -12, p2 0 1 | 2,
        p3 10 11 | 12, p4 20 21 22 | (none). Returns the two times."""
        ts1 = int(time.time() * 1000) - 20_000
        ts2 = ts1 + 10_000
        at_ts1 = {0: [-20], 1: [-10], 2: [0, 1], 3: [10, 11], 4: [20, 21, 22]}
        at_ts2 = {0: [-21, -22], 1: [-11, -12], 2: [2], 3: [12]}
        for at, ms in ((at_ts1, ts1), (at_ts2, ts2)):
            self.produce(topic, [(p, str(v)) for p, values in at.items() for v in values], timestamp=ms)
        return ts1, ts2

    def from_timestamps(self, case: str, topic: str, options: dict[str, str], grows: bool, start: str) -> None:
        ts1, ts2 = self.timestamped(topic)
        if start == "global_timestamp":
            self.produce(topic, [(4, "23"), (4, "24")], timestamp=ts2)
            starting = {"startingTimestamp": str(ts2)}
        else:
            by_partition = {str(p): ts2 for p in range(4)} | {"4": ts1}
            starting = {"startingOffsetsByTimestamp": json.dumps({topic: by_partition})}
        pair = self.pair(case, {**options, **starting})
        pair.start()
        pair.check()
        pair.stop()
        pair.start()
        pair.check()
        pair.stop()
        self.spread(topic, [30, 31, 32], 5)
        pair.start()
        pair.check()
        if grows:
            self.add_partitions(topic, 10)
        self.spread(topic, range(40, 45), 10 if grows else 5)
        pair.check()
        pair.stop()

    def unmatched_timestamps(self) -> None:
        """A start time after every record of partition 4: the query fails unless
        startingOffsetsByTimestampStrategy=latest, which starts that partition at its end."""
        for by in ("partition", "global"):
            topic = self.topic(f"unmatched-{by}", 5)
            _, ts2 = self.timestamped(topic)
            starting = (
                {"startingOffsetsByTimestamp": json.dumps({topic: {str(p): ts2 for p in range(5)}})}
                if by == "partition"
                else {"startingTimestamp": str(ts2)}
            )
            options = {"subscribe": topic, "failOnDataLoss": "true", **starting}
            for strategy in ("default", "error", "latest"):
                # the suite writes the option's name in lower case: Spark's options ignore case
                given = {} if strategy == "default" else {"startingoffsetsbytimestampstrategy": strategy}
                pair = self.pair(f"unmatched-{by}-{strategy}", {**options, **given})
                pair.start()
                pair.check()
                if strategy == "latest":
                    self.produce(topic, [(4, "23"), (4, "24"), (4, "25")], timestamp=ts2)
                    pair.check()
                pair.stop()

    # -- Trigger.AvailableNow

    def available_now(self) -> None:
        topic = self.topic("available-now", 5)
        self.produce(topic, [(0, str(v)) for v in range(15)])
        options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "5"}
        pair = self.pair("available-now", options, trigger={"availableNow": True})
        pair.start()
        pair.end()

    def available_now_topic_replaced(self) -> None:
        """The topic deleted and created again by the first batch: with fewer partitions, or
        with fewer records than the run planned to read."""
        self.topic_replaced_in_a_run("available-now-lost", partitions=3, records=15)
        self.topic_replaced_in_a_run("available-now-short", partitions=5, records=10)

    def topic_replaced_in_a_run(self, case: str, partitions: int, records: int) -> None:
        topics = {side: self.topic(f"{case}-{side}", 5) for side in SIDES}  # each side its own
        for topic in topics.values():
            self.spread(topic, range(15), 5)

        def replace(side: str, batch: int) -> None:
            if batch == 0:
                self.delete_topic(topics[side])
                self.topic(topics[side].removeprefix(f"{self.prefix}-"), partitions)
                self.spread(topics[side], range(100, 100 + records), partitions)

        def options(side: str) -> dict[str, str]:
            given = {"subscribe": topics[side], "startingOffsets": "earliest", "maxOffsetsPerTrigger": "5"}
            # a task reading a deleted partition gives up after the poll timeout (Spark's: 2 min)
            return {
                **given,
                "failOnDataLoss": "true",
                "kafka.metadata.max.age.ms": "500",
                "kafkaConsumer.pollTimeoutMs": "5000",
            }

        pair = self.pair(case, options, trigger={"availableNow": True}, before=replace)
        pair.start()
        pair.end()

    def available_now_failing_batch(self) -> None:
        """SPARK-53560: a batch that fails, its run started again after the topic grew."""
        topic = self.topic("failing-batch", 1)
        self.produce(topic, [(0, str(v)) for v in range(1, 8)])
        failing = (
            "CASE WHEN CAST(value AS STRING) = '7' THEN CAST(raise_error('error for 7') AS STRING) "
            "ELSE CAST(value AS STRING) END AS value"
        )

        def frames(side: str) -> Any:
            return self.stream(side, {"subscribe": topic, "startingOffsets": "earliest"}).selectExpr(failing)

        pair = Pair(self, "failing-batch", frames, trigger={"availableNow": True})
        pair.start()
        pair.end()
        self.add_partitions(topic, 2)
        pair.failed.clear()
        pair.start()
        pair.end()

    # -- offsets, limits and progress

    def initial_offsets(self) -> None:
        topic = self.topic("initial-offsets", 5)
        pair = self.pair("initial-offsets", {"subscribe": topic})
        for _ in range(2):
            pair.start()
            pair.check()
            pair.stop()

    def long_max_rate_limit(self) -> None:
        topic = self.topic("long-max", 1)
        self.spread(topic, range(5), 1)
        options = {
            "subscribe": topic,
            "startingOffsets": json.dumps({topic: {"0": 5}}),
            "maxOffsetsPerTrigger": str(LONG_MAX),
        }
        pair = self.pair("long-max", options)
        pair.start()
        pair.check()
        self.spread(topic, range(30, 35), 1)
        pair.check()
        pair.stop()

    def progress(self) -> None:
        """numInputRows over a query's progress."""
        topic = self.topic("input-rows", 5)
        self.spread(topic, [-1], 5)
        pair = self.pair("input-rows", {"subscribe": topic})
        pair.start()
        pair.check()
        self.spread(topic, [1, 2, 3], 5)
        pair.check()
        for side, query in pair.running():
            rows = sum(p["numInputRows"] for p in (json.loads(p.json) for p in query.recentProgress))
            self.record("input-rows", side, {"input_rows": rows})
        pair.stop()

    def source_metrics(self) -> None:
        """Spark's "test custom metrics": the offsets behind latest in each progress, above
        0 while a rate limit holds records back, 0 once everything available was read."""
        for case, limit in (("metrics-rate-limit", {"maxOffsetsPerTrigger": "1"}), ("metrics-no-limit", {})):
            topic = self.topic(case, 2)
            self.produce(topic, [(0, str(v)) for v in range(1, 6)] + [(1, str(v)) for v in range(6, 11)])
            pair = self.pair(case, {"subscribe": topic, "startingOffsets": "earliest", **limit})
            pair.start()
            pair.check()
            for side, query in pair.running():
                progress = [json.loads(p.json)["sources"][0].get("metrics") or {} for p in query.recentProgress]
                if limit:  # the last progress that shows a delay
                    delayed = [m for m in progress if m and float(m["avgOffsetsBehindLatest"]) > 0]
                    metrics = delayed[-1] if delayed else {}
                    shown = {key: float(value) > 0 for key, value in metrics.items()}
                else:
                    shown = progress[-1] if progress else {}
                self.record(case, side, {"metrics": shown})
            pair.stop()

    # -- pattern subscriptions

    def pattern_topic_deleted(self) -> None:
        """failOnDataLoss=false: the only matching topic deleted, another created: read on,
        the new one from its start."""
        seems = self.topic("deleted-seems", 5)
        self.spread(seems, [-1], 5)
        options = {
            "subscribePattern": f"{self.prefix}-deleted-.*",
            "failOnDataLoss": "false",
            "kafka.request.timeout.ms": "3000",
            "kafka.default.api.timeout.ms": "3000",
            "kafka.metadata.max.age.ms": "1",
        }
        pair = self.pair("pattern-deleted", options)
        pair.start()
        pair.check()
        self.spread(seems, [1, 2, 3], 5)
        pair.check()
        self.delete_topic(seems)
        bad = self.topic("deleted-bad", 5)
        self.spread(bad, [4, 5, 6], 5)
        pair.check()  # right after the topic was created: Spark lists its topics every trigger
        pair.stop()

    def pattern_topic_recreated(self) -> None:
        """failOnDataLoss=true: a matching topic created again between runs with fewer
        records than the checkpoint read: the restart fails."""
        good, bad = self.topic("recreated-good", 1), self.topic("recreated-bad", 1)
        self.produce(good, [(0, "1"), (0, "3")])
        self.produce(bad, [(0, "2"), (0, "4")])
        options = {"subscribePattern": f"{self.prefix}-recreated-.*", "startingOffsets": "earliest"}
        pair = self.pair("pattern-recreated", options)
        pair.start()
        pair.check()
        pair.stop()
        self.delete_topic(bad)
        self.topic("recreated-bad", 1)
        self.produce(bad, [(0, "6")])
        pair.start()
        pair.check()
        pair.stop()

    def pattern_topic_recreated_read_on(self) -> None:
        """failOnDataLoss=false: the same, and the restart reads on from the new topic's end
        (the batch that finds it shorter reads none of it: 6 is missed), then what it gets.
        Ours on the JVM read path, a processing-time stream's default (the planning that
        moves the split back is the Python path's too: the driver's, in Python)."""
        self.topic_recreated_read_on("jvm")

    def topic_recreated_read_on(self, read_path: str) -> None:
        good, bad = self.topic(f"read-on-{read_path}-good", 1), self.topic(f"read-on-{read_path}-bad", 1)
        self.produce(good, [(0, "1"), (0, "3")])
        self.produce(bad, [(0, "2"), (0, "4")])
        given = {
            "subscribePattern": f"{self.prefix}-read-on-{read_path}-.*",
            "startingOffsets": "earliest",
            "failOnDataLoss": "false",
        }

        def options(side: str) -> dict[str, str]:
            return {**given, "readPath": read_path} if side == "sluicegate" else given

        pair = self.pair(f"pattern-recreated-read-on-{read_path}", options)
        pair.start()
        pair.check()
        pair.stop()
        self.delete_topic(bad)
        self.topic(f"read-on-{read_path}-bad", 1)
        self.produce(bad, [(0, "6")])
        pair.start()
        pair.check()
        self.produce(bad, [(0, "7")])
        self.produce(good, [(0, "5")])
        pair.check()
        pair.stop()

    # -- records

    def watermark(self) -> None:
        from pyspark.sql.functions import window

        topic = self.topic("watermark", 1)
        written_ms = int(time.time() * 1000)
        self.produce(topic, [(0, "1")])

        def frames(side: str) -> Any:
            return (
                self.stream(side, {"subscribe": topic, "startingOffsets": "earliest"})
                .withWatermark("timestamp", "10 seconds")
                .groupBy(window("timestamp", "5 seconds"))
                .count()
                .selectExpr("CAST(window.start AS LONG) * 1000 AS start_ms", "count")
            )

        def row(r: Any) -> list[int]:
            return [int(r["start_ms"] >= written_ms - 5_000), r["count"]]

        pair = Pair(self, "watermark", frames, row=row, output_mode="complete")
        pair.start()
        pair.check()
        pair.stop()

    def transaction_during_batch(self) -> None:
        """SPARK-25495: a transaction committed while batch 0 runs is read by a later batch,
        not by batch 0. Each side on a topic of its own."""
        topics = {side: self.topic(f"txn-during-{side}", 1) for side in SIDES}
        producers = {side: self.transactional(topic) for side, topic in topics.items()}

        def commit(side: str, values: range) -> None:
            producers[side].begin_transaction()
            for v in values:
                producers[side].produce(topics[side], str(v).encode(), partition=0)
            producers[side].commit_transaction(30)

        for side in SIDES:
            commit(side, range(4))

        def during(side: str, batch: int) -> None:
            if batch == 0:
                commit(side, range(4, 8))

        def options(side: str) -> dict[str, str]:
            return {"subscribe": topics[side], "startingOffsets": "earliest", "kafka.isolation.level": "read_committed"}

        pair = self.pair("txn-during-batch", options, before=during)
        pair.start()
        pair.check()
        for side in pair.recorders:
            self.record("txn-during-batch", side, {"batches": [b for b in pair.recorders[side].runs() if b]})
        pair.stop()

    def null_keys_and_values(self) -> None:
        """SPARK-27494: null keys and values in one transaction."""
        topic = self.topic("nulls", 1)
        producer = self.transactional(topic)
        producer.begin_transaction()
        for i in range(15):
            key = None if i < 5 or i >= 10 else str(i - 4).encode()
            value = str(i - 4).encode() if i >= 10 else None
            producer.produce(topic, value, key, partition=0)
        producer.commit_transaction(30)
        options = {"subscribe": topic, "startingOffsets": "earliest", "kafka.isolation.level": "read_committed"}

        def frames(side: str) -> Any:
            return self.stream(side, options).selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")

        pair = Pair(self, "nulls", frames, row=lambda r: [r["key"], r["value"]])
        pair.start()
        pair.check()
        pair.stop()

    def column_types(self) -> None:
        topic = self.topic("column-types", 1)
        started_ms = int(time.time() * 1000)
        self.produce(topic, [(0, "1")], headers=[("a", b"b"), ("c", b"d")])

        def frames(side: str) -> Any:
            return self.stream(side, {"subscribe": topic, "startingOffsets": "earliest", "includeHeaders": "true"})

        def row(r: Any) -> dict[str, Any]:
            return {
                "key": r["key"],
                "value": bytes(r["value"]).decode(),
                "topic": r["topic"] == topic,
                "partition": r["partition"],
                "offset": r["offset"],
                "timestamp_after_start": r["timestamp"].timestamp() * 1000 >= started_ms - 1_000,
                "timestampType": r["timestampType"],
                "headers": [[h["key"], bytes(h["value"]).decode()] for h in r["headers"]],
            }

        pair = Pair(self, "column-types", frames, row=row)
        pair.start()
        pair.check()
        for side in SIDES:
            self.record("column-types", side, {"schema": self.stream(side, {"subscribe": topic}).schema.simpleString()})
        pair.stop()

    def min_partitions(self) -> None:
        topic = self.topic("min-partitions", 3)
        self.produce(topic, [(v // 10, str(v)) for v in range(21)])
        pair = self.pair("min-partitions", {"subscribe": topic, "startingOffsets": "earliest", "minPartitions": "6"})
        pair.start()
        pair.check()
        for side in SIDES:
            tasks = pair.recorders[side].tasks
            self.record("min-partitions", side, {"tasks": [tasks[b] for b in sorted(tasks)]})
        pair.stop()

    def malformed_timestamp(self) -> None:
        """SPARK-56243: a timestamp in nanoseconds, past what Spark's microseconds hold."""
        topic = self.topic("malformed-timestamp", 1)
        self.produce(topic, [(0, "1")], timestamp=1712345678123456789)

        def frames(side: str) -> Any:
            return self.stream(side, {"subscribe": topic, "startingOffsets": "earliest"}).selectExpr(
                "CAST(value AS STRING) AS value", "CAST(timestamp AS STRING) AS ts"
            )

        pair = Pair(self, "malformed-timestamp", frames, row=lambda r: [r["value"], r["ts"]])
        pair.start()
        pair.check()
        pair.stop()

    def records_deleted_before_the_start(self) -> None:
        """KafkaDontFailOnDataLossSuite: the start offset deleted, failOnDataLoss=false."""
        from confluent_kafka import TopicPartition

        topic = self.topic("deleted-records", 1)
        self.spread(topic, range(50), 1)
        for future in self.admin.delete_records([TopicPartition(topic, 0, 20)]).values():
            future.result(30)
        options = {
            "subscribe": topic,
            "startingOffsets": json.dumps({topic: {"0": 0}}),
            "failOnDataLoss": "false",
            "kafka.metadata.max.age.ms": "1",
        }
        pair = self.pair("deleted-records", options)
        pair.start()
        pair.check()
        pair.stop()

    # -- what load() refuses

    def refusals(self) -> None:
        topic = self.topic("refusals", 1)
        given = {"kafka.bootstrap.servers": self.bootstrap}
        cases: dict[str, dict[str, str]] = {
            "bad-ending-offsets": {"subscribe": topic, "endingOffsets": "latest"},
            "bad-ending-timestamps": {"subscribe": topic, "endingOffsetsByTimestamp": json.dumps({topic: {"0": 1000}})},
            "bad-no-subscription": {},
            "bad-subscribe-and-pattern": {"subscribe": topic, "subscribePattern": f"{topic}.*"},
            "bad-subscribe-and-assign": {"subscribe": topic, "assign": json.dumps({topic: [0]})},
            "bad-empty-assign": {"assign": ""},
            "bad-empty-subscribe": {"subscribe": ""},
            "bad-empty-pattern": {"subscribePattern": ""},
            "bad-min-above-max": {"subscribe": topic, "minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "15"},
        }
        for setting in ("auto.offset.reset", "enable.auto.commit", "interceptor.classes"):
            cases[f"unsupported-{setting}"] = {"subscribe": topic, f"kafka.{setting}": "someValue"}
        for setting in ("key.deserializer", "value.deserializer"):
            cases[f"unsupported-{setting}"] = {"subscribe": topic, f"kafka.{setting}": "someValue"}
        for reset in ("none", "earliest", "latest"):
            cases[f"unsupported-auto.offset.reset-{reset}"] = {"subscribe": topic, "kafka.auto.offset.reset": reset}
        for case, options in cases.items():
            for side in SIDES:
                reader = self.spark.readStream.format("kafka" if side == "spark" else "sluicegate")
                for key, value in {**given, **options}.items():
                    reader = reader.option(key, value)
                try:
                    reader.load()
                    self.record(case, side, {"loaded": True})
                except Exception as exc:  # refused: the case's result
                    self.record(case, side, {"error": str(exc)[:2000]})


GROUPS = (
    "refusals",
    "available_now",
    "available_now_topic_replaced",
    "available_now_failing_batch",
    "initial_offsets",
    "long_max_rate_limit",
    "progress",
    "source_metrics",
    "pattern_topic_deleted",
    "pattern_topic_recreated",
    "pattern_topic_recreated_read_on",
    "watermark",
    "transaction_during_batch",
    "null_keys_and_values",
    "column_types",
    "min_partitions",
    "malformed_timestamp",
    "records_deleted_before_the_start",
    "unmatched_timestamps",
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()
    from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars
    from sluicegate.spark.job import spark_session

    jars = ",".join(str(p) for p in ensure_spark_kafka_jars())
    # Task slots for every query of the cases that run at once: a task of Spark's source
    # waiting on a deleted topic holds its slot until it gives up.
    spark = spark_session(
        "sluicegate-micro-batch-suite", master="local[8]", quiet=True, extra_conf={"spark.jars": jars}
    )
    cases = Cases(spark, os.environ["KAFKA_BOOTSTRAP_SERVERS"], Path(args.work), args.prefix)
    only = [name for name in os.environ.get("SUITE_ONLY", "").split(",") if name]
    work: list[Callable[[], None]] = [getattr(cases, name) for name in GROUPS if not only or name in only] + [
        (lambda s=s: cases.start_case(*s)) for s in STARTS if not only or "starts" in only
    ]

    def run(group: Callable[[], None]) -> None:
        try:
            group()
        except Exception:  # a case's own failure: its results say what ran
            traceback.print_exc()
            raise

    with ThreadPoolExecutor(max_workers=int(os.environ.get("SUITE_THREADS", "4"))) as pool:
        failures = [f.exception() for f in [pool.submit(run, group) for group in work]]
    spark.stop()
    Path(args.out).write_text(json.dumps(cases.results))
    return 1 if any(failures) else 0


if __name__ == "__main__":
    sys.exit(main())
