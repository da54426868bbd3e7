"""The contact rules both reader hosts follow, written once (reader/timing.py)."""

from __future__ import annotations

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.reader.host import ReaderSettings
from sluicegate.reader.output import OutputSpec
from sluicegate.reader.timing import ReaderTiming
from sluicegate.spark.driver import DriverSettings


def test_heartbeats_wait_half_a_session_timeout_for_delivery_and_at_least_an_interval() -> None:
    assert ReaderTiming(heartbeat_interval_ms=1_000, session_timeout_ms=10_000).delivery_timeout_s == 5.0
    assert ReaderTiming(heartbeat_interval_ms=900, session_timeout_ms=1_000).delivery_timeout_s == 0.9


def test_contact_is_lost_only_past_the_session_timeout() -> None:
    timing = ReaderTiming(session_timeout_ms=3_000)
    assert not timing.lost_contact(3.0)
    assert timing.lost_contact(3.001)


def test_a_refused_registration_is_retried_for_a_session_timeout_and_two_heartbeats() -> None:
    assert ReaderTiming(heartbeat_interval_ms=500, session_timeout_ms=6_000).refusal_patience_s == 7.0


def test_both_hosts_hold_the_timing_of_their_settings() -> None:
    reader = ReaderSettings(
        source="s",
        subtask=0,
        connector="sequence",
        output=OutputSpec.parse("kafka:out"),
        bootstrap_servers="127.0.0.1:9092",
        heartbeat_interval_ms=200,
        session_timeout_ms=4_000,
    )
    driver = DriverSettings(
        source="s",
        parallelism=1,
        bootstrap_servers="127.0.0.1:9092",
        heartbeat_interval_ms=200,
        session_timeout_ms=4_000,
    )
    assert reader.timing == driver.timing
    assert reader.timing.lost_contact(4.5) and reader.timing.refusal_patience_s == 4.4


def reader(**settings: object) -> ReaderSettings:
    return ReaderSettings(
        source="s",
        subtask=0,
        connector="sequence",
        output=OutputSpec.parse("kafka:out"),
        bootstrap_servers="127.0.0.1:9092",
        **settings,  # type: ignore[arg-type]
    )


def test_the_checkpoint_transaction_lasts_a_minute_or_three_checkpoints_unless_set() -> None:
    assert reader().txn_timeout_ms == 60_000
    assert reader(checkpoint_interval_ms=30_000).txn_timeout_ms == 90_000
    assert reader(checkpoint_interval_ms=500, transaction_timeout_ms=15_000).txn_timeout_ms == 15_000


def test_a_transaction_timeout_shorter_than_three_checkpoints_or_than_the_broker_allows_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--transaction-timeout-ms.*between 6000 and 900000, got 5000"):
        reader(checkpoint_interval_ms=2_000, transaction_timeout_ms=5_000)
    with pytest.raises(ConfigError, match="--transaction-timeout-ms"):
        reader(transaction_timeout_ms=1_000_000)
