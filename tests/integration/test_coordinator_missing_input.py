"""A coordinator told to read a topic or a path that does not exist fails at the source's
first start, naming it, within the input wait (issue 24 item 2): before, it logged one
warning (or nothing, for a path) and served a source that would never read anything.
Waiting for an input created later is explicit: ``missing_topics=wait``,
``missing_path=wait``. Real processes against real Kafka: exit code, time, words."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
from cli_run import run_sluicegate
from kafka_data import DataWriter, create_topic
from processes import ProcessGroup

from sluicegate.api.source import INPUT_WAIT_S

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def coordinator_args(source: str, topics: str, **more: str) -> list[str]:
    args = ["coordinator", "--source", source, "--connector", "kafka", "--max-parallelism", "1"]
    for key, value in {"topics": topics, **more}.items():
        args += ["--option", f"{key}={value}"]
    return args


def test_a_topic_that_does_not_exist_ends_the_coordinator_with_exit_2_naming_it(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    there, typo = f"orders-{secrets.token_hex(3)}", f"ordres-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, there, 1)
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        started = time.monotonic()
        proc = group.run("coordinator", coordinator_args(unique_source, f"{there},{typo}"), timeout_s=120)
        took = time.monotonic() - started
        said = " ".join(proc.log().split())
        assert proc.returncode == 2, said
        assert INPUT_WAIT_S <= took < INPUT_WAIT_S + 45, f"took {took:.1f} s"
        assert f"source {unique_source}: topic {typo} (`topics`) does not exist" in said, said
        assert "`missing_topics=wait`" in said
        assert "is serving" not in said
    finally:
        group.stop_all()


def test_with_missing_topics_wait_the_coordinator_serves_and_picks_the_topic_up_when_created(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    later = f"later-{secrets.token_hex(3)}"
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        args = coordinator_args(unique_source, later, missing_topics="wait", partition_discovery_interval_ms="500")
        proc = group.start("coordinator", args)
        proc.wait_for_log("is serving", timeout_s=90)
        proc.wait_for_log(f"topics ['{later}'] do not exist (yet)", timeout_s=30)
        create_topic(kafka_bootstrap, later, 2)
        proc.wait_for_log("discovered 2 partitions", timeout_s=60)
        assert proc.popen.poll() is None, proc.tail()
    finally:
        group.stop_all()


def test_a_files_path_that_does_not_exist_ends_the_coordinator_with_exit_2_naming_it(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    typo = tmp_path / "inbxo"
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        args = ["coordinator", "--source", unique_source, "--connector", "files", "--max-parallelism", "1"]
        args += ["--option", f"path={typo}", "--option", "schema=id BIGINT"]
        started = time.monotonic()
        proc = group.run("coordinator", args, timeout_s=120)
        took = time.monotonic() - started
        said = " ".join(proc.log().split())
        assert proc.returncode == 2, said
        assert INPUT_WAIT_S <= took < INPUT_WAIT_S + 45, f"took {took:.1f} s"
        assert f"path {typo} (`path`) does not exist" in said and "`missing_path=wait`" in said, said
    finally:
        group.stop_all()


def test_a_reader_that_starts_a_source_fails_the_same_way_and_the_corrected_one_reads(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    """A standalone reader coordinates a new source itself (--coordinator auto): a topic
    that does not exist ends it as it ends a deployed coordinator, before the source's
    definition is committed, so the same source with the name put right starts and reads
    (issue 51 item 1: it ran on for minutes, printing 0 records/s)."""
    there = f"orders-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, there, 2)
    writer = DataWriter(kafka_bootstrap, there, 2)
    writer.produce(5)
    writer.flush()

    def reader(topics: str) -> tuple[int, float, str]:
        return run_sluicegate(
            *("reader", "--source", unique_source, "--subtask", "0", "--max-parallelism", "1"),
            *("--connector", "kafka", "--bootstrap-servers", kafka_bootstrap),
            *("--option", f"topics={topics}", "--option", f"bootstrap_servers={kafka_bootstrap}"),
            *("--option", "starting_offsets=earliest", "--option", "stopping_offsets=latest"),
            *("--output", f"jsonl:{tmp_path / 'out.jsonl'}"),
        )

    code, took, said = reader(f"ordres-{secrets.token_hex(3)}")
    assert code == 2, said
    assert INPUT_WAIT_S <= took < INPUT_WAIT_S + 30, f"took {took:.1f} s"
    assert f"source {unique_source}: topic ordres-" in said and "(`topics`) does not exist" in said, said
    assert "0 records/s" not in said
    code, _, said = reader(there)
    assert code == 0, said
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 10
