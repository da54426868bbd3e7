"""A real 3-node Kafka (KRaft) cluster for a test module: ``kafka_cluster``.

From the project's jars like the session's single broker (sluicegate.devtools.broker),
C1-only JVMs with small heaps; killed with the test process if it dies. Also which
broker does what for a test that kills one: a partition's leader, the transaction
coordinator of a transactional id, and whether the controller has fenced a node."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiokafka.client import AIOKafkaClient, CoordinationType
from confluent_kafka.admin import AdminClient

from sluicegate.devtools.broker.cluster import LocalKafkaCluster


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    cluster = LocalKafkaCluster(tmp_path_factory.mktemp("cluster"), nodes=3, die_with_parent=True)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def partition_leader(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node leading ``topic``'s ``partition``, as the metadata says."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    leader: int = metadata.topics[topic].partitions[partition].leader
    assert leader >= 0, f"{topic}-{partition} has no leader"
    return leader


def transaction_coordinator(bootstrap: str, transactional_id: str) -> int:
    """The node coordinating ``transactional_id``'s transactions: Kafka's FindCoordinator
    (key type transaction), which is what a transactional producer asks. confluent-kafka
    2.x has no DescribeTransactions, aiokafka's client sends FindCoordinator as such."""

    async def ask() -> int:
        client = AIOKafkaClient(bootstrap_servers=bootstrap)
        await client.bootstrap()
        try:
            return int(await client.coordinator_lookup(CoordinationType.TRANSACTION, transactional_id))
        finally:
            await client.close()

    return asyncio.run(ask())


def wait_fenced(cluster: LocalKafkaCluster, node: int, timeout_s: float = 30.0) -> float:
    """Wait until the metadata no longer lists a killed ``node`` (the controller fenced it,
    ``broker.session.timeout.ms`` after its death, and moved its leaders); returns then.
    Several answers in a row: each comes from one broker, which hears of it in its turn."""
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + timeout_s
    in_a_row = 0
    while in_a_row < len(cluster.node_ids):
        assert time.monotonic() < deadline, f"node {node} still listed {timeout_s} s after its death"
        listed = client.list_topics(timeout=5).brokers
        in_a_row = in_a_row + 1 if node not in listed else 0
        time.sleep(0.1)
    return time.monotonic()
