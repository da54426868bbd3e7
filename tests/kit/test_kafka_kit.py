"""The connector test kit on ``kafka``: every scenario reads real topics of the session's
broker (the reader is a Kafka consumer), in memory for the coordinator and the reader
hosts; new data while running is a new topic that the pattern matches."""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kafka_data import DataWriter, create_topic

from sluicegate.api import Record
from sluicegate.testing import ConnectorTestKit, KitEnv, RunConfig

pytestmark = pytest.mark.kafka

PARTITIONS = 2
RECORDS_PER_PARTITION = 30


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
        """Batch k is a new topic NAME.in-k of two partitions (new splits)."""
        assert env.kafka_bootstrap is not None
        topic = f"{env.name}.in-{batch}"
        create_topic(env.kafka_bootstrap, topic, PARTITIONS)
        writer = DataWriter(env.kafka_bootstrap, topic, PARTITIONS)
        writer.produce(RECORDS_PER_PARTITION)
        writer.flush()
        return list(writer.expected)

    def record_key(self, record: Record) -> Hashable:
        value: Mapping[str, Any] = record.value
        return (value["topic"], value["partition"], value["offset"])
