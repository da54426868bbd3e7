"""The same query through Spark's own Kafka source and through sluicegate, only the format
name changed (issue 19 items 1, 3, 4 and 6): real Kafka, real Spark, and for sluicegate
nothing else started: the query's driver coordinates its source itself (coordinator=auto),
except where a deployed coordinator already serves one, which the query then uses.

The main topic has three partitions, written with a transactional producer: keys, null
keys, empty and null values, headers, explicit timestamps, and a transaction aborted
between two committed ones (its records and the markers leave gaps in the offsets). Every
pair of queries takes Spark's options as a Spark user writes them (``subscribe``,
``startingOffsets``, ``includeHeaders``, ``failOnDataLoss``, ``kafka.*`` client settings,
``groupIdPrefix``), streams run with ``Trigger.AvailableNow`` into a memory sink, and both
sides must give the same schema and the same rows, for:

- streams: explicit JSON starting offsets, and Spark's default start (latest: nothing of
  what is there), the latter through a deployed coordinator; a topic with a transaction
  left open while the queries run (both stop at its last stable offset); a topic that
  grows by two partitions between two runs of a query from its checkpoint (both read the
  new partitions from their start);
- streams again through ``readPath=jvm`` (issue 18: sluicegate's planning, Spark's own
  Kafka readers on the executors), a third side that must give the same rows;
- batch queries (``spark.read``, no coordinator; the same read path as a stream's):
  Spark's batch defaults (earliest to latest) with ``minPartitions`` cutting the ranges,
  between JSON offsets, ``startingTimestamp``, a ``LogAppendTime`` topic, and a
  compacted topic after the log cleaner removed overwritten records (gaps that are no
  data loss).

One Spark process runs every case (this file as a script: Spark's Kafka source is a jar
on ``spark.jars``, which only a JVM started with it has); the tests below judge its
results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jvm_read_path import require_jvm_read_path
from processes import ProcessGroup, run_script

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(700), pytest.mark.spark]

PARTITIONS = 3


def write_topic(bootstrap: str, topic: str) -> tuple[int, int]:
    """The records (see the module's text); returns how many committed records there are
    and the timestamp of the first (the others' are a ms apart in each transaction)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # retention.ms=-1: explicit timestamps of records are never old enough to be deleted
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1"})])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)
    committed = 0
    base_ms = int(time.time() * 1000) - 60_000

    def transaction(
        records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]], commit: bool
    ) -> int:
        producer.begin_transaction()
        for i, (partition, key, value, headers) in enumerate(records):
            producer.produce(topic, value, key, partition=partition, headers=headers, timestamp=base_ms + i)
        if commit:
            producer.commit_transaction(30)
            return len(records)
        producer.abort_transaction(30)
        return 0

    committed += transaction(
        [(0, b"k%d" % i, b"v%d" % i, [("h", b"x%d" % i), ("h", b"again")]) for i in range(5)]
        + [(1, None, b"", None), (1, None, None, None), (1, b"", b"no key", [("empty", b"")])]
        + [(2, b"a", b"1", None), (2, b"b", b"2", None)],
        commit=True,
    )
    committed += transaction([(2, b"aborted", b"never read", None), (0, b"aborted", b"never read", None)], commit=False)
    committed += transaction([(2, b"c", b"3", None), (0, b"k5", b"v5", None)], commit=True)
    producer.flush(30)
    return committed, base_ms


def spark_options(topic: str, bootstrap: str, starting: str | None) -> dict[str, str]:
    """As a Spark user writes them for format("kafka")."""
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "includeHeaders": "true",
        "failOnDataLoss": "true",
        "groupIdPrefix": "parity",
        "kafka.fetch.max.wait.ms": "10",
        "kafka.isolation.level": "read_committed",
    }
    if starting is not None:
        options["startingOffsets"] = starting
    return options


def create_topic(bootstrap: str, topic: str, partitions: int, **config: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1", **config})])[topic].result(30)


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes | None]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, key, value in records:
        producer.produce(topic, value, key, partition=partition)
    assert producer.flush(30) == 0


def write_compacted_topic(bootstrap: str, topic: str) -> int:
    """Ten keys, then the even ones again, in segments of their own (a record 150 ms after
    the last rolls one): the cleaner keeps the last value of each key, so the first
    segment keeps its odd keys only, gaps between them. Returns the offsets written."""
    create_topic(
        bootstrap,
        topic,
        1,
        **{
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        },
    )
    for round_, keys in enumerate((range(10), range(0, 10, 2))):
        produce(bootstrap, topic, [(0, b"k%d" % k, b"v%d-%d" % (k, round_)) for k in keys])
        time.sleep(0.15)
    produce(bootstrap, topic, [(0, b"last", b"rolls the segment before it")])
    return 16


def open_transaction(bootstrap: str, topic: str) -> tuple[Any, int]:
    """Committed records, then a transaction left open (the caller aborts it): returns
    the producer and how many records are committed."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, 2)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-open", "transaction.timeout.ms": 600_000}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, b"committed %d" % i, b"c%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", b"o", partition=0)
    producer.flush(30)
    return producer, 6


@pytest.fixture(scope="module")
def parity(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case through both sources in one Spark process: {case: {"kafka": ..., "sluicegate": ...}}."""
    tmp_path = tmp_path_factory.mktemp("parity")
    topic = f"t-{secrets.token_hex(4)}"
    compacted = f"{topic}-compacted"
    offsets_compacted = write_compacted_topic(kafka_bootstrap, compacted)  # first: the cleaner takes a while
    committed, base_ms = write_topic(kafka_bootstrap, topic)
    open_producer, committed_open = open_transaction(kafka_bootstrap, f"{topic}-open")
    create_topic(kafka_bootstrap, f"{topic}-append", 2, **{"message.timestamp.type": "LogAppendTime"})
    produce(kafka_bootstrap, f"{topic}-append", [(i % 2, b"a%d" % i, b"appended %d" % i) for i in range(8)])
    create_topic(kafka_bootstrap, f"{topic}-grow", 2)
    produce(kafka_bootstrap, f"{topic}-grow", [(i % 2, b"g%d" % i, b"before %d" % i) for i in range(6)])
    starting = json.dumps({topic: {"0": 1, "1": -2, "2": -2}})
    procs = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        # The sources of these queries have no coordinator: each query's driver coordinates
        # its own. But "latest", whose source a deployed coordinator serves, with the options
        # the query's Spark names stand for: the query uses that one.
        args = ["--connector", "kafka", "--max-parallelism", str(PARTITIONS), "--option", f"topics={topic}"]
        deployed = procs.start(
            "coordinator-latest",
            ["coordinator", "--source", f"{topic}-latest", *args, "--option", "starting_offsets=latest"],
        )
        deployed.wait_for_log("is serving", timeout_s=90)
        ending = json.dumps({topic: {"0": 4, "1": -1, "2": 3}})
        earliest = "earliest"
        cases = {
            "explicit": {"mode": "stream", "options": spark_options(topic, kafka_bootstrap, starting)},
            "latest": {
                "mode": "stream",
                "options": {**spark_options(topic, kafka_bootstrap, None), "source": f"{topic}-latest"},
            },
            "timestamp": {
                "mode": "batch",
                "options": {
                    **spark_options(topic, kafka_bootstrap, None),
                    "startingTimestamp": str(base_ms + 3),
                },
            },
            "batch_defaults": {
                "mode": "batch",
                "options": {**spark_options(topic, kafka_bootstrap, None), "minPartitions": "7"},
            },
            "batch_between": {
                "mode": "batch",
                "options": {**spark_options(topic, kafka_bootstrap, starting), "endingOffsets": ending},
            },
            "open": {"mode": "stream", "options": spark_options(f"{topic}-open", kafka_bootstrap, earliest)},
            "append": {"mode": "batch", "options": spark_options(f"{topic}-append", kafka_bootstrap, earliest)},
            "compacted": {
                "mode": "batch",
                "options": spark_options(compacted, kafka_bootstrap, earliest),
                "wait_compacted": {"topic": compacted, "offsets": offsets_compacted},
            },
            "grown": {
                "mode": "stream",
                "options": spark_options(f"{topic}-grow", kafka_bootstrap, earliest),
                "grow": {"topic": f"{topic}-grow", "partitions": 4},
            },
        }
        out = tmp_path / "results.json"
        log = tmp_path / "spark.log"
        args = ["--cases", json.dumps(cases), "--out", str(out), "--checkpoints", str(tmp_path)]
        returncode = run_script(__file__, args, log, kafka_bootstrap, timeout_s=560)
        assert returncode == 0, log.read_text()[-6000:]
        results: dict[str, Any] = json.loads(out.read_text())
    finally:
        procs.stop_all()
        open_producer.abort_transaction(30)
    results["_meta"] = {
        "topic": topic,
        "committed": committed,
        "committed_open": committed_open,
        "offsets_compacted": offsets_compacted,
        "log": log.read_text(),
        "cases": cases,
    }
    return results


JVM_SIDE = "sluicegate-jvm"
"""format("sluicegate") with readPath=jvm: streams only (a batch query refuses it)."""


def same(case: dict[str, Any]) -> list[str]:
    """The rows of a case, after asserting that every side has the same schema and rows."""
    spark_side = case["kafka"]
    ours = [case["sluicegate"], *([case[JVM_SIDE]] if JVM_SIDE in case else [])]
    for side in ours:
        assert side["schema"] == spark_side["schema"]
        assert sorted(side["rows"]) == sorted(spark_side["rows"])
    return list(spark_side["rows"])


def test_explicit_starting_offsets_read_the_same_rows_and_the_default_start_is_latest(parity: dict[str, Any]) -> None:
    meta = parity["_meta"]
    rows = same(parity["explicit"])
    assert len(rows) == meta["committed"] - 1, "all committed records but offset 0 of partition 0"
    # to_json leaves null fields out: rows without a key or a value are in the comparison
    assert any('"key"' not in row for row in rows) and any('"value"' not in row for row in rows)
    assert same(parity["latest"]) == [], "startingOffsets defaults to latest on both"
    spark_log, topic = meta["log"], meta["topic"]
    assert "groupIdPrefix is not used" in spark_log
    assert f"source name not given: this query reads a source of its own, {topic}.query-" in spark_log
    own = re.compile(rf"source {re.escape(topic)}\.query-[0-9a-f]{{8}}: this process coordinates it now")
    assert own.search(spark_log), "the query served its own source itself"
    assert f"source {topic}-latest: this process coordinates it now" not in spark_log, "the deployed one served it"
    # three partitions on local[2]: two reader subtasks, each reading its partitions' ranges in turn
    assert f"parallelism not given: 2 (the kafka connector suggests {PARTITIONS}, at most the session's 2" in spark_log


def test_every_stream_case_ran_on_the_jvm_read_path_too(parity: dict[str, Any]) -> None:
    """(their rows are compared by ``same`` in the tests of each case)"""
    require_jvm_read_path()
    streams = [case for case, spec in parity["_meta"]["cases"].items() if spec["mode"] == "stream"]
    assert len(streams) == 4 and all(JVM_SIDE in parity[case] for case in streams), streams


def test_a_starting_timestamp_starts_each_partition_at_its_first_record_at_or_after_it(parity: dict[str, Any]) -> None:
    rows = same(parity["timestamp"])
    assert 0 < len(rows) < parity["_meta"]["committed"]


def test_batch_queries_read_from_earliest_to_latest_and_between_offsets(parity: dict[str, Any]) -> None:
    meta = parity["_meta"]
    assert parity["batch_defaults"]["kafka"]["schema"] == parity["explicit"]["kafka"]["schema"]
    assert len(same(parity["batch_defaults"])) == meta["committed"], "a batch query reads from earliest to latest"
    assert 0 < len(same(parity["batch_between"])) < meta["committed"] - 1


def test_both_stop_at_an_open_transaction(parity: dict[str, Any]) -> None:
    rows = same(parity["open"])
    assert len(rows) == parity["_meta"]["committed_open"], "the open transaction's record is not read"


def test_log_append_time_is_the_brokers_on_both(parity: dict[str, Any]) -> None:
    rows = [json.loads(r) for r in same(parity["append"])]
    assert len(rows) == 8 and {r["timestampType"] for r in rows} == {1}


def test_a_compacted_topic_reads_what_the_cleaner_left_on_both(parity: dict[str, Any]) -> None:
    rows = [json.loads(r) for r in same(parity["compacted"])]
    assert len(rows) == 11 < parity["_meta"]["offsets_compacted"], "each key's last value, and the last record"
    assert sorted(r["offset"] for r in rows)[:5] == [1, 3, 5, 7, 9], "the gaps the cleaner left"


def test_partitions_added_between_runs_are_read_from_their_start_on_both(parity: dict[str, Any]) -> None:
    rows = [json.loads(r) for r in same(parity["grown"])]
    assert {r["partition"] for r in rows} == {0, 1, 2, 3}
    assert len(rows) == 6 + 8, "six before, eight after (two in each of four partitions)"


# -- the Spark side (this file run as a script) -----------------------------------------


def run_cases(cases: dict[str, dict[str, Any]], work: Path) -> dict[str, Any]:
    from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars
    from sluicegate.spark.job import spark_session
    from sluicegate.spark.jvm_classpath import built

    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    jars = ",".join(str(p) for p in ensure_spark_kafka_jars())
    spark = spark_session("sluicegate-parity", quiet=True, extra_conf={"spark.jars": jars})
    results: dict[str, Any] = {}
    for case, spec in cases.items():
        if "wait_compacted" in spec:
            wait_until_compacted(bootstrap, spec["wait_compacted"]["topic"], spec["wait_compacted"]["offsets"])
        results[case] = {}
        for run in range(2 if "grow" in spec else 1):
            if run == 1:
                grow_topic(bootstrap, spec["grow"]["topic"], spec["grow"]["partitions"])
            jvm = [JVM_SIDE] if spec["mode"] == "stream" and built() is not None else []
            for side in ("kafka", "sluicegate", *jvm):
                schema, rows = run_case(spark, spec, side, work / f"{case}_{side}")
                results[case][side] = {"schema": schema, "rows": rows}
                print(f"{case} {side} (run {run + 1}): {len(rows)} rows in all", flush=True)
    spark.stop()
    return results


def run_case(spark: Any, spec: dict[str, Any], side: str, work: Path) -> tuple[str, list[str]]:
    """(schema as JSON, rows as JSON) of one side of a case. A stream writes Parquet files
    (exactly once through its checkpoint, which a second run continues from) and its rows
    are all those files hold. The JVM side's query names a source of its own (a source is
    read by one query)."""
    fmt = "kafka" if side == "kafka" else "sluicegate"
    given = {k: v for k, v in spec["options"].items() if fmt == "sluicegate" or k != "source"}
    if side == JVM_SIDE:
        topic = given["subscribe"]
        given = {**given, "readPath": "jvm", "source": f"{given.get('source', topic)}-jvm"}
    reader = spark.readStream.format(fmt) if spec["mode"] == "stream" else spark.read.format(fmt)
    for key, value in given.items():
        reader = reader.option(key, value)
    frame = reader.load()
    if spec["mode"] == "batch":
        return frame.schema.json(), [r.row for r in frame.selectExpr("to_json(struct(*)) AS row").collect()]
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None, f"{work.name}: {query.exception()}"
    written = spark.read.schema(frame.schema).parquet(str(work / "out"))
    return frame.schema.json(), [r.row for r in written.selectExpr("to_json(struct(*)) AS row").collect()]


def wait_until_compacted(bootstrap: str, topic: str, offsets: int, timeout_s: float = 120.0) -> None:
    """Until the log cleaner has removed records of ``topic`` (fewer records than offsets)."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "parity-compaction-check"})
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        try:
            while batch := consumer.consume(100, timeout=1.0):
                seen += len([m for m in batch if m.error() is None])
        finally:
            consumer.close()
        if 0 < seen < offsets:
            print(f"{topic}: {seen} records in {offsets} offsets after compaction", flush=True)
            return
        time.sleep(2.0)
    raise AssertionError(f"the log cleaner did not compact {topic} within {timeout_s} s")


def grow_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Add partitions to ``topic`` and two records to each of them all."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < partitions:
        assert time.monotonic() < deadline, f"{topic} did not grow to {partitions} partitions"
        time.sleep(0.2)
    produce(bootstrap, topic, [(p, b"h%d-%d" % (p, i), b"after %d" % i) for p in range(partitions) for i in range(2)])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoints", required=True)
    args = parser.parse_args()
    results = run_cases(json.loads(args.cases), Path(args.checkpoints))  # checkpoints and outputs
    Path(args.out).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
