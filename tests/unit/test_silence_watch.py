"""Fast takeover: when a standby takes a source over (the pure silence watch), when the
worker starts a runner for it, and the takeover_silence_ms setting."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.coordinator.faust_app import SourceRunners
from sluicegate.coordinator.log import OutgoingRecord
from sluicegate.coordinator.settings import CoordinatorSettings, SourceSettings
from sluicegate.coordinator.silence import (
    LONGEST_COMMIT_S,
    LONGEST_STEP_S,
    SilenceWatch,
    Verdict,
    liveness_interval_ms,
    mark_due,
    reaffirm_due,
    start_mark_due,
)
from sluicegate.coordinator.source_runner import RunnerState, commit_due, with_keepalives
from sluicegate.coordinator.takeover import poll_interval_s


def watch_through(samples: list[tuple[float, int]], silence_s: float = 2.0) -> SilenceWatch:
    watch = SilenceWatch(silence_s)
    for now, offset in samples:
        watch.observe(offset, now)
    return watch


def test_an_offset_that_keeps_moving_is_a_live_coordinator() -> None:
    watch = watch_through([(t * 0.5, 10 + t) for t in range(20)])
    assert watch.verdict() is Verdict.WAIT


def test_silence_after_a_commit_is_a_dead_coordinator() -> None:
    watch = watch_through([(0.0, 10), (0.5, 12), (1.0, 12), (2.0, 12), (2.4, 12)])
    assert watch.verdict() is Verdict.WAIT  # silent 1.9 s since the move seen at 0.5
    watch.observe(12, 2.5)
    assert watch.verdict() is Verdict.TAKE_OVER
    assert watch.silent_for_s() == pytest.approx(2.0)


def test_silence_never_preceded_by_a_commit_is_no_evidence() -> None:
    # a cold start, or a coordinator that died before this standby began watching:
    # the Faust assignment decides
    watch = watch_through([(float(t), 7) for t in range(60)])
    assert watch.verdict() is Verdict.WAIT


def test_a_host_that_needs_its_source_counts_silence_from_its_first_look() -> None:
    # a coordinator that starts itself where the source is read (embedded.py) has no Faust
    # assignment to wait for: a source nobody commits to is taken over too
    watch = SilenceWatch(2.0, from_first_sample=True)
    watch.observe(7, 100.0)
    watch.observe(7, 101.9)
    assert watch.verdict() is Verdict.WAIT
    watch.observe(7, 102.0)
    assert watch.verdict() is Verdict.TAKE_OVER
    watch.restart()
    watch.observe(7, 103.0)
    watch.observe(8, 104.0)  # someone commits now: alive
    watch.observe(8, 105.9)
    assert watch.verdict() is Verdict.WAIT


def test_a_gap_in_the_samples_longer_than_the_silence_starts_it_again() -> None:
    # a broker outage: nobody could commit, nobody could sample; the first sample after it
    # sees the offset where it was, which is no evidence against the active coordinator
    watch = watch_through([(0.0, 1), (0.5, 2), (1.0, 2)])
    watch.observe(2, 80.0)
    assert watch.verdict() is Verdict.WAIT
    watch.observe(2, 81.9)
    assert watch.verdict() is Verdict.WAIT
    watch.observe(2, 82.0)
    assert watch.verdict() is Verdict.TAKE_OVER, "silent for a whole silence after the outage"


def test_silence_counts_between_samples_only() -> None:
    # the standby could not sample (broker unreachable, or it was paused itself): the
    # clock alone is no evidence
    watch = watch_through([(0.0, 1), (0.2, 2)])
    assert watch.verdict() is Verdict.WAIT
    watch.observe(3, 10.0)  # the first sample after a pause: the coordinator was alive
    assert watch.verdict() is Verdict.WAIT
    watch.observe(3, 11.9)
    assert watch.verdict() is Verdict.WAIT
    watch.observe(3, 12.0)
    assert watch.verdict() is Verdict.TAKE_OVER


def test_restart_forgets_what_was_seen() -> None:
    watch = watch_through([(0.0, 1), (0.2, 2), *((0.2 + 0.5 * i, 2) for i in range(1, 11))])
    assert watch.verdict() is Verdict.TAKE_OVER
    watch.restart()
    watch.observe(2, 6.0)
    watch.observe(2, 30.0)
    assert watch.verdict() is Verdict.WAIT


def test_the_active_commits_several_times_per_silence() -> None:
    assert liveness_interval_ms(2_000) == 500
    assert poll_interval_s(2_000) == pytest.approx(0.2)
    assert poll_interval_s(60_000) == 0.5 and poll_interval_s(500) == 0.05


def test_an_idle_active_coordinator_commits_every_liveness_interval() -> None:
    assert not commit_due(False, False, 499.0, 1_000, 500)
    assert commit_due(False, False, 500.0, 1_000, 500)  # nothing to commit: a heartbeat commit
    assert not commit_due(False, False, 10_000.0, 1_000, None)  # fast takeover off: none
    assert not commit_due(False, True, 400.0, 1_000, 500)
    assert commit_due(False, True, 1_000.0, 1_000, None)  # offset-only progress, as before
    assert commit_due(True, False, 0.0, 1_000, None)  # records or state: at once


def settings(**overrides: Any) -> CoordinatorSettings:
    base = CoordinatorSettings(
        sources=(
            SourceSettings(source="orders", connector="sequence", max_parallelism=2),
            SourceSettings(source="users", connector="sequence", max_parallelism=2),
        ),
        bootstrap_servers="127.0.0.1:9092",
    )
    return dataclasses.replace(base, **overrides)


def test_the_setting_defaults_to_two_seconds_and_zero_turns_it_off() -> None:
    assert settings().takeover_silence_ms == 2_000
    assert settings(takeover_silence_ms=0).takeover_silence_ms == 0


@pytest.mark.parametrize("value", [-1, 1, 499, 60_001, True, "2000"])
def test_a_bad_silence_fails_at_start_naming_the_setting(value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(takeover_silence_ms=value)
    assert caught.value.setting == "takeover_silence_ms"


def test_the_silence_must_leave_room_for_four_commits_per_tick() -> None:
    assert settings(tick_interval_ms=500, takeover_silence_ms=2_000).takeover_silence_ms == 2_000
    with pytest.raises(ConfigError, match="2000"):
        settings(tick_interval_ms=500, takeover_silence_ms=1_999)


def test_the_setting_comes_from_toml_and_env(tmp_path: Path) -> None:
    config = tmp_path / "sources.toml"
    config.write_text(
        'takeover_silence_ms = 3000\n[[source]]\nsource = "s"\nconnector = "sequence"\nmax_parallelism = 1\n'
    )
    assert CoordinatorSettings.from_toml(config, "b:9092").takeover_silence_ms == 3_000
    env = {"KAFKA_BOOTSTRAP_SERVERS": "b:9092", "SLUICEGATE_CONFIG": str(config), "SLUICEGATE_TAKEOVER_SILENCE_MS": "0"}
    assert CoordinatorSettings.from_env(env).takeover_silence_ms == 0
    with pytest.raises(ConfigError) as caught:
        CoordinatorSettings.from_env({**env, "SLUICEGATE_TAKEOVER_SILENCE_MS": "soon"})
    assert caught.value.setting == "SLUICEGATE_TAKEOVER_SILENCE_MS"


def test_a_worker_takes_over_only_what_it_does_not_run_and_not_right_after_a_failure(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    runners = SourceRunners(settings())
    started: list[str] = []

    def start(name: str) -> None:
        started.append(name)
        runners.runners[name] = SimpleNamespace(source=name)  # type: ignore[assignment]

    monkeypatch.setattr(runners, "_start", start)
    assert runners.watched() == {"orders", "users"}
    caplog.set_level(logging.WARNING, logger="sluicegate.coordinator")
    runners.take_over("orders", 2.1)
    assert started == ["orders"] and runners.watched() == {"users"}
    assert "no commit seen for 2.1 s; taking over" in caplog.text
    runners.take_over("orders", 2.1)  # already runs here
    assert started == ["orders"]

    # its runner here failed (not assigned here by Faust: not restarted); the next
    # takeover waits for the restart backoff
    failed: Any = SimpleNamespace(source="orders", state=RunnerState.FAILED, failure="boom", served_s=lambda: 0.0)
    runners.runners["orders"] = failed
    runners._on_runner_stopped(failed)
    assert runners.watched() == {"orders", "users"}
    runners.take_over("orders", 2.1)
    assert started == ["orders"]

    # a fenced runner steps down quietly: watched again, no backoff
    fenced: Any = SimpleNamespace(source="users", state=RunnerState.FENCED, failure=None, served_s=lambda: 0.0)
    runners.runners["users"] = fenced
    runners._on_runner_stopped(fenced)
    runners.take_over("users", 2.0)
    assert started == ["orders", "users"]


def test_a_running_step_recommits_once_a_liveness_interval_passed_and_not_past_the_longest_step() -> None:
    assert not reaffirm_due(0.0, 5.0, 0.5), "no step running: the loop commits itself"
    assert not reaffirm_due(3.0, 0.4, 0.5), "committed within the interval"
    assert reaffirm_due(3.0, 0.5, 0.5)
    assert reaffirm_due(LONGEST_STEP_S, 0.5, 0.5)
    assert not reaffirm_due(LONGEST_STEP_S + 0.1, 9.0, 0.5), "a step that long is a stall: silence"


def test_a_large_transaction_carries_the_keepalive_after_every_so_many_bytes_and_keeps_its_order() -> None:
    records = [OutgoingRecord("readers", i % 2, None, b"x" * 400) for i in range(10)]
    keepalive = OutgoingRecord("state", 0, b"orders/meta", b"{}")
    out = with_keepalives(records, keepalive, every_bytes=1000)
    assert [r for r in out if r is not keepalive] == records, "the records, in their order"
    assert [i for i, r in enumerate(out) if r is keepalive] == [3, 7, 11], "after 1,200 bytes, each time"
    assert with_keepalives(records[:2], keepalive, every_bytes=1000) == records[:2]


def test_a_transaction_in_flight_is_marked_once_the_state_topic_stood_still_an_interval() -> None:
    assert not mark_due(0.0, 5.0, 0.5), "no transaction in flight: the loop commits itself"
    assert not mark_due(3.0, 0.4, 0.5), "moved (a commit or a mark) within the interval"
    assert not mark_due(0.4, 5.0, 0.5), "a heartbeat commit begins an interval after the last: no mark if it is quick"
    assert mark_due(0.5, 0.5, 0.5)
    assert mark_due(LONGEST_COMMIT_S, 0.5, 0.5)
    assert not mark_due(LONGEST_COMMIT_S + 0.1, 9.0, 0.5), "a transaction that long is a stall: silence"


def test_a_successor_starting_is_marked_at_once_and_every_interval_until_its_start_up_is_a_stall() -> None:
    assert start_mark_due(0.0, 9.0, 0.5), "at once: the standbys' silence ran while the predecessor was silent"
    assert not start_mark_due(2.0, 0.4, 0.5), "marked within the interval"
    assert start_mark_due(2.0, 0.5, 0.5)
    assert not start_mark_due(LONGEST_COMMIT_S + 0.1, 9.0, 0.5), "a start-up that long is a stall: silence"
