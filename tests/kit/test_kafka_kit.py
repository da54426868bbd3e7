"""The connector test kit on ``kafka``: every scenario reads real topics of the session's
broker (the reader is a Kafka consumer), in memory for the coordinator and the reader
hosts; new data while running is a new topic that the pattern matches."""

from __future__ import annotations

import re
import time
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka_data import create_topic

from sluicegate.api import Record
from sluicegate.testing import ConnectorTestKit, KitEnv, RunConfig

pytestmark = pytest.mark.kafka

PARTITIONS = 2
RECORDS_PER_PARTITION = 30
SKEW_MS = 20_000


class TestKafkaKit(ConnectorTestKit):
    connector = "kafka"
    random_schedules = 3
    run_config = RunConfig(batch=5)

    @pytest.fixture
    def kit_env(self, tmp_path: Path, kafka_bootstrap: str) -> KitEnv:
        return KitEnv(tmp_path, f"kit-{tmp_path.name[-8:].lower().replace('_', '-')}", kafka_bootstrap)

    def source_options(self, env: KitEnv) -> dict[str, str]:
        assert env.kafka_bootstrap is not None
        return {
            "bootstrap_servers": env.kafka_bootstrap,
            "topic_pattern": re.escape(env.name) + r"\.in-\d+",
            "partition_discovery_interval_ms": "500",
            "assignment_grace_ms": "1000",
        }

    def write_data(self, env: KitEnv, batch: int) -> list[Hashable]:
        """Batch k is a new topic NAME.in-k of two partitions (new splits). Partition p's
        timestamps start p * SKEW_MS later, so that alignment has splits to pause."""
        assert env.kafka_bootstrap is not None
        topic = f"{env.name}.in-{batch}"
        create_topic(env.kafka_bootstrap, topic, PARTITIONS)
        written: list[Hashable] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            assert error is None, f"a test record was not written: {error}"
            written.append((message.topic(), message.partition(), message.offset()))

        producer = Producer({"bootstrap.servers": env.kafka_bootstrap, "enable.idempotence": True})
        start_ms = int(time.time() * 1000) - 3_600_000
        for partition in range(PARTITIONS):
            for n in range(RECORDS_PER_PARTITION):
                value = f"{topic}/{partition}/{n}".encode()
                timestamp = start_ms + partition * SKEW_MS + n * 100
                producer.produce(topic, value, partition=partition, timestamp=timestamp, on_delivery=delivered)
        assert producer.flush(30) == 0, "test records still undelivered after 30 s"
        return written

    def alignment_options(self, env: KitEnv) -> dict[str, str]:
        return {}  # the data's timestamps are skewed already

    def record_key(self, record: Record) -> Hashable:
        value: Mapping[str, Any] = record.value
        return (value["topic"], value["partition"], value["offset"])
