"""A coordinator that keeps failing is restarted with growing delays, and says why."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from sluicegate.coordinator.faust_app import SourceRunners
from sluicegate.coordinator.restart_backoff import RESTART_DELAY_MAX_S, RestartBackoff
from sluicegate.coordinator.settings import CoordinatorSettings, SourceSettings
from sluicegate.coordinator.source_runner import RunnerState


def test_delays_double_up_to_the_cap() -> None:
    backoff = RestartBackoff()
    delays = [backoff.failed(served_s=0.5) for _ in range(10)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0]
    assert delays[-1] == RESTART_DELAY_MAX_S
    assert delays == sorted(delays)


def test_a_runner_that_served_a_while_starts_a_new_streak() -> None:
    backoff = RestartBackoff()
    for _ in range(5):
        backoff.failed(served_s=1.0)
    assert backoff.failed(served_s=3_600.0) == 1.0


async def test_a_failing_coordinator_logs_why_and_backs_off(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = CoordinatorSettings(
        sources=(SourceSettings(source="orders", connector="sequence", max_parallelism=2),),
        bootstrap_servers="127.0.0.1:9092",
    )
    runners = SourceRunners(settings)
    runners.assigned = {"orders"}
    scheduled: list[float] = []
    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "call_later", lambda delay, *args: scheduled.append(delay))
    reason = "the commit of 3 records and 2 state records (84,000,000 bytes) failed: MessageSizeTooLargeError"
    caplog.set_level(logging.ERROR, logger="sluicegate.coordinator")
    for _ in range(4):
        runner: Any = SimpleNamespace(source="orders", state=RunnerState.FAILED, failure=reason, served_s=lambda: 0.0)
        runners.runners["orders"] = runner
        runners._on_runner_stopped(runner)
    assert scheduled == [1.0, 2.0, 4.0, 8.0]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 4
    assert all(reason in message for message in errors)
    assert "in 8 s (failure 4 in a row)" in errors[-1]
