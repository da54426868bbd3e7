"""Topic definitions of src/sluicegate_topics/topics.toml (no Kafka needed)."""

from __future__ import annotations

import pytest

from sluicegate.protocol.topics import ControlTopics, TopicSpec, topic_specs


def by_role(specs: list[TopicSpec]) -> dict[str, TopicSpec]:
    return {s.role: s for s in specs}


def test_names_partitions_and_cleanup() -> None:
    specs = by_role(topic_specs("sluicegate", "orders", 8))
    assert {r: (s.name, s.partitions, s.config["cleanup.policy"]) for r, s in specs.items()} == {
        "coordinator": ("sluicegate.orders.coordinator", 1, "delete"),
        "readers": ("sluicegate.orders.readers", 8, "delete"),
        "coordinator_state": ("sluicegate.orders.coordinator-state", 1, "compact"),
        "reader_state": ("sluicegate.orders.reader-state", 8, "compact"),
        "split_state": ("sluicegate.orders.split-state", 1, "compact"),
        "dead_letter": ("sluicegate.orders.dead-letter", 1, "delete"),
    }
    assert specs["coordinator"].config["retention.ms"] == "-1"
    assert specs["readers"].config["retention.ms"] == "-1"
    assert specs["dead_letter"].config["retention.ms"] == "604800000"
    assert specs["readers"].partitions_from == "max_parallelism"
    assert specs["coordinator"].partitions_from is None


def test_specs_are_in_file_order_and_configs_are_strings() -> None:
    specs = topic_specs("ns1", "a.b_c-d", 3)
    assert [s.name for s in specs] == [
        "ns1.a.b_c-d.coordinator",
        "ns1.a.b_c-d.readers",
        "ns1.a.b_c-d.coordinator-state",
        "ns1.a.b_c-d.reader-state",
        "ns1.a.b_c-d.split-state",
        "ns1.a.b_c-d.dead-letter",
    ]
    assert all(isinstance(v, str) for s in specs for v in s.config.values())
    # Each call gets its own config dicts.
    specs[0].config["x"] = "y"
    assert "x" not in topic_specs("ns1", "a.b_c-d", 3)[0].config


def test_control_topics_match_specs() -> None:
    topics = ControlTopics.for_source("orders")
    assert topics.coordinator == "sluicegate.orders.coordinator"
    assert topics.readers == "sluicegate.orders.readers"
    assert topics.coordinator_state == "sluicegate.orders.coordinator-state"
    assert topics.reader_state == "sluicegate.orders.reader-state"
    assert topics.split_state == "sluicegate.orders.split-state"
    assert topics.dead_letter == "sluicegate.orders.dead-letter"
    assert topics.all() == [s.name for s in topic_specs("sluicegate", "orders", 5)]
    assert ControlTopics.for_source("x", "prod").readers == "prod.x.readers"


@pytest.mark.parametrize(
    "source",
    ["", "Orders", "-orders", ".x", "_x", "a b", "a/b", "ä", "a" * 101, "orders\n"],
)
def test_invalid_source_names_are_rejected(source: str) -> None:
    with pytest.raises(ValueError, match="source"):
        topic_specs("sluicegate", source, 4)
    with pytest.raises(ValueError, match="source"):
        ControlTopics.for_source(source)


@pytest.mark.parametrize("source", ["a", "0", "orders", "a.b-c_d", "x" * 100, "t-0a1b2c3d"])
def test_valid_source_names(source: str) -> None:
    assert ControlTopics.for_source(source).coordinator.endswith(f".{source}.coordinator")


@pytest.mark.parametrize("max_parallelism", [0, -1, 32769])
def test_invalid_max_parallelism(max_parallelism: int) -> None:
    with pytest.raises(ValueError, match="max_parallelism"):
        topic_specs("sluicegate", "orders", max_parallelism)


@pytest.mark.parametrize("ns", ["", "a b", "-x", "x/y"])
def test_invalid_namespace(ns: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        topic_specs(ns, "orders", 1)


def test_unique_source_fixture_is_valid(unique_source: str) -> None:
    ControlTopics.for_source(unique_source)
    assert unique_source.startswith("t-") and len(unique_source) == 10
