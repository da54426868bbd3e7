"""A real 3-node Kafka (KRaft) cluster for a test module: ``kafka_cluster``.

From the project's jars like the session's single broker (sluicegate.devtools.broker),
C1-only JVMs with small heaps; killed with the test process if it dies."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluicegate.devtools.broker.cluster import LocalKafkaCluster


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    cluster = LocalKafkaCluster(tmp_path_factory.mktemp("cluster"), nodes=3, die_with_parent=True)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
