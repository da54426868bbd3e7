"""The kafka connector's reader says how far each split is from its end, over a real
broker: a bounded split to its stop offset, an unbounded one to the partition's high
watermark as the last fetch reported it (the metrics' lag)."""

from __future__ import annotations

import secrets
import time

import pytest
from kafka_data import DataWriter, create_topic

from sluicegate_connectors.kafka.options import KafkaOptions
from sluicegate_connectors.kafka.reader import KafkaSourceReader
from sluicegate_connectors.kafka.split import KafkaPartitionSplit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

WRITTEN = 50  # records per partition
STOP = 1_000  # the bounded split's stop offset, beyond what is written


def test_records_to_end_of_a_bounded_and_an_unbounded_split(kafka_bootstrap: str) -> None:
    topic = f"lag-{secrets.token_hex(4)}"
    create_topic(kafka_bootstrap, topic, 2)
    writer = DataWriter(kafka_bootstrap, topic, 2)
    writer.produce(WRITTEN)
    writer.flush()
    reader = KafkaSourceReader(KafkaOptions.parse({"topics": topic, "bootstrap_servers": kafka_bootstrap}))
    try:
        # The bounded split stops past what was written, so it cannot finish (and leave
        # records_to_end) whichever partition the consumer happens to deliver first.
        bounded = KafkaPartitionSplit(topic, 0, 0, STOP)
        unbounded = KafkaPartitionSplit(topic, 1, 0, None)
        reader.add_splits([bounded, unbounded])
        assert reader.records_to_end() == {bounded.split_id: STOP}  # no fetch yet: the high watermark is unknown
        read = 0
        deadline = time.monotonic() + 60
        while read < 20 or unbounded.split_id not in reader.records_to_end():
            assert time.monotonic() < deadline, f"read {read}, {reader.records_to_end()}"
            read += len(reader.next_batch(10).records)
        left = reader.records_to_end()
        positions = {s.split_id: s.position for s in reader.snapshot_state(1)}
        assert left[bounded.split_id] == STOP - positions[bounded.split_id]
        assert left[unbounded.split_id] == WRITTEN - positions[unbounded.split_id]
    finally:
        reader.close()
