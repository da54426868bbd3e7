"""Spark's ``KafkaRelationSuite`` (batch ``spark.read`` of Kafka) as the specification
(issue 54 item 3): its cases that PySpark can observe, each run through Spark's own Kafka
source and through ``format("sluicegate")`` with the same options on the same data.

Where Spark returns rows, both sides must return the same values, and where the suite
says which values, those; where Spark fails the read, ours must fail too (its message is
ours: it names the option). A case is a list of steps on one topic: a collect of a
DataFrame, records written, and the same DataFrame collected again (Spark binds
``latest`` when each action runs).

- offsets: earliest to latest, Spark's defaults, explicit JSON offsets (-2/-1 and
  numbers), a DataFrame collected again after records were written to a partition its
  end is fixed for and to one it is not;
- headers, ``includeHeaders``: none, several, a key twice;
- timestamps: ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` /
  ``startingTimestamp`` / ``endingTimestamp`` mixed with offsets, which one wins, a
  timestamp no record matches (a start fails, an end reads to latest);
- one DataFrame used twice in a query (``union``);
- transactions under read_committed: open, committed, aborted, committed again;
- what a batch read refuses: start and end of other partitions, a start past the end
  (as given, as resolved, against an empty topic), and Spark's bad batch options.

One Spark process runs every case (this file as a script, as in
test_spark_kafka_parity.py); the tests below judge its results.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from processes import run_script

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600), pytest.mark.spark]

SIDES = ("spark", "sluicegate")
LONG_MAX = 9223372036854775807
VALUE = ("CAST(value AS STRING)",)
Step = dict[str, Any]
"""A step's result: ``{"rows": [...]}`` (sorted) or ``{"error": "..."}``."""


@pytest.fixture(scope="module")
def suite(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """{case: {side: [step result, ...]}}."""
    work = tmp_path_factory.mktemp("relation-suite")
    out, log = work / "results.json", work / "spark.log"
    args = ["--out", str(out), "--prefix", secrets.token_hex(3)]
    returncode = run_script(__file__, args, log, kafka_bootstrap, timeout_s=540)
    assert returncode == 0, log.read_text()[-8000:]
    results: dict[str, Any] = json.loads(out.read_text())
    return results


def same(case: dict[str, list[Step]]) -> list[list[str]]:
    """The rows of each step of a case, after asserting both sides read the same."""
    spark, ours = case["spark"], case["sluicegate"]
    assert all("rows" in step for step in spark), spark
    assert ours == spark
    return [step["rows"] for step in spark]


def both_fail(case: dict[str, list[Step]]) -> str:
    """Our error, after asserting that each side's only step failed."""
    ((spark,), (ours,)) = case["spark"], case["sluicegate"]
    assert "error" in spark, f"Spark read {spark}"
    assert "error" in ours, f"sluicegate read {ours}; Spark failed: {spark['error'][:300]}"
    error: str = ours["error"]
    return error


def numbers(*ranges: range | list[int]) -> list[str]:
    return sorted(str(v) for r in ranges for v in r)


# -- offsets ------------------------------------------------------------------------------


def test_earliest_to_latest_reads_everything_and_again_after_new_records(suite: dict[str, Any]) -> None:
    first, again = same(suite["earliest_to_latest"])
    assert first == numbers(range(21)) and again == numbers(range(30))


def test_the_default_start_and_end_are_earliest_and_latest(suite: dict[str, Any]) -> None:
    (rows,) = same(suite["defaults"])
    assert rows == numbers(range(21))


def test_explicit_offsets_keep_a_fixed_end_and_move_a_latest_one(suite: dict[str, Any]) -> None:
    first, after_fixed, after_latest = same(suite["explicit_offsets"])
    assert first == after_fixed == numbers(range(21))
    assert after_latest == numbers(range(31))


def test_headers_none_several_and_a_key_twice(suite: dict[str, Any]) -> None:
    (rows,) = same(suite["headers"])
    assert len(rows) == 3


# -- timestamps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("ts_start_and_end", numbers(range(10, 20))),
        ("ts_start_offsets_end", numbers([v for v in range(30) if v % 3 != 2], [2])),
        ("offsets_start_ts_end", numbers(range(20))),
        ("ts_start_only", numbers(range(10, 30))),
        ("ts_end_only", numbers(range(20))),
        ("global_ts_start_and_end", numbers(range(10, 20))),
        ("global_ts_wins", numbers(range(20, 30))),
        ("partition_ts_beats_offsets", numbers(range(10, 30))),
        ("unmatched_ts_end_is_latest", numbers(range(10), [v for v in range(10, 30) if v % 3 == 2])),
    ],
)
def test_timestamps_start_and_end_where_spark_does(suite: dict[str, Any], case: str, expected: list[str]) -> None:
    (rows,) = same(suite[case])
    assert rows == expected


def test_a_start_timestamp_no_record_matches_fails(suite: dict[str, Any]) -> None:
    both_fail(suite["unmatched_ts_start"])


# -- one DataFrame twice, transactions ----------------------------------------------------


def test_one_dataframe_used_twice_in_a_query_reads_each_record_twice(suite: dict[str, Any]) -> None:
    (rows,) = same(suite["reuse_in_union"])
    assert rows == sorted(numbers(range(11)) * 2)


def test_read_committed_reads_committed_transactions_only_each_time_it_is_collected(suite: dict[str, Any]) -> None:
    open_txn, committed, aborted, committed_again = same(suite["read_committed"])
    assert open_txn == [] and committed == aborted == numbers(range(1, 6))
    assert committed_again == numbers(range(1, 6), range(11, 16))


# -- what a batch read refuses ------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        "start_end_other_partitions",
        "start_past_end_as_given",
        "start_past_end_as_resolved",
        "start_past_end_of_empty_topic",
        "bad_latest_start",
        "bad_latest_start_of_a_partition",
        "bad_earliest_end",
        "bad_earliest_end_of_a_partition",
        "bad_no_subscription",
        "bad_subscribe_and_pattern",
        "bad_subscribe_and_assign",
        "bad_empty_assign",
        "bad_empty_subscribe",
        "bad_empty_pattern",
    ],
)
def test_what_sparks_batch_read_refuses_is_refused(suite: dict[str, Any], case: str) -> None:
    assert both_fail(suite[case])


# -- the Spark side (this file run as a script) -------------------------------------------


class Cases:
    def __init__(self, spark: Any, bootstrap: str, prefix: str) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.results: dict[str, dict[str, list[Step]]] = {}

    def topic(self, name: str, partitions: int) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = f"{self.prefix}-{name}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[topic].result(30)
        return topic

    def produce(self, topic: str, records: list[tuple[int, str]], **extra: Any) -> None:
        """``records``: (partition, value); ``extra``: timestamp, headers for each."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        for partition, value in records:
            producer.produce(topic, value.encode(), partition=partition, **extra)
        assert producer.flush(30) == 0

    def frame(self, side: str, topic: str, options: dict[str, str], columns: tuple[str, ...] = VALUE) -> Any:
        reader = self.spark.read.format("kafka" if side == "spark" else "sluicegate")
        given = {"kafka.bootstrap.servers": self.bootstrap, **({"subscribe": topic} if topic else {}), **options}
        for key, value in given.items():
            reader = reader.option(key, value)
        return reader.load().selectExpr(*columns)

    def collect(self, frame: Any) -> Step:
        try:
            return {"rows": sorted(str(r[0]) if len(r) == 1 else json.dumps(r.asDict()) for r in frame.collect())}
        except Exception as exc:  # the case's result is the error
            return {"error": str(exc)[:2000]}

    def record(self, case: str, side: str, step: Step) -> None:
        self.results.setdefault(case, {}).setdefault(side, []).append(step)
        print(f"{case} {side}: {json.dumps(step)[:200]}", flush=True)

    def once(self, case: str, topic: str, options: dict[str, str], columns: tuple[str, ...] = VALUE) -> None:
        """A case of one collect, on each side."""
        for side in SIDES:
            try:
                frame = self.frame(side, topic, options, columns)
            except Exception as exc:  # refused at load()
                self.record(case, side, {"error": str(exc)[:2000]})
                continue
            self.record(case, side, self.collect(frame))

    def again(self, case: str, topic: str, options: dict[str, str], writes: list[Any]) -> None:
        """Collect a DataFrame, then after each write (a callable) the same DataFrame again."""
        frames = {side: self.frame(side, topic, options) for side in SIDES}
        for write in [None, *writes]:
            if write is not None:
                write()
            for side in SIDES:
                self.record(case, side, self.collect(frames[side]))

    # -- the cases

    def offsets(self) -> None:
        for case, options, more in (
            (
                "earliest_to_latest",
                {"startingOffsets": "earliest", "endingOffsets": "latest"},
                [[(2, str(v)) for v in range(21, 30)]],
            ),
            ("defaults", {}, []),
            ("explicit_offsets", None, [[(2, str(v)) for v in range(31, 40)], [(1, str(v)) for v in range(21, 31)]]),
        ):
            topic = self.topic(case.replace("_", "-"), 3)
            self.produce(topic, [(v // 10, str(v)) for v in range(21)])
            if options is None:
                options = {
                    "startingOffsets": json.dumps({topic: {"0": -2, "1": -2, "2": 0}}),
                    "endingOffsets": json.dumps({topic: {"0": -1, "1": -1, "2": 1}}),
                }
            writes = [lambda records=records, topic=topic: self.produce(topic, records) for records in more]
            self.again(case, topic, options, writes)
        topic = self.topic("headers", 3)
        self.produce(topic, [(0, "1")])
        self.produce(topic, [(1, "2")], headers=[("a", b"b"), ("c", b"d")])
        self.produce(topic, [(2, "3")], headers=[("e", b"f"), ("e", b"g")])
        self.once(
            "headers",
            topic,
            {"includeHeaders": "true"},
            ("CAST(value AS STRING) AS value", "to_json(headers) AS headers"),
        )

    def timestamps(self) -> None:
        topic = self.topic("timestamps", 3)
        ts1 = (int(time.time()) - 3600) * 1000
        ts = [ts1, ts1 + 1000, ts1 + 2000]
        for group in range(3):
            self.produce(topic, [(v % 3, str(v)) for v in range(group * 10, group * 10 + 10)], timestamp=ts[group])

        def each(ms: int, last: int | None = None) -> str:
            return json.dumps({topic: {"0": ms, "1": ms, "2": ms if last is None else last}})

        fixed_start = json.dumps({topic: {"0": -2, "1": -2, "2": 0}})
        for case, options in (
            ("ts_start_and_end", {"startingOffsetsByTimestamp": each(ts[1]), "endingOffsetsByTimestamp": each(ts[2])}),
            (
                "ts_start_offsets_end",
                {
                    "startingOffsetsByTimestamp": each(ts[0]),
                    "endingOffsets": json.dumps({topic: {"0": -1, "1": -1, "2": 1}}),
                },
            ),
            ("offsets_start_ts_end", {"startingOffsets": fixed_start, "endingOffsetsByTimestamp": each(ts[2])}),
            ("ts_start_only", {"startingOffsetsByTimestamp": each(ts[1])}),
            ("ts_end_only", {"endingOffsetsByTimestamp": each(ts[2])}),
            ("global_ts_start_and_end", {"startingTimestamp": str(ts[1]), "endingTimestamp": str(ts[2])}),
            (
                "global_ts_wins",
                {
                    "startingTimestamp": str(ts[2]),
                    "startingOffsetsByTimestamp": each(ts[1]),
                    "startingOffsets": "earliest",
                },
            ),
            ("partition_ts_beats_offsets", {"startingOffsetsByTimestamp": each(ts[1]), "startingOffsets": "earliest"}),
            ("unmatched_ts_start", {"startingOffsetsByTimestamp": each(ts[1], LONG_MAX)}),
            ("unmatched_ts_end_is_latest", {"endingOffsetsByTimestamp": each(ts[1], LONG_MAX)}),
        ):
            self.once(case, topic, options)

    def reuse_and_transactions(self) -> None:
        topic = self.topic("reuse", 1)
        self.produce(topic, [(0, str(v)) for v in range(11)])
        for side in SIDES:
            frame = self.frame(side, topic, {})
            self.record("reuse_in_union", side, self.collect(frame.union(frame)))
        self.transactions()

    def transactions(self) -> None:
        from confluent_kafka import Producer

        topic = self.topic("read-committed", 1)
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"{topic}-txn"})
        producer.init_transactions(30)

        def send(values: range) -> None:
            for v in values:
                producer.produce(topic, str(v).encode(), partition=0)
            assert producer.flush(30) == 0

        producer.begin_transaction()
        send(range(1, 6))

        def commit() -> None:
            producer.commit_transaction(30)

        def abort() -> None:
            producer.begin_transaction()
            send(range(6, 11))
            producer.abort_transaction(30)

        def commit_more() -> None:
            producer.begin_transaction()
            send(range(11, 16))
            producer.commit_transaction(30)

        self.again("read_committed", topic, {"kafka.isolation.level": "read_committed"}, [commit, abort, commit_more])

    def refusals(self) -> None:
        topic = self.topic("refusals", 3)
        self.produce(topic, [(p, str(p * 2 + i)) for p in range(3) for i in range(2)])
        empty = self.topic("refusals-empty", 3)
        ones = json.dumps({topic: {"0": 1, "1": 1, "2": 1}})
        time.sleep(0.01)
        end_ms = int(time.time() * 1000) - 1  # after every record: 2nd records' offsets resolve to 1 at most
        self.once(
            "start_end_other_partitions",
            topic,
            {"startingOffsets": ones, "endingOffsets": json.dumps({topic: {"0": 0, "1": 0}})},
        )
        self.once(
            "start_past_end_as_given",
            topic,
            {"startingOffsets": ones, "endingOffsets": json.dumps({topic: {"0": 0, "1": 0, "2": 0}})},
        )
        threes = json.dumps({topic: {"0": 3, "1": 3, "2": 3}})
        by_time = json.dumps({topic: {"0": end_ms, "1": end_ms, "2": end_ms}})
        self.once("start_past_end_as_resolved", topic, {"startingOffsets": threes, "endingOffsetsByTimestamp": by_time})
        self.once(
            "start_past_end_of_empty_topic", empty, {"startingOffsets": json.dumps({empty: {"0": 1, "1": 1, "2": 1}})}
        )
        for case, given, options in (
            ("bad_latest_start", topic, {"startingOffsets": "latest"}),
            ("bad_latest_start_of_a_partition", topic, {"startingOffsets": json.dumps({topic: {"0": -1}})}),
            ("bad_earliest_end", topic, {"endingOffsets": "earliest"}),
            ("bad_earliest_end_of_a_partition", topic, {"endingOffsets": json.dumps({topic: {"0": -2}})}),
            ("bad_no_subscription", "", {}),
            ("bad_subscribe_and_pattern", topic, {"subscribePattern": f"{topic}.*"}),
            ("bad_subscribe_and_assign", topic, {"assign": json.dumps({topic: [0]})}),
            ("bad_empty_assign", "", {"assign": ""}),
            ("bad_empty_subscribe", "", {"subscribe": ""}),
            ("bad_empty_pattern", "", {"subscribePattern": ""}),
        ):
            self.once(case, given, options)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()
    from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars
    from sluicegate.spark.job import spark_session

    jars = ",".join(str(p) for p in ensure_spark_kafka_jars())
    spark = spark_session("sluicegate-relation-suite", quiet=True, extra_conf={"spark.jars": jars})
    cases = Cases(spark, os.environ["KAFKA_BOOTSTRAP_SERVERS"], args.prefix)
    for group in (cases.offsets, cases.timestamps, cases.reuse_and_transactions, cases.refusals):
        group()
    spark.stop()
    Path(args.out).write_text(json.dumps(cases.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
