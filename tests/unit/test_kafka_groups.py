"""sluicegate.kafka.groups asks in a child process: librdkafka aborts a process whose
DescribeGroups request loses its coordinator's connection (librdkafka issue 4605; a
reader died of SIGABRT when a broker was SIGKILLed, issue 49), and such a death must
only make the answer "not known". Over real brokers: test_embedded_coordinator.py,
test_cluster_failover.py."""

from __future__ import annotations

import sys

import pytest

from sluicegate.kafka import groups
from sluicegate.kafka.groups import group_members

UNREACHABLE = "127.0.0.1:1"


async def test_a_probe_that_aborts_leaves_the_answer_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups, "PROBE", [sys.executable, "-c", "import os, sys; sys.stdin.read(); os.abort()"])
    (answer,) = await group_members(UNREACHABLE, ["ns.s.coordinator"])
    assert (answer.group, answer.members, answer.not_authorized) == ("ns.s.coordinator", None, False)
    assert "the group probe exited with -6" in answer.error


async def test_the_probe_answers_for_each_group_and_says_why_it_does_not_know() -> None:
    answers = await group_members(UNREACHABLE, ["a", "b"], timeout_s=0.5)
    assert [(a.group, a.members) for a in answers] == [("a", None), ("b", None)]
    assert all("Timed out" in a.error for a in answers), answers
