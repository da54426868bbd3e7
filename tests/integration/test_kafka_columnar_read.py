"""The kafka connector's columnar read (``next_columns``, the standalone reader's path
when it writes records) against its per-record read, over a real broker: the same
records, several partitions in one batch, each split's greatest timestamp reported,
a bounded split finished at its stop offset, headers kept unless include_headers=false."""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka_data import create_topic

from sluicegate_connectors.kafka.options import KafkaOptions
from sluicegate_connectors.kafka.read_path import native_available
from sluicegate_connectors.kafka.reader import KafkaSourceReader
from sluicegate_connectors.kafka.split import KafkaPartitionSplit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

READ_PATHS = [
    "python",
    pytest.param("native", marks=pytest.mark.skipif(not native_available(), reason="sluicegate._native not built")),
]
"""The columns come from either read path (src/sluicegate_connectors/kafka/partitions.py): both are held
to the same answers."""

PER_PARTITION = 40
STOP = 25
BASE_TS = 1_700_000_000_000


def produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(PER_PARTITION):
        for partition in (0, 1):
            producer.produce(
                topic,
                value=f"v{partition}-{n}".encode(),
                key=f"k{n}".encode(),
                partition=partition,
                timestamp=BASE_TS + 10 * n + partition,
                headers=[("n", str(n).encode())],
            )
    assert producer.flush(30) == 0


def read_all(reader: KafkaSourceReader, columnar: bool) -> tuple[list[tuple[Any, ...]], dict[str, int], list[str]]:
    rows: list[tuple[Any, ...]] = []
    latest: dict[str, int] = {}
    finished: list[str] = []
    deadline = time.monotonic() + 60
    while len(rows) < STOP + PER_PARTITION:
        assert time.monotonic() < deadline, f"read {len(rows)} rows"
        if columnar:
            result = reader.next_columns(17)
            finished += result.finished_split_ids
            for split_id, t in result.event_times.items():
                assert t is not None
                latest[split_id] = max(latest.get(split_id, t), t)
            if result.batch is not None:
                assert result.batch.num_rows <= 17
                for row in result.batch.to_pylist():
                    rows.append((row["partition"], row["offset"], row["key"], row["value"], row.get("headers")))
        else:
            batch = reader.next_batch(17)
            finished += batch.finished_split_ids
            for record in batch.records:
                v = record.value
                rows.append((v["partition"], v["offset"], v["key"].encode(), v["value"].encode(), None))
    return sorted(rows), latest, finished


@pytest.mark.parametrize("path", READ_PATHS)
def test_columns_and_records_read_the_same_and_a_bounded_split_ends(kafka_bootstrap: str, path: str) -> None:
    topic = f"columns-{secrets.token_hex(4)}"
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic)
    results = {}
    for columnar in (True, False):
        options = {"topics": topic, "bootstrap_servers": kafka_bootstrap, "read_path": path}
        reader = KafkaSourceReader(KafkaOptions.parse(options))
        try:
            reader.add_splits([KafkaPartitionSplit(topic, 0, 0, STOP), KafkaPartitionSplit(topic, 1, 0, None)])
            results[columnar] = read_all(reader, columnar)
        finally:
            reader.close()
    columns, latest, finished = results[True]
    records, _, finished_too = results[False]
    assert [r[:4] for r in columns] == [r[:4] for r in records]
    assert {(p, o) for p, o, *_ in columns} == {(0, o) for o in range(STOP)} | {(1, o) for o in range(PER_PARTITION)}
    assert finished == finished_too == [f"{topic}-0"]
    assert latest == {f"{topic}-0": BASE_TS + 10 * (STOP - 1), f"{topic}-1": BASE_TS + 10 * (PER_PARTITION - 1) + 1}
    assert all(h == [{"key": "n", "value": str(o).encode()}] for _, o, _, _, h in columns)


@pytest.mark.parametrize("path", READ_PATHS)
def test_include_headers_false_leaves_them_out_of_the_columns(kafka_bootstrap: str, path: str) -> None:
    topic = f"columns-{secrets.token_hex(4)}"
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic)
    options = KafkaOptions.parse(
        {"topics": topic, "bootstrap_servers": kafka_bootstrap, "include_headers": "false", "read_path": path}
    )
    reader = KafkaSourceReader(options)
    try:
        reader.add_splits([KafkaPartitionSplit(topic, 0, 0, 5)])
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline
            result = reader.next_columns(100)
            if result.batch is not None:
                assert "headers" not in result.batch.schema.names
                return
    finally:
        reader.close()
