"""One definition per source, over real Kafka and real processes (issue: a source that
silently changed meaning).

Coordinator A serves source S with ``--connector kafka --option topics=orders``. A second
coordinator for S with ``topics=orders-copy`` and a third with ``--connector sequence``
used to be accepted as standbys; after ``kill -9`` of A the standby restored S's state and
discovered the partitions of the other topic: one source held partitions of two topics.
Now each is refused at start (exit 2, naming the option), before it can ever take over;
after A's SIGKILL the source is unchanged; a reader that brings other options is refused
by the coordinator; ``sluicegate source redefine`` is the one way to change it, and the
audit shows the change.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import pytest
from kafka_data import DataWriter, create_topic
from processes import ProcessGroup, output_records
from test_takeover import audit, audit_failure, readers_topic

from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.source_runner import RunnerState, SourceRunner
from sluicegate.coordinator.state_store import read_state
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.topics import ControlTopics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PARTITIONS = 2
RECORDS = 20  # per partition
REFUSED_WITHIN_S = 30.0  # a refused process exits within this (it reads the state topic first)


def kafka_coordinator(source: str, topic: str, *, connector: str = "kafka", **more: str) -> list[str]:
    args = ["coordinator", "--source", source, "--connector", connector, "--max-parallelism", "2"]
    options = {"topics": topic} if connector == "kafka" else {"splits": "4"}
    options.update(more)
    for key, value in options.items():
        args += ["--option", f"{key}={value}"]
    return args


def kafka_reader(source: str, topic: str, output: Path, subtask: int = 0) -> list[str]:
    return [
        *("reader", "--source", source, "--subtask", str(subtask), "--connector", "kafka"),
        *("--option", f"topics={topic}", "--output", f"jsonl:{output}"),
    ]


def committed_definition(bootstrap: str, source: str) -> SourceDefinition:
    topic = ControlTopics.for_source(source, "sluicegate").coordinator_state
    stored = asyncio.run(read_state(bootstrap, topic, source))
    assert stored is not None and "definition" in stored.parts
    return SourceDefinition.from_json(stored.parts["definition"])


def assigned_topics(bootstrap: str, source: str) -> set[str]:
    """The topics of every split the coordinator ever assigned (from NS.S.readers)."""
    return {
        split["topic"]
        for env in readers_topic(bootstrap, source)
        if env["type"] == "AddSplits"
        for split in env["body"]["splits"]
    }


OLD = {"splits": "4", "records_per_split": "10"}
NEW = {"splits": "4", "records_per_split": "20"}


def redefine_args(source: str, options: dict[str, str]) -> list[str]:
    args = ["source", "redefine", "--source", source, "--connector", "sequence"]
    for key, value in options.items():
        args += ["--option", f"{key}={value}"]
    return args


def refused_quickly(group: ProcessGroup, name: str, args: list[str]) -> str:
    started = time.monotonic()
    proc = group.run(name, args, timeout_s=REFUSED_WITHIN_S + 30)
    took = time.monotonic() - started
    assert proc.returncode == 2, f"{name} exited {proc.returncode}, not 2 (refused):\n{proc.tail()}"
    assert took < REFUSED_WITHIN_S, f"{name} took {took:.1f} s to be refused"
    return " ".join(proc.log().split())  # one line: log handlers wrap long messages


def test_a_standby_or_reader_with_another_definition_is_refused_and_the_source_is_unchanged(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    orders, copy = f"orders-{secrets.token_hex(3)}", f"orders-copy-{secrets.token_hex(3)}"
    for topic in (orders, copy):
        create_topic(kafka_bootstrap, topic, PARTITIONS)
        writer = DataWriter(kafka_bootstrap, topic, PARTITIONS)
        writer.produce(RECORDS)
        writer.flush()
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        active = group.start("coordinator-a", kafka_coordinator(source, orders))
        active.wait_for_log("is serving", timeout_s=90)
        assert committed_definition(kafka_bootstrap, source) == SourceDefinition.of("kafka", {"topics": orders})

        # the two standbys of the report: other topics, another connector
        log = refused_quickly(group, "standby-other-topics", kafka_coordinator(source, copy))
        assert f"option topics: {orders} (source) vs {copy} (given)" in log, log
        assert "sluicegate source redefine" in log
        log = refused_quickly(group, "standby-sequence", kafka_coordinator(source, "", connector="sequence"))
        assert "connector: kafka (source) vs sequence (given)" in log, log

        # a reader with other options is refused by the coordinator, naming them
        log = refused_quickly(group, "reader-other-topics", kafka_reader(source, copy, tmp_path / "refused.jsonl"))
        assert f"option topics: {orders} (source) vs {copy} (given)" in log, log
        assert not (tmp_path / "refused.jsonl").exists() or not output_records(tmp_path / "refused.jsonl")

        # a reader with the source's options reads
        good = tmp_path / "good.jsonl"
        reader = group.start("reader-0", kafka_reader(source, orders, good))
        reader.wait_for_log("registered as attempt", timeout_s=60)

        # A dies; the one with other topics comes back: still refused, after the kill too
        active.kill_group()
        log = refused_quickly(group, "standby-after-kill", kafka_coordinator(source, copy))
        assert f"vs {copy} (given)" in log, log
        assert committed_definition(kafka_bootstrap, source) == SourceDefinition.of("kafka", {"topics": orders})
        assert assigned_topics(kafka_bootstrap, source) == {orders}

        result = audit(kafka_bootstrap, source)
        assert result.ok, audit_failure(result)
        assert result.summary.redefinitions == []
    finally:
        group.stop_all()


def test_a_runner_that_got_past_the_start_check_is_refused_before_it_commits(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    """A standby started before the source had a definition passes the start check; when it
    takes over, its runner compares again, commits nothing and stops as refused."""
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        group.coordinator(source, 2, {"splits": "4"}).kill_group()
    finally:
        group.stop_all()
    before = asyncio.run(
        read_state(kafka_bootstrap, ControlTopics.for_source(source, "sluicegate").coordinator_state, source)
    )
    assert before is not None
    other = SourceSettings(source=source, connector="sequence", max_parallelism=2, options={"splits": "5"})

    async def run_once() -> SourceRunner:
        runner = SourceRunner(other, kafka_bootstrap, "sluicegate")
        runner.start()
        for _ in range(300):
            if runner.state is not RunnerState.STARTING:
                break
            await asyncio.sleep(0.1)
        await runner.stop()
        return runner

    runner = asyncio.run(run_once())
    assert runner.state is RunnerState.REFUSED
    assert runner.failure is not None and "option splits: 4 (source) vs 5 (given)" in runner.failure
    after = asyncio.run(
        read_state(kafka_bootstrap, ControlTopics.for_source(source, "sluicegate").coordinator_state, source)
    )
    assert after is not None and after.parts["meta"] == before.parts["meta"]  # no new epoch committed


def test_redefine_changes_the_source_on_purpose_and_the_audit_shows_it(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        old = group.coordinator(source, 2, OLD)
        redefine = group.run(
            "redefine",
            redefine_args(source, NEW),
        )
        assert redefine.returncode == 0, redefine.tail()
        assert "option records_per_split: 10 (old) vs 20 (new)" in redefine.log(), redefine.log()
        old.wait_for_log("a newer coordinator took over", timeout_s=30)
        assert committed_definition(kafka_bootstrap, source) == SourceDefinition.of("sequence", NEW)
        old.kill_group()
        log = refused_quickly(group, "old-definition", group.coordinator_args(source, 2, OLD))
        assert "option records_per_split: 20 (source) vs 10 (given)" in log, log
        new = group.coordinator(source, 2, NEW)
        new.wait_for_log("redefined as", timeout_s=30)
        again = group.run(
            "redefine-again",
            redefine_args(source, NEW),
        )
        assert again.returncode == 0 and "nothing changed" in again.log(), again.log()
        result = audit(kafka_bootstrap, source)
        assert result.ok, audit_failure(result)
        [change] = result.summary.redefinitions
        assert "option records_per_split: 10 (old) vs 20 (new)" in change
    finally:
        group.stop_all()
