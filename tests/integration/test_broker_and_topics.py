"""The session's Kafka broker and `topics apply` against it (real Kafka, see kafka_fixture)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from typer.testing import CliRunner

from sluicegate.devtools.broker.commands import broker_app
from sluicegate.kafka.topics import (
    TopicMismatchError,
    apply_topics,
    describe_topics,
    wait_for_topics,
)
from sluicegate.kafka.topics_commands import topics_app
from sluicegate.protocol.topics import ControlTopics, leadership_topic_spec, topic_specs

pytestmark = pytest.mark.kafka

EXPECTED = {
    # role: (partitions with max_parallelism=4, cleanup.policy, retention.ms or None)
    "coordinator": (1, "delete", "-1"),
    "readers": (4, "delete", "-1"),
    "coordinator_state": (1, "compact", None),
    "reader_state": (4, "compact", None),
    "split_state": (1, "compact", None),
    "dead_letter": (1, "delete", "604800000"),
}


@pytest.fixture
async def admin(kafka_bootstrap: str) -> AsyncIterator[Any]:
    client = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def test_apply_creates_all_topics(kafka_bootstrap: str, unique_source: str) -> None:
    specs = topic_specs("sluicegate", unique_source, 4)
    results = await apply_topics(kafka_bootstrap, specs)
    assert [r.name for r in results] == ControlTopics.for_source(unique_source).all()
    assert all(r.created and r.status == "created" for r in results)

    infos = await describe_topics(kafka_bootstrap, [s.name for s in specs])
    for spec in specs:
        info = infos[spec.name]
        assert info is not None, spec.name
        partitions, policy, retention = EXPECTED[spec.role]
        assert (info.partitions, info.cleanup_policy) == (partitions, policy), spec.name
        if retention is not None:
            assert info.config["retention.ms"] == retention, spec.name
        assert info.replication_factor == 1


async def test_apply_is_idempotent(kafka_bootstrap: str, unique_source: str) -> None:
    specs = topic_specs("sluicegate", unique_source, 3)
    first = await apply_topics(kafka_bootstrap, specs)
    second = await apply_topics(kafka_bootstrap, specs)
    assert all(r.created for r in first)
    assert [r.status for r in second] == ["ok"] * len(specs)
    assert [(r.name, r.partitions, r.cleanup_policy) for r in first] == [
        (r.name, r.partitions, r.cleanup_policy) for r in second
    ]


async def test_concurrent_applies_both_succeed(kafka_bootstrap: str, unique_source: str) -> None:
    specs = topic_specs("sluicegate", unique_source, 2)
    a, b = await asyncio.gather(apply_topics(kafka_bootstrap, specs), apply_topics(kafka_bootstrap, specs))
    for ra, rb in zip(a, b, strict=True):
        assert ra.partitions == rb.partitions
        assert not (ra.created and rb.created)  # exactly one creator per topic, no error


async def test_wrong_partition_count_is_a_mismatch(kafka_bootstrap: str, unique_source: str, admin: Any) -> None:
    readers = ControlTopics.for_source(unique_source).readers
    await admin.create_topics([NewTopic(readers, 2, 1)])
    with pytest.raises(TopicMismatchError) as err:
        await apply_topics(kafka_bootstrap, topic_specs("sluicegate", unique_source, 4))
    message = str(err.value)
    assert readers in message
    assert "has 2 partitions, expected 4 (max_parallelism)" in message
    assert "--max-parallelism" in message and "sluicegate topics scale --max-parallelism 4" in message
    assert err.value.topics == [readers]
    # more partitions than asked for are the source's (grown by topics scale): accepted
    results = await apply_topics(kafka_bootstrap, topic_specs("sluicegate", unique_source, 1))
    assert {r.name: r.partitions for r in results}[readers] == 2


async def test_the_leadership_topic_grows_with_the_sources_and_never_shrinks(
    kafka_bootstrap: str, unique_source: str
) -> None:
    app_id = f"sluicegate.{unique_source}.app"
    (created,) = await apply_topics(kafka_bootstrap, [leadership_topic_spec(app_id, 2)])
    assert (created.name, created.partitions, created.created) == (f"{app_id}.leadership", 2, True)
    (grown,) = await apply_topics(kafka_bootstrap, [leadership_topic_spec(app_id, 5)])  # sources added
    assert (grown.partitions, grown.created) == (5, False)
    (kept,) = await apply_topics(kafka_bootstrap, [leadership_topic_spec(app_id, 3)])  # sources removed
    assert kept.partitions == 5
    infos = await describe_topics(kafka_bootstrap, [f"{app_id}.leadership"])
    info = infos[f"{app_id}.leadership"]
    assert info is not None and info.partitions == 5


async def test_wrong_cleanup_policy_is_a_mismatch(kafka_bootstrap: str, unique_source: str, admin: Any) -> None:
    state = ControlTopics.for_source(unique_source).coordinator_state
    await admin.create_topics([NewTopic(state, 1, 1, topic_configs={"cleanup.policy": "delete"})])
    with pytest.raises(TopicMismatchError, match=f"topic {state} has cleanup.policy=delete"):
        await apply_topics(kafka_bootstrap, topic_specs("sluicegate", unique_source, 1))


async def test_producing_does_not_auto_create_topics(kafka_bootstrap: str, unique_source: str, admin: Any) -> None:
    topic = f"{unique_source}.never-created"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, request_timeout_ms=3000)
    await producer.start()
    try:
        with pytest.raises(KafkaError):
            await producer.send_and_wait(topic, b"x")
    finally:
        await producer.stop()
    assert topic not in await admin.list_topics()


async def test_transactional_producer_commits(kafka_bootstrap: str, unique_source: str) -> None:
    topics = ControlTopics.for_source(unique_source)
    await apply_topics(kafka_bootstrap, topic_specs("sluicegate", unique_source, 2))
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{unique_source}-coordinator")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait(topics.readers, b"committed", key=b"1", partition=1)
        await producer.begin_transaction()
        await producer.send_and_wait(topics.readers, b"aborted", key=b"1", partition=1)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait(topics.readers, b"after-abort", key=b"1", partition=1)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topics.readers,
        bootstrap_servers=kafka_bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        seen: list[bytes] = []
        async with asyncio.timeout(20):
            while len(seen) < 2:
                batch = await consumer.getmany(timeout_ms=500)
                seen.extend(m.value for msgs in batch.values() for m in msgs if m.value)
    finally:
        await consumer.stop()
    assert seen == [b"committed", b"after-abort"]


async def test_wait_for_topics(kafka_bootstrap: str, unique_source: str) -> None:
    names = ControlTopics.for_source(unique_source).all()
    with pytest.raises(TimeoutError, match="sluicegate topics apply"):
        await wait_for_topics(kafka_bootstrap, names, timeout_s=1.0, poll_interval_s=0.2)

    waiter = asyncio.create_task(wait_for_topics(kafka_bootstrap, names, timeout_s=30.0, poll_interval_s=0.2))
    await asyncio.sleep(0.5)
    assert not waiter.done()
    await apply_topics(kafka_bootstrap, topic_specs("sluicegate", unique_source, 3))
    partitions = await waiter
    assert partitions == {n: p for n, p in zip(names, [1, 3, 1, 3, 1, 1], strict=True)}


def test_topics_cli_apply_and_list(kafka_bootstrap: str, unique_source: str) -> None:
    runner = CliRunner()
    args = ["--source", unique_source, "--bootstrap-servers", kafka_bootstrap]
    res = runner.invoke(topics_app, ["list", *args])
    assert res.exit_code == 1, res.output
    res = runner.invoke(topics_app, ["apply", *args, "--max-parallelism", "2"])
    assert res.exit_code == 0, res.output
    assert f"sluicegate.{unique_source}.readers" in res.output and "created" in res.output
    res = runner.invoke(topics_app, ["list", *args])
    assert res.exit_code == 0, res.output
    # KAFKA_BOOTSTRAP_SERVERS (set by the fixture) is the default bootstrap.
    res = runner.invoke(topics_app, ["apply", "--source", unique_source, "--max-parallelism", "3"])
    assert res.exit_code == 1
    assert f"sluicegate.{unique_source}.readers has 2 partitions, expected 3" in res.output


def test_topics_cli_without_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    res = CliRunner().invoke(topics_app, ["apply", "--source", "x", "--max-parallelism", "1"])
    assert res.exit_code == 2
    assert "--bootstrap-servers / set KAFKA_BOOTSTRAP_SERVERS" in res.output


def test_fixture_exports_bootstrap(kafka_bootstrap: str) -> None:
    assert os.environ["KAFKA_BOOTSTRAP_SERVERS"] == kafka_bootstrap


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="needs java and mvn")
def test_broker_cli_start_status_stop(tmp_path: Path) -> None:
    """A second, detached broker through `sluicegate broker` in its own run directory."""
    runner = CliRunner()
    run_dir = str(tmp_path / "broker")
    try:
        res = runner.invoke(broker_app, ["start", "--dir", run_dir])
        assert res.exit_code == 0, res.output
        bootstrap = res.stdout.strip().splitlines()[-1]
        assert bootstrap.startswith("127.0.0.1:")
        assert (tmp_path / "broker" / "broker.json").is_file()
        again = runner.invoke(broker_app, ["start", "--dir", run_dir])
        assert again.stdout.strip().splitlines()[-1] == bootstrap
        res = runner.invoke(broker_app, ["status", "--dir", run_dir])
        assert res.exit_code == 0, res.output
        assert "running" in res.stdout and bootstrap in res.stdout
    finally:
        res = runner.invoke(broker_app, ["stop", "--dir", run_dir])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "broker" / "data").exists()
    res = runner.invoke(broker_app, ["status", "--dir", run_dir])
    assert res.exit_code == 1


def test_cluster_ids_never_start_with_a_dash() -> None:
    # Kafka's storage tool would parse "-xyz..." as an option (seen in practice).
    from sluicegate.devtools.broker.local import new_cluster_id

    ids = [new_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="needs java and mvn")
def test_broker_restarts_on_its_port_right_after_a_crash(tmp_path: Path) -> None:
    """SIGKILL leaves the broker's connections in TIME_WAIT; `broker start --port P` at
    once must still take P (Kafka binds with SO_REUSEADDR, and so must our check)."""
    import json
    import signal
    import socket
    import struct

    from sluicegate.devtools.broker.local import free_port

    runner = CliRunner()
    run_dir = str(tmp_path / "broker")
    port = free_port()
    try:
        res = runner.invoke(broker_app, ["start", "--dir", run_dir, "--port", str(port)])
        assert res.exit_code == 0, res.output
        client = socket.create_connection(("127.0.0.1", port), timeout=30)
        # An ApiVersions v0 request answered: the broker has accepted the connection (one
        # still in the accept queue would be reset, leaving no TIME_WAIT behind).
        request = struct.pack(">hhih", 18, 0, 1, -1)
        client.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", client.recv(4, socket.MSG_WAITALL))
        assert len(client.recv(size, socket.MSG_WAITALL)) == size
        pid = json.loads((tmp_path / "broker" / "broker.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        assert client.recv(1) == b""  # the killed broker's end closed first: it is in TIME_WAIT
        client.close()
        res = runner.invoke(broker_app, ["start", "--dir", run_dir, "--port", str(port)])
        assert res.exit_code == 0, res.output
        assert res.stdout.strip().splitlines()[-1] == f"127.0.0.1:{port}"
    finally:
        runner.invoke(broker_app, ["stop", "--dir", run_dir])
