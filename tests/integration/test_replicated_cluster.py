"""Control topics on a real 3-node Kafka cluster (tests/support/kafka_cluster.py): created
replicated on every try, applied while a broker is down, never created below what was
asked, existing weak topics reported with the command that fixes them (the rules:
tests/unit/test_replication.py)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from cli_run import run_sluicegate
from kafka_cluster import kafka_cluster

from sluicegate.devtools.broker.cluster import LocalKafkaCluster
from sluicegate.devtools.broker.tools import CONFIG_COMMAND, run_kafka_tool
from sluicegate.kafka.replication import ReplicationPolicy
from sluicegate.kafka.topics import (
    TopicApplyError,
    TopicMismatchError,
    TopicResult,
    apply_topics,
    cluster_facts,
    describe_topics,
)
from sluicegate.protocol.topics import TopicSpec, topic_specs

pytestmark = pytest.mark.kafka

__all__ = ["kafka_cluster"]


def _source() -> str:
    return f"r{uuid.uuid4().hex[:8]}"


async def _live_brokers(bootstrap: str) -> int:
    return len((await cluster_facts(bootstrap)).brokers)


async def _until_min_insync(bootstrap: str, specs: list[TopicSpec], topic: str, value: int) -> TopicResult:
    deadline = time.monotonic() + 30
    while True:
        result = {r.name: r for r in await apply_topics(bootstrap, specs)}[topic]
        if result.min_insync_replicas == value or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.2)


async def test_fresh_sources_get_replicated_control_topics_on_every_try(kafka_cluster: LocalKafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap
    for _ in range(6):  # each apply a new source: new topics a broker may not know yet
        specs = topic_specs("ns", _source(), 4)
        created = await apply_topics(bootstrap, specs)
        assert [(r.status, r.replication_factor, r.min_insync_replicas, r.warnings) for r in created] == [
            ("created", 3, 2, ())
        ] * len(specs)
        again = await apply_topics(bootstrap, specs)
        assert [(r.status, r.warnings) for r in again] == [("ok", ())] * len(specs)

    code, _, out = run_sluicegate("topics", "apply", "--source", _source(), "--max-parallelism", "2",
                                  "--bootstrap-servers", bootstrap)  # fmt: skip
    assert code == 0, out
    assert "┃ replicas ┃ min ISR ┃" in out and out.count("│ 3 │ 2 │") == len(topic_specs("ns", "x", 2)), out


async def test_topics_apply_while_a_broker_is_down(kafka_cluster: LocalKafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap
    existing = topic_specs("ns", _source(), 4)
    await apply_topics(bootstrap, existing)
    victim = kafka_cluster.node_ids[0]  # the first bootstrap address too
    kafka_cluster.kill(victim)
    killed = time.monotonic()
    try:
        # Until the controller fences it (broker.session.timeout.ms, 9 s) the dead broker is
        # listed, leads partitions and may be asked; then its partitions move. Through all
        # of it, every apply gets through.
        applies = 0
        while time.monotonic() - killed < 12:
            results = await apply_topics(bootstrap, existing, timeout_s=30)
            assert [r.status for r in results] == ["ok"] * len(existing)
            applies += 1
        assert applies >= 3
        # A new source set up while the broker is down: created with the replicas asked
        # (at once while the controller still counts the broker, else once it is back).
        fresh = topic_specs("ns", _source(), 2)
        creating = asyncio.create_task(apply_topics(bootstrap, fresh, timeout_s=90))
        await asyncio.sleep(0.5)
    finally:
        # In this thread, not a worker's: a node started with die_with_parent dies with
        # the thread that started it (the loop's executor ends its threads with the test).
        kafka_cluster.restart(victim)
    assert {r.replication_factor for r in await creating} == {3}


async def test_never_created_below_the_replicas_asked(kafka_cluster: LocalKafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap
    specs = topic_specs("ns", _source(), 2)
    began = time.monotonic()
    with pytest.raises(TopicApplyError, match=r"replication_factor 4 needs 4 brokers.*3 live brokers \(1, 2, 3\)"):
        await apply_topics(bootstrap, specs, timeout_s=3, replication=ReplicationPolicy(factor=4))
    assert time.monotonic() - began >= 2.5, "gave up before its deadline: a broker may be restarting"
    assert set((await describe_topics(bootstrap, [s.name for s in specs])).values()) == {None}


async def test_weak_existing_topics_are_reported_with_their_fix_and_one_replica_refused(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    source = _source()
    specs = topic_specs("ns", source, 2)
    state, rest = specs[0], specs[1:]
    # Made so by hand, by an operator or an older sluicegate: 3 replicas, min ISR 1.
    await apply_topics(bootstrap, [state], replication=ReplicationPolicy(factor=3, min_insync=1))
    results = {r.name: r for r in await apply_topics(bootstrap, specs)}
    (warning,) = results[state.name].warnings
    assert f"topic {state.name} has min.insync.replicas=1 (replication factor 3), 2 wanted" in warning
    assert all(results[s.name].warnings == () for s in rest)

    # The command it names fixes it.
    fix = warning.split("`")[1].split()
    assert fix[0] == "kafka-configs.sh"
    done = run_kafka_tool(CONFIG_COMMAND, fix[1:])
    assert done.returncode == 0, done.stdout + done.stderr
    fixed = await _until_min_insync(bootstrap, specs, state.name, 2)  # every broker hears of it
    assert fixed.warnings == ()

    lonely = topic_specs("ns", _source(), 2)
    await apply_topics(bootstrap, lonely, replication=ReplicationPolicy(factor=1, allow_unreplicated=True))
    with pytest.raises(TopicMismatchError, match=r"has one replica on a cluster of 3 live brokers"):
        await apply_topics(bootstrap, lonely)
    with pytest.raises(TopicApplyError, match=r"replication_factor is 1"):
        await apply_topics(bootstrap, topic_specs("ns", _source(), 2), replication=ReplicationPolicy(factor=1))
