"""A coordinator worker says what it is doing (issue 24 item 3): a standby says it is one,
for which sources and what it watches (one line per change, not per rebalance), and a
finished bounded source is announced once with why its coordinator stays up."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiokafka import TopicPartition

from sluicegate.coordinator.faust_app import SourceRunners
from sluicegate.coordinator.settings import CoordinatorSettings, SourceSettings


def _runners(takeover_silence_ms: int) -> SourceRunners:
    settings = CoordinatorSettings(
        sources=tuple(SourceSettings(source=s, connector="sequence", max_parallelism=2) for s in ("a", "b")),
        bootstrap_servers="127.0.0.1:9092",
        takeover_silence_ms=takeover_silence_ms,
    )
    runners = SourceRunners(settings)
    runners._start = lambda name: None  # type: ignore[method-assign]  # no Kafka: the role alone
    return runners


def _standby_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "standby" in r.getMessage()]


async def test_a_worker_assigned_nothing_says_it_stands_by_and_what_it_watches(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runners = _runners(takeover_silence_ms=2_000)
    caplog.set_level(logging.INFO, logger="sluicegate.coordinator")
    await runners.on_assignment(set())
    await runners.on_assignment(set())  # a rebalance that changes nothing: no new line
    (line,) = _standby_lines(caplog)
    assert "standby for sources a, b" in line
    assert "sluicegate.a.coordinator-state" in line and "2000 ms" in line, line


async def test_the_line_follows_the_role_and_a_worker_that_holds_everything_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runners = _runners(takeover_silence_ms=0)
    leadership = runners.leadership.name
    caplog.set_level(logging.INFO, logger="sluicegate.coordinator")
    both: Any = {TopicPartition(leadership, 0), TopicPartition(leadership, 1)}
    await runners.on_assignment(both)
    assert _standby_lines(caplog) == []
    await runners.on_assignment({TopicPartition(leadership, 0)})
    (line,) = _standby_lines(caplog)
    assert "standby for source b:" in line and "when the group gives it to this worker" in line
    assert "commits nothing" not in line  # fast takeover is off


def test_a_finished_bounded_source_is_announced_once_with_why_the_coordinator_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runners = _runners(takeover_silence_ms=0)
    finished = {"a": False}
    for name in ("a", "b"):
        core = SimpleNamespace(is_finished=lambda name=name: finished.get(name, False))
        runners.runners[name] = cast(Any, SimpleNamespace(core_at_rest=core))
    caplog.set_level(logging.INFO, logger="sluicegate.coordinator")
    runners.say_finished()
    assert not [r for r in caplog.records if "finished" in r.getMessage()]
    finished["a"] = True
    runners.say_finished()
    runners.say_finished()
    (line,) = [r.getMessage() for r in caplog.records if "finished" in r.getMessage()]
    assert line.startswith("source a is finished") and "stays up" in line and "Ctrl-C" in line
