"""``read_all`` reads every partition of a topic, committed records only (kafka/compacted.py)."""

from __future__ import annotations

import secrets

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluicegate.kafka.compacted import read_all

pytestmark = pytest.mark.kafka


async def test_every_partition_is_read_and_an_aborted_record_is_not(kafka_bootstrap: str) -> None:
    topic = f"compacted-{secrets.token_hex(4)}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, b"v%d" % p, b"k%d" % p, partition=p)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", b"k2", partition=2)
    producer.abort_transaction(30)

    records = await read_all(kafka_bootstrap, topic, max_record_bytes=1 << 20)

    assert sorted(records) == [(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")]
