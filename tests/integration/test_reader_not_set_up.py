"""A reader of a source nobody set up, or with an output topic nobody created, fails
within ``--topic-wait-timeout-s`` saying which and who creates it (issue 24 item 2):
before, both waited for ever, the second with a hint that was wrong for a user's topic.
Real processes against real Kafka: exit code, time, words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import run_sluicegate
from inline_coordinator import create_topics

pytestmark = pytest.mark.kafka

WAIT_S = 3


def run_reader(bootstrap: str, source: str, output: str) -> tuple[int, float, str]:
    return run_sluicegate(
        *("reader", "--source", source, "--subtask", "0", "--connector", "sequence", "--output", output),
        *("--bootstrap-servers", bootstrap, "--topic-wait-timeout-s", str(WAIT_S)),
    )


def test_a_source_never_set_up_ends_the_reader_with_exit_2_and_what_to_do(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    code, took, said = run_reader(kafka_bootstrap, unique_source, f"jsonl:{tmp_path / 'out.jsonl'}")
    assert code == 2, said
    assert WAIT_S <= took < WAIT_S + 25, f"took {took:.1f} s"
    assert f"source {unique_source} is not set up in namespace sluicegate" in said, said
    assert f"sluicegate.{unique_source}.coordinator" in said  # which topics were looked for
    assert f"sluicegate topics apply --source {unique_source}" in said and "Start its coordinator" in said
    assert "wait longer with --topic-wait-timeout-s" in said


def test_run_reader_says_the_same_in_its_keywords(kafka_bootstrap: str, unique_source: str, tmp_path: Path) -> None:
    """A Python caller gave keywords, not flags: the advice names ``topic_wait_timeout_s`` and
    ``coordinator=auto``, never ``--topic-wait-timeout-s``."""
    output = f"jsonl:{tmp_path / 'out.jsonl'}"
    call = (
        "import sluicegate; raise SystemExit(sluicegate.run_reader("
        f"source={unique_source!r}, connector='sequence', output={output!r}, "
        f"bootstrap_servers={kafka_bootstrap!r}, coordinator='external', topic_wait_timeout_s={WAIT_S}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", call], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"}
    )
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, said
    assert f"source {unique_source} is not set up" in said, said
    assert "wait longer with topic_wait_timeout_s" in said and "(coordinator=auto, max_parallelism=N)" in said, said
    assert "--" not in said.replace("sluicegate topics apply --source", ""), said


async def test_a_missing_output_topic_is_named_as_the_users_to_create(kafka_bootstrap: str, unique_source: str) -> None:
    await create_topics(kafka_bootstrap, unique_source, 1)
    topic = f"{unique_source}-no-such-output"
    code, took, said = run_reader(kafka_bootstrap, unique_source, f"kafka:{topic}")
    assert code == 2, said
    assert took < WAIT_S + 25, f"took {took:.1f} s"
    assert f"the output topic {topic} (--output kafka:{topic}) does not exist" in said, said
    assert "never creates an output topic" in said
    assert "created by the coordinator" not in said  # the control topics' hint, wrong here
