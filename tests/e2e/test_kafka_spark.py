"""The ``kafka`` connector end to end: a real Kafka topic, real Spark (local[2]) and a
real coordinator process (``sluicegate coordinator --connector kafka``).

One data topic of 8 partitions holds 2,000,000 small records of known content: the
record at offset ``o`` of partition ``p`` has the value ``b"p:o"``, and those at offsets
0, 50,000, ... also a key ``b"k<o>"`` and one header ``("h", b"v<o>")``. So the whole
output of a query is checked exactly: per partition the row count, the distinct offsets
and their range (no loss, no duplicate), a CRC-32 checksum over (partition, offset,
value), and every row's topic, timestamp type, key and headers. The tests share the
topic (module fixture); each reads it as a source of its own:

1. a plain bounded run (``stopping_offsets=latest``, ``Trigger.AvailableNow``,
   parallelism 4, ``maxRecordsPerTrigger`` so that it takes 7 batches) into Parquet;
   the schema is Spark's Kafka source's;
2. the Spark driver SIGKILLed mid-run while it hosts the source's coordinator (no
   coordinator is deployed: the query serves its source itself, coordinator=auto; the
   query runs in a subprocess, this file run as a script, killed with its JVM and Python
   workers), restarted from its checkpoint: the new driver takes the source over;
3. a coordinator deployed mid-run takes the source over from the query's own, and is
   SIGKILLed once it serves;
4. an unbounded source (``stopping_offsets=none``, discovery every second) read by a
   running query (processingTime trigger) while partitions are added to its topic (a
   topic of its own): the coordinator assigns the new partitions within a few discovery
   intervals and the query reads all their records, once;
5. cooperative rebalancing: a running query holds every partition until sluicegate
   readers join for the other slots; the partitions of their slots move to them at a
   batch boundary, and the query's rows and the readers' ``kafka:OUT`` hold every
   record once;
6. the whole query SIGSTOPped past a deployed coordinator's session timeout, then
   SIGCONTed: its subtasks are timed out, register again and read on, every row once.

Tests 2, 3 and 6 read the first quarter of each partition (``stopping_offsets`` as a JSON
map). The queries of tests 2 and 6 (a process of their own) read with the confluent-kafka read path
(``SLUICEGATE_KAFKA_READ_PATH=python``), the others with the default one (the native
reader where it is built): both read paths run under Spark, with no extra Spark run
(tests/integration/test_kafka_ranges.py compares the two row by row). Tests 1 and 2 also
run with ``readPath=jvm`` (Spark's own Kafka readers under sluicegate's planning). The query writes
to a Parquet file sink (exactly once through its log), read back with pyarrow from the
files that log committed; test 4 uses the memory sink.
Each ends with the audit of the control topics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from jvm_read_path import require_jvm_read_path
from kafka_data import OutputReader
from local_http import free_port, http_get, wait_until
from processes import Proc, ProcessGroup, readers_messages, support_pythonpath

from sluicegate.audit.commands import run_audit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(480), pytest.mark.spark]

PARTITIONS = 8
PER_PARTITION = 250_000
RECORDS = PARTITIONS * PER_PARTITION
"""2M records of ~10 bytes: enough that the plain run takes several batches of 300,000 at
a realistic rate and the kill tests have a mid-run to land in; small enough that writing
the topic takes ~5-10 s and the plain run stays under ~90 s on 2 cores (Spark reads here
at ~40-60k records/s with the Parquet sink: the Python workers turn librdkafka messages
into Arrow)."""
PARALLELISM = 4
MAX_RECORDS_PER_TRIGGER = 300_000
"""7 data batches over the 2M records."""
QUARTER = PER_PARTITION // 4
"""The kill tests read the first quarter of each partition (``stopping_offsets`` as a
JSON map): 500,000 records, 100,000 a batch, so that a kill lands mid-run at a quarter of
the cost (the Python read path's run of the half took ~5 min on CI's 2 cores)."""
KILL_MAX_RECORDS_PER_TRIGGER = 100_000
KEYED_EVERY = 50_000
"""Offsets that are a multiple of this have a key and a header."""


# -- the data topic --------------------------------------------------------------------


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    # retention.ms=-1: nothing may be deleted while a test reads it
    new = NewTopic(topic, partitions, 1, config={"retention.ms": "-1", "retention.bytes": "-1"})
    admin = _admin(bootstrap)  # referenced until the result: a collected client cancels its requests
    admin.create_topics([new])[topic].result(30)


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = _admin(bootstrap)
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)})
    return {tp.partition: f.result(30).offset for tp, f in futures.items()}


def _produce(bootstrap: str, topic: str, counts: Mapping[int, tuple[int, int]]) -> None:
    """Write offsets ``[start, end)`` of each partition ``p``: value ``p:offset``. The
    idempotent producer writes each record once and in order, so its offset is its number
    (checked: each partition ends at ``end``)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    produce = producer.produce
    for partition, (start, end) in counts.items():
        prefix = b"%d:" % partition
        offset = start
        while offset < end:
            try:
                if offset % KEYED_EVERY == 0:
                    key = b"k%d" % offset
                    produce(topic, prefix + b"%d" % offset, key, partition, headers=[("h", b"v%d" % offset)])
                else:
                    produce(topic, prefix + b"%d" % offset, None, partition)
                offset += 1
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0, "records left undelivered"
    ends = _end_offsets(bootstrap, topic, max(counts) + 1)
    assert {p: ends[p] for p in counts} == {p: end for p, (_, end) in counts.items()}, ends


@dataclass(frozen=True)
class Expected:
    """What reading a topic must give: offsets ``0..n-1`` of each partition (``counts``)
    once, and the checksum of their rows."""

    topic: str
    counts: dict[int, int]
    checksum: int

    @property
    def rows(self) -> int:
        return sum(self.counts.values())


def checksum(partition: Any, offset: Any, value: Any) -> int:
    """CRC-32 of the rows ``partition:offset:value`` (one a line), in the order given."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lines = pc.binary_join_element_wise(
        pc.cast(partition, pa.string()), pc.cast(offset, pa.string()), pc.cast(value, pa.string()), ":"
    )
    return zlib.crc32("\n".join(lines.to_pylist()).encode())


def expected_of(topic: str, counts: Mapping[int, int]) -> Expected:
    import pyarrow as pa
    import pyarrow.compute as pc

    partition = pa.array([p for p, n in counts.items() for _ in range(n)], pa.int32())
    offset = pa.array([o for n in counts.values() for o in range(n)], pa.int64())
    value = pc.binary_join_element_wise(pc.cast(partition, pa.string()), pc.cast(offset, pa.string()), ":")
    return Expected(topic, dict(counts), checksum(partition, offset, value))


@pytest.fixture(scope="module")
def data_topic(kafka_bootstrap: str) -> Expected:
    topic = f"kdata-{secrets.token_hex(4)}"
    _create_topic(kafka_bootstrap, topic, PARTITIONS)
    _produce(kafka_bootstrap, topic, {p: (0, PER_PARTITION) for p in range(PARTITIONS)})
    return expected_of(topic, dict.fromkeys(range(PARTITIONS), PER_PARTITION))


@pytest.fixture(scope="module")
def first_quarter(data_topic: Expected) -> Expected:
    return expected_of(data_topic.topic, dict.fromkeys(range(PARTITIONS), QUARTER))


# -- the query -------------------------------------------------------------------------


def connector_options(topic: str, bootstrap: str, stopping: str = "latest", **extra: str) -> dict[str, str]:
    return {"topics": topic, "bootstrap_servers": bootstrap, "stopping_offsets": stopping, **extra}


def stop_at(expected: Expected) -> str:
    """``stopping_offsets`` that read what ``expected`` holds: a JSON map."""
    return json.dumps({expected.topic: {str(p): n for p, n in expected.counts.items()}})


def kafka_stream(
    spark: Any,
    source: str,
    options: Mapping[str, str],
    bootstrap: str,
    max_records: int,
    include_headers: bool = True,
    read_path: str | None = None,
) -> Any:
    """The query's stream; ``include_headers`` is the query's own (Spark's
    ``includeHeaders``), the coordinator is never told; so is ``read_path`` (``readPath``)."""
    reader = (
        spark.readStream.format("sluicegate")
        .option("source", source)
        .option("connector", "kafka")
        .option("parallelism", str(PARALLELISM))
        .option("maxRecordsPerTrigger", str(max_records))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("option.include_headers", str(include_headers).lower())
    )
    for key, value in options.items():
        reader = reader.option(f"option.{key}", value)
    if read_path is not None:
        reader = reader.option("readPath", read_path)
    return reader.load()


def start_parquet_query(
    spark: Any,
    source: str,
    options: Mapping[str, str],
    bootstrap: str,
    workdir: Path,
    max_records: int,
    read_path: str | None = None,
) -> Any:
    """The bounded query: every row into Parquet (the file sink is exactly once), AvailableNow."""
    return (
        kafka_stream(spark, source, options, bootstrap, max_records, read_path=read_path)
        .writeStream.format("parquet")
        .option("path", str(workdir / "out"))
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .queryName(f"kafka-{source}")
        .trigger(availableNow=True)
        .start()
    )


def rows_planned(query: Any) -> int:
    """Offsets planned so far by the query (its source offset's running count)."""
    for source in (query.lastProgress or {}).get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            with contextlib.suppress(ValueError):
                end = json.loads(end)
        if isinstance(end, dict) and isinstance(end.get("rows"), int):
            return int(end["rows"])
    return 0


def spark_session(app: str) -> Any:
    from sluicegate.spark.job import spark_session as session

    return session(app, quiet=True)  # sets PYSPARK_PYTHON to this interpreter


# -- checking the output ----------------------------------------------------------------


def check_rows(table: Any, expected: Expected) -> None:
    """``table`` (Arrow, Spark's Kafka schema) holds exactly the topic's records: offsets
    0..n-1 of each partition once, the checksum over (partition, offset, value), and in
    every row the topic, timestamp type, key and headers the record was written with."""
    import pyarrow.compute as pc

    table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    stats = table.group_by("partition").aggregate(
        [("offset", "count"), ("offset", "count_distinct"), ("offset", "min"), ("offset", "max")]
    )
    got = {row.pop("partition"): tuple(row.values()) for row in stats.to_pylist()}
    want = {p: (n, n, 0, n - 1) for p, n in expected.counts.items()}
    assert got == want, "partition: (rows, distinct offsets, min, max)"
    assert checksum(table["partition"], table["offset"], table["value"]) == expected.checksum

    assert pc.all(pc.equal(table["topic"], expected.topic)).as_py()
    assert pc.all(pc.equal(table["timestampType"], 0)).as_py()  # CreateTime
    assert table["timestamp"].null_count == 0
    # the records with a key and a header: offsets 0, KEYED_EVERY, ... of each partition
    keyed = table.filter(pc.is_valid(table["key"])).select(["partition", "offset", "key", "headers"]).to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in keyed) == [
        (p, o) for p, n in sorted(expected.counts.items()) for o in range(0, n, KEYED_EVERY)
    ]
    for row in keyed:
        o = row["offset"]
        assert (row["key"], row["headers"]) == (b"k%d" % o, [{"key": "h", "value": b"v%d" % o}]), row
    assert table["headers"].null_count == table.num_rows - len(keyed)


def committed_files(path: Path) -> list[str]:
    """The files of a Parquet file sink that its log (``_spark_metadata/N[.compact]``:
    "v1", then a JSON object per file) committed; never a file of a batch that a killed
    query wrote but did not commit. (Spark reads the directory the same way.)"""
    files: dict[str, bool] = {}
    logs = [f for f in (path / "_spark_metadata").iterdir() if f.name.split(".")[0].isdigit()]
    for log in sorted(logs, key=lambda f: int(f.name.split(".")[0])):
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            files[entry["path"]] = entry["action"] == "add"
    return [unquote(urlparse(name).path) for name, added in files.items() if added]


def check_parquet(path: Path, expected: Expected) -> None:
    import pyarrow.parquet as pq

    check_rows(pq.read_table(committed_files(path)), expected)


def read_parquet_tree(path: Path) -> Any:
    """Every Parquet file under ``path`` (a ``foreachBatch`` sink's batch directories)."""
    import pyarrow.parquet as pq

    return pq.read_table([str(f) for f in sorted(path.rglob("*.parquet"))])


def assert_audit(bootstrap: str, source: str, splits: int, bounded: bool = True) -> Any:
    result = asyncio.run(run_audit(bootstrap, source))
    assert result.ok, f"audit: {result.first_violation}"
    summary = result.summary
    assert summary.splits_assigned == splits
    if bounded:
        assert (summary.splits_finished, summary.splits_owned) == (splits, 0)
    else:
        # a stopped stream's subtasks own its splits until their session ends, or gave them
        # back when they left (the JVM path's planner leaves as the query stops)
        assert summary.splits_finished == 0 and summary.splits_owned in (0, splits), summary
    return result


PYTHON_READ_PATH = {"SLUICEGATE_KAFKA_READ_PATH": "python"}

# -- fixtures and processes --------------------------------------------------------------


@pytest.fixture(scope="module")
def spark(kafka_bootstrap: str) -> Iterator[Any]:
    session = spark_session("sluicegate-kafka-e2e")
    yield session
    session.stop()


def kafka_coordinator(procs: ProcessGroup, source: str, options: Mapping[str, str], *extra: str) -> Proc:
    args = ["coordinator", "--source", source, "--connector", "kafka", "--max-parallelism", str(PARALLELISM)]
    for key, value in options.items():
        args += ["--option", f"{key}={value}"]
    proc = procs.start(f"coordinator-{source}-{len(procs.procs)}", [*args, *extra])
    proc.wait_for_log("is serving", timeout_s=90)
    return proc


def start_job(
    procs: ProcessGroup, name: str, source: str, options: Mapping[str, str], workdir: Path, read_path: str | None = None
) -> Proc:
    """The bounded query in a subprocess of its own session (this file run as a script);
    ``read_path``: the query's ``readPath``."""
    args = [__file__, "--source", source, "--workdir", str(workdir), "--options", json.dumps(dict(options))]
    args += ["--max-records-per-trigger", str(KILL_MAX_RECORDS_PER_TRIGGER)]
    args += ["--read-path", read_path] if read_path else []
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as handle:
        popen = subprocess.Popen(
            [sys.executable, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            # the other read path than the in-process tests' default (native where it is built):
            # both run under Spark without a second Spark run
            env=dict(
                os.environ,
                KAFKA_BOOTSTRAP_SERVERS=procs.bootstrap,
                PYTHONPATH=support_pythonpath(),
                PYTHONUNBUFFERED="1",
                **PYTHON_READ_PATH,
            ),
            start_new_session=True,
        )
    proc = Proc(name, popen, log_path, args)
    procs.procs.append(proc)
    return proc


def job_rows(proc: Proc) -> int:
    # a log line of another thread may run on after the number, its newline not yet written
    found = [re.match(r"\d+", line.split("rows=", 1)[1]) for line in proc.lines_with("progress rows=")]
    numbers = [int(m.group()) for m in found if m]
    return numbers[-1] if numbers else 0


def wait_mid_run(job: Proc, rows: int) -> None:
    """Until ``job`` has planned ``rows``, then a random moment more: anywhere in a batch."""
    deadline = time.monotonic() + 180
    while job_rows(job) < rows:
        assert job.popen.poll() is None, f"the job ended early:\n{job.tail(40)}"
        assert time.monotonic() < deadline, f"the job made no progress:\n{job.tail(40)}"
        time.sleep(0.2)
    time.sleep(random.uniform(0.0, 1.5))


def job_main(argv: list[str] | None = None) -> int:
    """``python test_kafka_spark.py --source S --workdir DIR --options JSON
    --max-records-per-trigger N``: run the bounded query to its end, printing
    ``progress rows=N`` twice a second."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--options", required=True)
    parser.add_argument("--max-records-per-trigger", required=True, type=int)
    parser.add_argument("--read-path", default=None)
    args = parser.parse_args(argv)
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    session = spark_session(f"sluicegate-kafka-{args.source}")
    try:
        options = json.loads(args.options)
        query = start_parquet_query(
            session, args.source, options, bootstrap, args.workdir, args.max_records_per_trigger, args.read_path
        )
        while query.isActive:
            query.awaitTermination(0.5)
            print(f"progress rows={rows_planned(query)}", flush=True)
        if query.exception() is not None:
            print(f"FAILED {query.exception()}", flush=True)
            return 1
        print(f"progress rows={rows_planned(query)}", flush=True)
        print("DONE", flush=True)
        return 0
    finally:
        session.stop()


def run_query(query: Any, timeout_s: float, on_progress: Any = None) -> list[dict[str, Any]]:
    """Wait for an AvailableNow query to end; returns its progress reports."""
    started = time.monotonic()
    try:
        while query.isActive:
            query.awaitTermination(0.5)
            if on_progress is not None:
                on_progress(rows_planned(query))
            assert time.monotonic() - started < timeout_s, f"the query did not end within {timeout_s} s"
        assert query.exception() is None, f"the query failed: {query.exception()}"
        return list(query.recentProgress)
    finally:
        if query.isActive:
            query.stop()


# -- the tests ----------------------------------------------------------------------------

SPARK_KAFKA_SCHEMA_WITHOUT_HEADERS = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int"
)
SPARK_KAFKA_SCHEMA = SPARK_KAFKA_SCHEMA_WITHOUT_HEADERS + ", headers array<struct<key: string, value: binary>>"
"""Spark's Kafka source without and with includeHeaders (KafkaRecordToRowConverter)."""


@pytest.mark.parametrize("read_path", ["native", "python", "jvm"])
def test_a_bounded_topic_is_read_exactly_once_into_parquet(
    spark: Any,
    procs: ProcessGroup,
    data_topic: Expected,
    kafka_bootstrap: str,
    unique_source: str,
    tmp_path: Path,
    read_path: str,
) -> None:
    """On every read path: the fallback (confluent-kafka) must not rot while the native
    one is the default, and ``readPath=jvm`` (Spark's own Kafka readers under sluicegate's
    planning) must read the same rows."""
    from pyspark.sql.types import _parse_datatype_string

    from sluicegate_connectors.kafka.read_path import native_available

    if read_path == "native" and not native_available():
        if os.environ.get("CI") == "true":
            pytest.fail("sluicegate._native is not built (make install): it is built by `make install` (maturin)")
        pytest.skip("sluicegate._native is not built (make install)")
    if read_path == "jvm":
        require_jvm_read_path()
    options = connector_options(data_topic.topic, kafka_bootstrap)
    kafka_coordinator(procs, unique_source, options)
    # the query's own: the coordinator never reads ranges
    spark_read_path = "jvm" if read_path == "jvm" else None
    if spark_read_path is None:
        options["read_path"] = read_path
    lag_group = f"{unique_source}.lag"  # the query's own too: where it tells its committed positions
    options["commit_offsets_to_group"] = lag_group

    def stream(include_headers: bool = True) -> Any:
        return kafka_stream(
            spark, unique_source, options, kafka_bootstrap, MAX_RECORDS_PER_TRIGGER, include_headers, spark_read_path
        )

    schema = stream().schema
    assert schema == _parse_datatype_string(SPARK_KAFKA_SCHEMA), schema.simpleString()
    plain = stream(include_headers=False).schema
    assert plain == _parse_datatype_string(SPARK_KAFKA_SCHEMA_WITHOUT_HEADERS), plain.simpleString()

    query = start_parquet_query(
        spark, unique_source, options, kafka_bootstrap, tmp_path, MAX_RECORDS_PER_TRIGGER, spark_read_path
    )
    progress = run_query(query, timeout_s=240)

    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sum(sizes) == RECORDS
    assert len(sizes) >= RECORDS // MAX_RECORDS_PER_TRIGGER, sizes
    assert max(sizes) <= MAX_RECORDS_PER_TRIGGER, sizes
    check_parquet(tmp_path / "out", data_topic)
    assert_audit(kafka_bootstrap, unique_source, PARTITIONS)
    # Each batch Spark committed, the group heard of: read to the end, no lag in Kafka's tools.
    assert group_offsets(kafka_bootstrap, lag_group) == _end_offsets(kafka_bootstrap, data_topic.topic, PARTITIONS)


def group_offsets(bootstrap: str, group: str) -> dict[int, int]:
    """The offsets committed to ``group``, by partition."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = _admin(bootstrap)  # referenced until the result: a collected client cancels its requests
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {tp.partition: tp.offset for tp in found.topic_partitions}


METRICS_PER_PARTITION = 3_000


def test_the_driver_serves_what_its_executors_read_and_each_partition_s_lag(
    spark: Any, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    """``metricsPort``: every task's executor reports its reads to the driver's endpoint
    (spark/read_reports.py), so the driver serves each partition's rows as exactly what
    was written, with bytes, and each partition's lag, 0 once everything was read. The
    driver coordinates the source itself: nothing else runs."""
    topic = f"kmetrics-{secrets.token_hex(4)}"
    _create_topic(kafka_bootstrap, topic, PARTITIONS)
    _produce(kafka_bootstrap, topic, {p: (0, METRICS_PER_PARTITION) for p in range(PARTITIONS)})
    port = free_port()
    frame = (
        spark.readStream.format("sluicegate")
        .option("subscribe", topic)
        .option("source", unique_source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PARTITIONS * METRICS_PER_PARTITION // 4))
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("metricsPort", str(port))
        .load()
    )
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )

    def read_all() -> dict[str, dict[str, float]] | None:
        assert query.exception() is None, f"the query failed: {query.exception()}"
        if sum(p["numInputRows"] for p in query.recentProgress) < PARTITIONS * METRICS_PER_PARTITION:
            return None
        families = served_by_split(http_get(port, "/metrics")[2])
        lags = families.get("sluicegate_spark_split_lag_records", {})
        return families if len(lags) == PARTITIONS and not any(lags.values()) else None

    try:
        families = wait_until(read_all, 240, "every record read and no lag left", interval_s=0.5)
    finally:
        query.stop()
    assert families is not None
    want = {f"{topic}-{p}": float(METRICS_PER_PARTITION) for p in range(PARTITIONS)}
    assert families["sluicegate_spark_split_rows_read_total"] == want
    sizes = families["sluicegate_spark_split_bytes_read_total"]
    assert sizes.keys() == want.keys() and all(size > 10 * METRICS_PER_PARTITION for size in sizes.values())


def served_by_split(text: bytes) -> dict[str, dict[str, float]]:
    """Per-split series of a Prometheus exposition: family -> split label -> value."""
    out: dict[str, dict[str, float]] = {}
    for line in text.decode().splitlines():
        m = re.match(r'^(sluicegate_spark_split_\w+)\{.*split="([^"]+)".*\} (\S+)$', line)
        if m:
            out.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
    return out


@pytest.mark.parametrize("read_path", [None, "jvm"])
def test_a_killed_driver_restarts_from_its_checkpoint_without_loss_or_duplicate(
    procs: ProcessGroup,
    first_quarter: Expected,
    kafka_bootstrap: str,
    unique_source: str,
    tmp_path: Path,
    read_path: str | None,
) -> None:
    """With the confluent-kafka read path (PYTHON_READ_PATH) and with readPath=jvm, whose
    planner lives in the killed driver's own Python process."""
    if read_path == "jvm":
        require_jvm_read_path()
    options = connector_options(first_quarter.topic, kafka_bootstrap, stop_at(first_quarter))
    # no coordinator deployed: the driver coordinates the source itself, and dies with it
    first = start_job(procs, "job-1", unique_source, options, tmp_path, read_path)
    wait_mid_run(first, first_quarter.rows // 4)
    first.kill_group()
    assert not first.lines_with("DONE") and job_rows(first) < first_quarter.rows, "the job ended before it was killed"
    assert first.lines_with(f"source {unique_source}: this process coordinates it now"), first.tail(60)

    second = start_job(procs, "job-2", unique_source, options, tmp_path, read_path)
    assert second.wait(300) == 0, second.tail(60)
    assert second.lines_with("DONE") and job_rows(second) == first_quarter.rows, second.tail(20)
    assert second.lines_with("restored at checkpoint"), second.tail(60)
    # the killed driver's coordinator named its process, gone now: the new one took over at once
    assert second.lines_with(f"source {unique_source}: its last coordinator's process"), second.tail(60)
    assert not second.lines_with(f"source {unique_source}: no coordinator committed for"), second.tail(60)
    # FLIP-537: the restarted driver registered with the splits of its restored offset
    reported = [int(n) for n in re.findall(r"(\d+) reported splits", second.log())]
    assert sum(reported) > 0, second.tail(60)
    check_parquet(tmp_path / "out", first_quarter)
    assert_audit(kafka_bootstrap, unique_source, PARTITIONS)


PAUSED_SESSION_MS = 3_000
PAUSED_DEPARTURE_MS = 2_000
DRIVER_PAUSE_S = (PAUSED_SESSION_MS + PAUSED_DEPARTURE_MS) / 1000 + 3.0
"""Long enough for the coordinator to time the query's subtasks out and release their
splits; shorter than the driver's own session timeout (10 s), past which it would fence
itself rather than learn of its failure from the coordinator."""


def test_a_driver_paused_past_its_session_timeout_plans_nothing_twice(
    procs: ProcessGroup, first_quarter: Expected, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    """The whole query (its JVM and Python workers) SIGSTOPped mid-run past the session
    timeout of a deployed coordinator, then SIGCONTed: the coordinator fails the query's
    attempts, their splits depart and come back to the driver, which registers again and
    plans them under new identities. The output is exact and the audit clean.

    Where Spark's offset log holds an offset whose ack never arrived (the pause landed
    between the two), the splits come back at older positions than the query planned; the
    next offset must start them where the query had planned (spark/offsets.py). That
    window is a few ms here, so tests/unit/test_spark_driver_memory.py covers it
    deterministically (``test_a_timed_out_query_reads_nothing_twice_...``)."""
    options = connector_options(first_quarter.topic, kafka_bootstrap, stop_at(first_quarter))
    timeouts = (
        "--session-timeout-ms",
        str(PAUSED_SESSION_MS),
        "--reader-departure-timeout-ms",
        str(PAUSED_DEPARTURE_MS),
    )
    coordinator = kafka_coordinator(procs, unique_source, options, *timeouts)
    job = start_job(procs, "job", unique_source, options, tmp_path)
    wait_mid_run(job, first_quarter.rows // 4)
    job.pause(group=True)
    try:
        time.sleep(DRIVER_PAUSE_S)
    finally:
        job.resume(group=True)
    assert not job.lines_with("DONE"), "the job ended before it was paused"
    assert coordinator.lines_with("fencing it before its splits move"), coordinator.tail(60)

    assert job.wait(300) == 0, job.tail(60)
    assert job.lines_with("DONE") and job_rows(job) == first_quarter.rows, job.tail(20)
    assert re.search(r"subtask \d+ fenced \(", job.log()), job.tail(60)
    check_parquet(tmp_path / "out", first_quarter)
    result = assert_audit(kafka_bootstrap, unique_source, PARTITIONS)
    assert result.summary.released_by_reason.get("departed", 0) >= 1, result.summary.released_by_reason


def test_a_deployed_coordinator_takes_over_from_the_query_and_dies_and_the_query_ends_exactly_once(
    spark: Any, procs: ProcessGroup, first_quarter: Expected, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    """The query's driver coordinates its source (nothing deployed: epoch 1); mid-run a
    deployed coordinator starts and takes the source over (epoch 2, fencing the driver's);
    once it serves it is SIGKILLed, and the driver's takes the source back (epoch 3) to
    read the batches left. Every row once, the audit clean.

    The takeover happens inside the second batch's ``foreachBatch``, before that batch is
    read: Spark plans no further batch until the call returns, so the query is certainly
    still running when the deployed coordinator dies (watching progress from outside, a
    fast read path could end the 5 batches before a coordinator process had started)."""
    options = connector_options(first_quarter.topic, kafka_bootstrap, stop_at(first_quarter))
    out = tmp_path / "out"
    deployed: list[Proc] = []

    def take_over_in_the_second_batch(batch: Any, batch_id: int) -> None:
        if batch_id == 1 and not deployed:
            deployed.append(kafka_coordinator(procs, unique_source, options))  # returns once it serves
            deployed[0].kill()
        # a replayed batch overwrites its own directory: exactly once
        batch.write.mode("overwrite").parquet(str(out / f"batch_id={batch_id}"))

    query = (
        kafka_stream(spark, unique_source, options, kafka_bootstrap, KILL_MAX_RECORDS_PER_TRIGGER)
        .writeStream.foreachBatch(take_over_in_the_second_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .queryName(f"kafka-{unique_source}")
        .trigger(availableNow=True)
        .start()
    )
    progress = run_query(query, timeout_s=300)

    assert deployed, f"the query ended in {len(progress)} batches, before a second one"
    served = re.findall(rf"source {re.escape(unique_source)} \(.*epoch (\d+)\) is serving", deployed[0].log())
    assert served == ["2"], deployed[0].tail()
    check_rows(read_parquet_tree(out), first_quarter)
    result = assert_audit(kafka_bootstrap, unique_source, PARTITIONS)
    # epoch 2, the deployed one's, may have sent nothing before it was killed; the batches
    # after the second were coordinated by a later epoch: the driver's own, taking back
    assert result.summary.epochs[0] == 1 and result.summary.epochs[-1] >= 3, result.summary.epochs


def test_partitions_added_to_the_topic_are_read_exactly_once_by_a_running_query(
    spark: Any, procs: ProcessGroup, kafka_bootstrap: str, unique_source: str
) -> None:
    from confluent_kafka.admin import NewPartitions

    topic = f"kgrow-{secrets.token_hex(4)}"
    before, after, per_partition = 2, 5, 20_000
    _create_topic(kafka_bootstrap, topic, before)
    _produce(kafka_bootstrap, topic, {p: (0, per_partition) for p in range(before)})
    options = connector_options(topic, kafka_bootstrap, "none", partition_discovery_interval_ms="1000")
    kafka_coordinator(procs, unique_source, options)

    query = (
        kafka_stream(spark, unique_source, options, kafka_bootstrap, MAX_RECORDS_PER_TRIGGER)
        .writeStream.format("memory")
        .queryName(f"grow_{unique_source.replace('-', '_')}")
        .trigger(processingTime="1 second")
        .start()
    )
    view = f"grow_{unique_source.replace('-', '_')}"

    def wait_for_rows(rows: int, timeout_s: float) -> float:
        started = time.monotonic()
        while True:
            assert query.isActive, f"the query stopped: {query.exception()}"
            if spark.sql(f"SELECT count(*) FROM {view}").collect()[0][0] >= rows:
                return time.monotonic() - started
            assert time.monotonic() - started < timeout_s, f"fewer than {rows} rows after {timeout_s} s"
            time.sleep(0.5)

    try:
        wait_for_rows(before * per_partition, 120)
        admin = _admin(kafka_bootstrap)
        admin.create_partitions([NewPartitions(topic, after)])[topic].result(30)
        added_ms = int(time.time() * 1000)
        # into the new partitions, and more into the old ones
        counts = {p: (0, per_partition) for p in range(before, after)}
        counts.update({p: (per_partition, 2 * per_partition) for p in range(before)})
        _produce(kafka_bootstrap, topic, counts)
        waited_s = wait_for_rows(2 * before * per_partition + (after - before) * per_partition, 90)
        time.sleep(2.0)  # a batch or two more: nothing is read twice
    finally:
        query.stop()

    expected = expected_of(topic, {p: (2 if p < before else 1) * per_partition for p in range(after)})
    check_rows(spark.table(view).toArrow(), expected)
    assert_audit(kafka_bootstrap, unique_source, after, bounded=False)
    # The coordinator found and assigned the new partitions within a few discovery intervals
    # (a discovery that catches a partition before its leader is elected is retried in 5 s).
    assigned = {
        split["split_id"]: message["ts"]
        for message in asyncio.run(readers_messages(kafka_bootstrap, unique_source))
        if message["type"] == "AddSplits"
        for split in message["body"]["splits"]
    }
    new = [f"{topic}-{p}" for p in range(before, after)]
    assert max(assigned[s] for s in new) - added_ms < 10_000, (assigned, added_ms)
    # and the query read their records a few batches later (batches take seconds on 2 busy cores)
    assert waited_s < 45, f"the new partitions' records were read {waited_s:.1f} s after they were written"


def test_partitions_move_from_a_running_query_to_readers_that_join_exactly_once(
    spark: Any, procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    """Cooperative rebalancing with Spark as the owner: a coordinator of 8 slots, a
    running query holding subtasks 0-3 (so after the grace delay it reads all 8
    partitions), then ``sluicegate reader`` processes join as subtasks 4-7 writing to
    ``kafka:OUT``. The partitions of their slots (sticky) move to them: the query stops
    planning them at a batch boundary and gives them back with the ack of its next
    offset. Spark's rows and OUT together hold every record once."""
    topic, per_partition, slots = f"kmove-{secrets.token_hex(4)}", 5_000, 2 * PARALLELISM
    out = f"{topic}.out"
    _create_topic(kafka_bootstrap, topic, PARTITIONS)
    _create_topic(kafka_bootstrap, out, 4)
    _produce(kafka_bootstrap, topic, {p: (0, per_partition) for p in range(PARTITIONS)})
    options = connector_options(topic, kafka_bootstrap, "none", assignment_grace_ms="1000")
    args = ["coordinator", "--source", unique_source, "--connector", "kafka", "--max-parallelism", str(slots)]
    for key, value in options.items():
        args += ["--option", f"{key}={value}"]
    procs.start(f"coordinator-{unique_source}", args).wait_for_log("is serving", timeout_s=90)
    view = f"move_{unique_source.replace('-', '_')}"
    query = (
        kafka_stream(spark, unique_source, options, kafka_bootstrap, 20_000)
        .writeStream.format("memory")
        .queryName(view)
        .trigger(processingTime="1 second")
        .start()
    )

    def rows() -> int:
        assert query.isActive, f"the query stopped: {query.exception()}"
        return int(spark.sql(f"SELECT count(*) FROM {view}").collect()[0][0])

    readers: list[Proc] = []
    try:
        deadline = time.monotonic() + 120
        while rows() < PARTITIONS * per_partition:  # every partition, the query alone
            assert time.monotonic() < deadline, f"the query read {rows()} rows in 120 s"
            time.sleep(0.5)
        for k in range(PARALLELISM, slots):
            reader_args = ["reader", "--source", unique_source, "--subtask", str(k), "--connector", "kafka"]
            reader_args += [
                "--output",
                f"kafka:{out}",
                "--output-format",
                "envelope",
                "--checkpoint-interval-ms",
                "300",
            ]
            for key, value in options.items():
                reader_args += ["--option", f"{key}={value}"]
            readers.append(procs.start(f"reader-{k}", reader_args))
        deadline = time.monotonic() + 90
        while sum(bool(r.lines_with("splits (seq")) for r in readers) < len(readers):
            assert time.monotonic() < deadline, "the readers got no partitions:\n" + procs.describe()
            for reader in readers:
                assert reader.returncode is None, reader.tail()
            time.sleep(0.5)
        # more records everywhere: the query and the readers read on, each its own partitions
        _produce(kafka_bootstrap, topic, {p: (per_partition, 2 * per_partition) for p in range(PARTITIONS)})
        time.sleep(8.0)
        for reader in readers:
            reader.request_stop()
        assert [r.wait(30) for r in readers] == [0] * len(readers), procs.describe()
        # the query takes the partitions the readers left and reads what remains of them
        output = OutputReader(kafka_bootstrap, out)
        try:
            deadline = time.monotonic() + 60
            while rows() + len(output.read_all()) < 2 * PARTITIONS * per_partition:
                assert time.monotonic() < deadline, f"{rows()} rows in Spark, {len(output.rows)} in OUT"
                time.sleep(1.0)
            time.sleep(2.0)  # a batch or two more: nothing is read twice
            reader_rows = [row["value"] for row in output.read_all()]
        finally:
            output.close()
    finally:
        query.stop()

    spark_rows = spark.table(view).select("partition", "offset").toArrow().to_pylist()
    seen = [(r["partition"], r["offset"]) for r in spark_rows + reader_rows]
    twice = [k for k, n in Counter(seen).items() if n > 1]
    assert not twice, f"{len(twice)} records read twice, e.g. {sorted(twice)[:5]}"
    read = set(seen)
    missing = [(p, o) for p in range(PARTITIONS) for o in range(2 * per_partition) if (p, o) not in read]
    assert not missing, f"{len(missing)} records never read, e.g. {missing[:5]}"
    assert reader_rows, "the readers read nothing"
    messages = asyncio.run(readers_messages(kafka_bootstrap, unique_source))
    given_back = [m for m in messages if m["type"] == "SplitsReleased" and m["body"]["reason"] == "returned"]
    assert given_back and {m["subtask"] for m in given_back} <= set(range(PARALLELISM)), given_back
    result = asyncio.run(run_audit(kafka_bootstrap, unique_source))
    assert result.ok, f"audit: {result.first_violation}"


if __name__ == "__main__":
    sys.exit(job_main())
