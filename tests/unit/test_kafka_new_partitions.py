"""A planning round waits for partitions it lists before the coordinator assigns them, for
a while from when it first saw each (kafka/new_partitions.py)."""

from __future__ import annotations

import logging

import pytest

from sluicegate_connectors.kafka.new_partitions import LONGEST_INTERVAL_S, SLACK_S, NewPartitions


def test_a_partition_listed_and_not_assigned_is_awaited_until_it_is_assigned() -> None:
    new = NewPartitions(1_000)
    new.seen([("orders", 0)], [("orders", 0)], now_s=9.0)
    new.seen([("orders", 0), ("refunds", 0), ("refunds", 1)], [("orders", 0)], now_s=10.0)
    assert new.awaited(10.5) == ["refunds-0", "refunds-1"]
    new.seen([("orders", 0), ("refunds", 0), ("refunds", 1)], [("orders", 0), ("refunds", 1)], now_s=11.0)
    assert new.awaited(11.0) == ["refunds-0"]
    new.seen([("orders", 0), ("refunds", 0), ("refunds", 1)], [("orders", 0), ("refunds", 0), ("refunds", 1)], 11.5)
    assert new.awaited(11.5) == []


def test_a_partition_never_assigned_is_awaited_once_for_the_interval_and_slack_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    new = NewPartitions(1_000)
    assert new.wait_s == 1.0 + SLACK_S
    new.seen([], [], -1.0)
    waited_until = 1.0 + SLACK_S
    for now in (0.0, 1.0, waited_until - 0.1):  # seen again each round: the wait counts from the first look
        new.seen([("orders", 0)], [], now)
        assert new.awaited(now) == ["orders-0"]
    with caplog.at_level(logging.INFO, logger="sluicegate.connectors.kafka"):
        for now in (waited_until, waited_until + 1, 600.0):
            new.seen([("orders", 0)], [], now)
            assert new.awaited(now) == []
    said = [r.getMessage() for r in caplog.records if "orders-0" in r.getMessage()]
    assert len(said) == 1 and "not assigned" in said[0]


def test_a_partition_that_goes_and_comes_back_unassigned_is_awaited_again() -> None:
    new = NewPartitions(1_000)
    new.seen([], [], -1.0)
    new.seen([("orders", 0)], [], 0.0)
    new.seen([], [], 1.0)  # its topic deleted before it was assigned
    assert new.awaited(1.0) == []
    new.seen([("orders", 0)], [], 50.0)  # created again
    assert new.awaited(50.5) == ["orders-0"]


def test_a_long_discovery_interval_is_waited_for_at_most_longest_interval_s() -> None:
    assert NewPartitions(30_000).wait_s == LONGEST_INTERVAL_S + SLACK_S
    new = NewPartitions(30_000)
    new.seen([], [], -1.0)
    new.seen([("orders", 0)], [], 0.0)
    assert new.awaited(LONGEST_INTERVAL_S + SLACK_S - 0.1) == ["orders-0"]
    assert new.awaited(LONGEST_INTERVAL_S + SLACK_S) == []


def test_the_partitions_of_the_first_look_are_not_new_even_where_another_host_owns_them() -> None:
    new = NewPartitions(1_000)
    new.seen([("orders", 0), ("orders", 1)], [("orders", 0)], 0.0)  # orders-1: a standalone reader's
    assert new.awaited(0.0) == []
    new.seen([("orders", 0), ("orders", 1), ("orders", 2)], [("orders", 0)], 1.0)
    assert new.awaited(1.0) == ["orders-2"]
