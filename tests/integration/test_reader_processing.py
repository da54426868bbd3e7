"""A user's function in ``sluicegate reader`` over real Kafka and real processes.

A bounded source over a topic of JSON orders (keys, headers, explicit timestamps) is
read by one reader process into ``kafka:OUT`` (the record format): with no function
OUT holds the records as they were; with a per-record function (filter and enrich,
one record it cannot parse dead-lettered under ``--on-process-error skip``) or a
batch function, OUT holds the function applied to every input record exactly once,
read read_committed, keys, headers and timestamps kept.
"""

from __future__ import annotations

import os
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka_data import audit_ok, coordinator_args, create_topic, kafka_options, option_args
from processes import ProcessGroup

from sluicegate.protocol.topics import ControlTopics
from sluicegate_connectors.kafka.read_path import native_available

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]

PARTITIONS = 4
ORDERS = 2_000
BAD = 777
"""The order whose value is not JSON."""
BASE_TS = 1_700_000_000_000

FUNCTIONS = textwrap.dedent(
    """
    import json

    import pyarrow as pa
    import pyarrow.compute as pc

    import sluicegate


    def enrich(record: sluicegate.Message) -> sluicegate.Message | None:
        order = json.loads(record.value)  # one value is not JSON: skipped, dead-lettered
        if order["amount"] <= 0:
            return None
        return record.replace(value={**order, "vat": order["amount"] // 5}, headers=(*record.headers, ("vat", b"1")))


    def shout(batch: pa.RecordBatch) -> pa.RecordBatch:
        upper = pc.utf8_upper(batch.column("value").cast(pa.string()))
        kept = [batch.column(name) for name in ("key", "headers", "timestamp")]
        return pa.RecordBatch.from_arrays([upper, *kept], names=["value", "key", "headers", "timestamp"])
    """
)

Row = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def order_value(n: int, bad: bool = True) -> bytes:
    if n == BAD and bad:
        return b"not json"
    return orjson.dumps({"id": n, "amount": (n % 11) - 2})


def produce_orders(bootstrap: str, topic: str, bad: bool = True) -> list[Row]:
    """The input, each order once: (key, value, headers, timestamp ms); with ``bad``,
    order BAD is not JSON."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    rows: list[Row] = []
    for n in range(ORDERS):
        key = None if n % 10 == 0 else f"c{n % 7}".encode()
        headers = (("trace", f"t{n}".encode()),)
        value = order_value(n, bad)
        producer.produce(
            topic, value=value, key=key, headers=list(headers), partition=n % PARTITIONS, timestamp=BASE_TS + n
        )
        rows.append((key, value, headers, BASE_TS + n))
    assert producer.flush(30) == 0
    return rows


def read_topic(bootstrap: str, topic: str) -> list[Row]:
    """Every committed record of ``topic``, read read_committed to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sluicegate-test-unused",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rows: list[Row] = []
    at_end: set[int] = set()
    try:
        while len(at_end) < partitions:
            for message in consumer.consume(1000, timeout=1.0):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    at_end.add(message.partition())
                    continue
                headers = tuple((k, v) for k, v in message.headers() or [])
                rows.append((message.key(), message.value(), headers, message.timestamp()[1]))
    finally:
        consumer.close()
    return rows


def run_source(
    procs: ProcessGroup, tmp_path: Path, bootstrap: str, source: str, *reader_extra: str
) -> tuple[list[Row], list[Row], Any]:
    """Orders in, one bounded reader with ``reader_extra``; returns (input, OUT, the reader)."""
    data, out = f"{source}.in", f"{source}.out"
    create_topic(bootstrap, data, PARTITIONS)
    create_topic(bootstrap, out, PARTITIONS)
    rows = produce_orders(bootstrap, data)
    (tmp_path / "order_functions.py").write_text(FUNCTIONS)
    options = kafka_options(bootstrap, topics=data, stopping_offsets="latest")
    coordinator = procs.start("coordinator", coordinator_args(source, 1, options))
    coordinator.wait_for_log("is serving", timeout_s=90)
    args = [
        *("reader", "--source", source, "--subtask", "0", "--connector", "kafka", "--output", f"kafka:{out}"),
        *option_args(options),
        *("--checkpoint-interval-ms", "300"),
        *reader_extra,
    ]
    pythonpath = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    reader = procs.start("reader", args, env={"PYTHONPATH": pythonpath})
    reader.wait(120)
    return rows, read_topic(bootstrap, out), reader


@pytest.mark.parametrize(
    "path",
    [
        "python",
        pytest.param("native", marks=pytest.mark.skipif(not native_available(), reason="sluicegate._native not built")),
    ],
)
def test_no_function_writes_each_record_as_it_was_read(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path, path: str
) -> None:
    """On both read paths (the other tests take the default, native where it is built)."""
    rows, out, reader = run_source(procs, tmp_path, kafka_bootstrap, unique_source, "--option", f"read_path={path}")
    assert reader.returncode == 0, reader.tail()
    assert f"as Arrow batches on the {path} read path" in reader.tail(200), reader.tail(200)
    assert Counter(out) == Counter(rows)
    audit_ok(kafka_bootstrap, unique_source)


def test_a_record_function_filters_and_enriches_and_dead_letters_what_it_cannot_parse(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    rows, out, reader = run_source(
        procs,
        tmp_path,
        kafka_bootstrap,
        unique_source,
        "--process",
        "order_functions:enrich",
        "--on-process-error",
        "skip",
    )
    assert reader.returncode == 0, reader.tail()
    expected = []
    for key, value, headers, timestamp in rows:
        if value == b"not json":
            continue
        order = orjson.loads(value)  # type: ignore[arg-type]
        if order["amount"] > 0:
            enriched = orjson.dumps({**order, "vat": order["amount"] // 5})
            expected.append((key, enriched, (*headers, ("vat", b"1")), timestamp))
    assert Counter(out) == Counter(expected)
    letters = read_topic(kafka_bootstrap, ControlTopics.for_source(unique_source, "sluicegate").dead_letter)
    assert [(key, value) for key, value, _, _ in letters] == [(b"c0", b"not json")]
    said = dict(letters[0][2])
    assert said["sluicegate.error.kind"] == b"process-error"
    assert b"order_functions:enrich" in (said["sluicegate.error.reason"] or b"")
    assert said["sluicegate.origin.offset"] == str(BAD // PARTITIONS).encode()
    assert "1 dead-lettered records" in reader.tail(40)
    audit_ok(kafka_bootstrap, unique_source)


def test_a_batch_function_gets_whole_batches(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    rows, out, reader = run_source(
        procs, tmp_path, kafka_bootstrap, unique_source, "--process", "order_functions:shout"
    )
    assert reader.returncode == 0, reader.tail()
    assert Counter(out) == Counter((k, v.upper() if v else v, h, t) for k, v, h, t in rows)
    audit_ok(kafka_bootstrap, unique_source)


def test_a_function_that_fails_stops_the_reader_naming_the_record(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """The default policy: exit 1 naming the record; nothing after the last checkpoint is
    committed, so OUT holds only records before the bad one in its partition."""
    _, out, reader = run_source(procs, tmp_path, kafka_bootstrap, unique_source, "--process", "order_functions:enrich")
    assert reader.returncode == 1, reader.tail()
    said = reader.tail(40)
    assert f"order_functions:enrich failed on {unique_source}.in[{BAD % PARTITIONS}]@{BAD // PARTITIONS}" in said, said
    assert "--on-process-error skip" in said
    written = [orjson.loads(value) for _, value, _, _ in out if value]
    assert all(o["id"] < BAD for o in written if o["id"] % PARTITIONS == BAD % PARTITIONS)


def test_a_process_that_cannot_be_imported_is_refused_at_start(tmp_path: Path, procs: ProcessGroup) -> None:
    args = ["reader", "--source", "s", "--subtask", "0", "--connector", "sequence", "--output", "kafka:out"]
    proc = procs.run("bad-process", [*args, "--process", "no_such_module_here:fn"], timeout_s=60)
    assert proc.returncode == 2
    assert "--process" in proc.tail() and "no_such_module_here" in proc.tail()
