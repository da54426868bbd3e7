"""The replication rules of control topics (sluicegate.kafka.replication); over a real
3-broker cluster: tests/integration/test_replicated_cluster.py."""

from __future__ import annotations

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.kafka.replication import (
    CLI_NAMES,
    ClusterFacts,
    Replication,
    ReplicationError,
    ReplicationPolicy,
    check_existing,
    for_new_topics,
    wanted,
)

THREE = ClusterFacts(brokers=(1, 2, 3), default_factor=3, default_min_insync=1)
ONE = ClusterFacts(brokers=(1,), default_factor=1, default_min_insync=1)
BOOTSTRAP = "b1:9092"


def test_defaults_follow_the_cluster_and_ask_two_in_sync_from_three_replicas() -> None:
    assert wanted(ReplicationPolicy(), THREE) == Replication(factor=3, min_insync=2)
    assert wanted(ReplicationPolicy(), ONE) == Replication(factor=1, min_insync=None)
    two = ClusterFacts(brokers=(1, 2), default_factor=2, default_min_insync=1)
    assert wanted(ReplicationPolicy(), two) == Replication(factor=2, min_insync=None)
    assert Replication(3, 2).topic_config() == {"min.insync.replicas": "2"}
    assert Replication(1, None).topic_config() == {}


def test_what_the_user_asked_wins_over_the_cluster_defaults() -> None:
    policy = ReplicationPolicy(factor=2, min_insync=1)
    assert for_new_topics(policy, THREE) == Replication(factor=2, min_insync=1)
    assert for_new_topics(ReplicationPolicy(factor=3, min_insync=3), THREE) == Replication(3, 3)


def test_never_created_below_what_was_asked_naming_the_live_brokers() -> None:
    outage = ClusterFacts(brokers=(1, 3), default_factor=3, default_min_insync=2)
    with pytest.raises(ReplicationError, match=r"replication_factor 3 needs 3 brokers.*2 live brokers \(1, 3\)"):
        for_new_topics(ReplicationPolicy(), outage)
    with pytest.raises(ReplicationError, match=r"--replication-factor 3 needs 3 brokers.*1 live broker \(1\)"):
        for_new_topics(ReplicationPolicy(factor=3, names=CLI_NAMES), ONE)


def test_one_replica_on_a_cluster_of_three_is_refused_unless_allowed() -> None:
    unset = ClusterFacts(brokers=(1, 2, 3), default_factor=1, default_min_insync=1)
    with pytest.raises(ReplicationError, match=r"default.replication.factor is 1.*set --replication-factor 3"):
        for_new_topics(ReplicationPolicy(names=CLI_NAMES), unset)
    with pytest.raises(ReplicationError, match=r"--replication-factor is 1.*--allow-unreplicated"):
        for_new_topics(ReplicationPolicy(factor=1, names=CLI_NAMES), THREE)
    allowed = ReplicationPolicy(factor=1, allow_unreplicated=True)
    assert for_new_topics(allowed, THREE) == Replication(1, None)
    # A single broker cannot do better: nothing to refuse.
    assert for_new_topics(ReplicationPolicy(), ONE) == Replication(1, None)


def test_an_impossible_policy_fails_at_start_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="min_insync_replicas"):
        ReplicationPolicy(factor=2, min_insync=3)
    with pytest.raises(ConfigError, match="--replication-factor"):
        ReplicationPolicy(factor=0, names=CLI_NAMES)
    with pytest.raises(ConfigError, match="replication_factor"):
        ReplicationPolicy(factor=True)
    # Known only once the cluster is: the cluster's default factor below the asked min ISR.
    with pytest.raises(ReplicationError, match="above the replication factor 1"):
        for_new_topics(ReplicationPolicy(min_insync=2), ONE)


DEFAULT = ReplicationPolicy()


def _check(factor: int, min_insync: int, policy: ReplicationPolicy = DEFAULT) -> tuple[list[str], list[str]]:
    return check_existing("ns.s.state", factor, min_insync, wanted(policy, THREE), THREE, policy, BOOTSTRAP)


def test_an_existing_topic_as_wanted_passes_quietly() -> None:
    assert _check(3, 2) == ([], [])


def test_a_weak_min_insync_is_a_warning_with_the_command_that_fixes_it() -> None:
    problems, warnings = _check(3, 1)
    assert problems == []
    assert len(warnings) == 1
    assert "topic ns.s.state has min.insync.replicas=1 (replication factor 3), 2 wanted" in warnings[0]
    assert (
        "kafka-configs.sh --bootstrap-server b1:9092 --alter --entity-type topics "
        "--entity-name ns.s.state --add-config min.insync.replicas=2" in warnings[0]
    )


def test_too_few_replicas_is_a_warning_naming_the_reassignment_tool() -> None:
    problems, warnings = _check(2, 1)
    assert problems == []
    assert any("has replication factor 2 (min.insync.replicas=1), 3 wanted" in w for w in warnings)
    assert any("kafka-reassign-partitions.sh --bootstrap-server b1:9092" in w for w in warnings)


def test_min_insync_equal_to_the_replicas_is_a_warning_one_broker_stops_writes() -> None:
    problems, warnings = _check(3, 3)
    assert problems == []
    assert len(warnings) == 1
    assert "one broker down stops every write" in warnings[0]
    assert "min.insync.replicas=2" in warnings[0]


def test_an_existing_single_replica_topic_on_three_brokers_is_refused_unless_allowed() -> None:
    problems, warnings = _check(1, 1)
    assert len(problems) == 1 and warnings == []
    assert "topic ns.s.state has one replica on a cluster of 3 live brokers (1, 2, 3)" in problems[0]
    assert "allow_unreplicated_topics" in problems[0]
    allowed = ReplicationPolicy(allow_unreplicated=True)
    problems, warnings = _check(1, 1, allowed)
    assert problems == []
    assert any("has replication factor 1" in w for w in warnings)
