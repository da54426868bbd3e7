"""The main job end to end: real Spark (local mode), real Kafka, a real coordinator process.

A bounded ``sequence`` source of 64 splits x 20,000 values is read by a Spark
Structured Streaming query with 4 reader subtasks (``format("sluicegate")``), which
counts and sums every event-time minute into Parquet. Each test checks the whole
result table against the one the source must give (so the count and the sum are
exact: nothing lost, nothing read twice) and that the audit of the control topics
is clean:

1. a plain run;
2. the Spark driver SIGKILLed mid-run (the job runs as a subprocess,
   ``python -m sluicegate.spark.job``, killed with its JVM and Python workers),
   then restarted from its checkpoint: registration reports the restored splits
   and the coordinator reconciles;
3. the coordinator SIGKILLed mid-run and a successor started.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from processes import Proc, ProcessGroup

from sluicegate.audit.commands import run_audit
from sluicegate.spark.job import (
    JobProgress,
    JobSettings,
    expected_sequence_windows,
    run_job,
    spark_session,
    totals,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(480), pytest.mark.spark]

PARALLELISM = 4
SPLITS = 64
RECORDS_PER_SPLIT = 20_000
TOTAL = SPLITS * RECORDS_PER_SPLIT
OPTIONS = {"splits": str(SPLITS), "records_per_split": str(RECORDS_PER_SPLIT)}
EXPECTED = expected_sequence_windows(OPTIONS)
MAX_RECORDS_PER_TRIGGER = 160_000
"""About 8 data batches, so that a kill lands mid-run."""


@pytest.fixture(scope="module")
def spark(kafka_bootstrap: str) -> Iterator[Any]:
    session = spark_session("sluicegate-e2e", quiet=True)
    yield session
    session.stop()


def _config(
    source: str,
    tmp_path: Path,
    bootstrap: str,
    options: Mapping[str, str] = OPTIONS,
    max_records_per_trigger: int = MAX_RECORDS_PER_TRIGGER,
) -> JobSettings:
    return JobSettings(
        source=source,
        output_dir=tmp_path / "windows",
        checkpoint_dir=tmp_path / "checkpoint",
        bootstrap_servers=bootstrap,
        parallelism=PARALLELISM,
        connector_options=options,
        max_records_per_trigger=max_records_per_trigger,
    )


def _start_job(group: ProcessGroup, name: str, source: str, tmp_path: Path) -> Proc:
    args = [
        "--source", source,
        "--output", str(tmp_path / "windows"),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--parallelism", str(PARALLELISM),
        "--max-records-per-trigger", str(MAX_RECORDS_PER_TRIGGER),
        "--progress-interval", "0.5",
        "--check",
        "--quiet",
    ]  # fmt: skip
    for key, value in OPTIONS.items():
        args += ["--option", f"{key}={value}"]
    log_path = tmp_path / f"{name}.log"
    with log_path.open("ab") as handle:
        popen = subprocess.Popen(
            [sys.executable, "-m", "sluicegate.spark.job", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=group.bootstrap, PYTHONUNBUFFERED="1"),
            start_new_session=True,
        )
    proc = Proc(name, popen, log_path, args)
    group.procs.append(proc)
    return proc


def _rows_planned(proc: Proc) -> int:
    found = re.findall(r"progress batch=-?\d+ rows=(\d+)", proc.log())
    return int(found[-1]) if found else 0


def _result(proc: Proc) -> dict[str, Any]:
    lines = proc.lines_with("RESULT ")
    assert lines, f"{proc.name} printed no RESULT:\n{proc.tail(60)}"
    result: dict[str, Any] = json.loads(lines[-1].split("RESULT ", 1)[1])
    return result


def _assert_audit_clean(bootstrap: str, source: str, splits: int = SPLITS) -> None:
    result = asyncio.run(run_audit(bootstrap, source))
    assert result.ok, f"audit: {result.first_violation}"
    summary = result.summary
    assert summary.splits_assigned == splits
    assert summary.splits_finished == splits
    assert summary.splits_owned == 0


def test_the_job_counts_and_sums_every_value_exactly_once(
    spark: Any, procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    procs.coordinator(unique_source, PARALLELISM, OPTIONS)
    progress: list[JobProgress] = []
    table = run_job(_config(unique_source, tmp_path, kafka_bootstrap), spark, progress.append, timeout_s=300)

    assert totals(table) == (TOTAL, TOTAL * (TOTAL - 1) // 2)
    assert table == EXPECTED
    assert progress[-1].rows == TOTAL
    # admission control: no batch planned more than maxRecordsPerTrigger
    batches = {p.batch_id: p.rows for p in progress}
    rows = [batches[b] for b in sorted(batches)]
    assert all(b - a <= MAX_RECORDS_PER_TRIGGER for a, b in itertools.pairwise(rows))
    _assert_audit_clean(kafka_bootstrap, unique_source)


@pytest.mark.parametrize(
    ("coordinator_args", "down_s"),
    [
        # Down longer than the coordinator's departure timeout: the subtasks' checkpointed
        # splits went back to the enumerator (positions from the acks) before the restart.
        # (A driver restarted at once, its splits reported on registration, FLIP-537, is
        # test_kafka_spark.py's killed-driver test, with the coordinator in the driver.)
        pytest.param(("--session-timeout-ms", "2000", "--reader-departure-timeout-ms", "3000"), 8.0, id="departed"),
    ],
)
def test_a_killed_driver_restarts_from_its_checkpoint_without_loss_or_duplicate(
    procs: ProcessGroup,
    kafka_bootstrap: str,
    unique_source: str,
    tmp_path: Path,
    coordinator_args: tuple[str, ...],
    down_s: float,
) -> None:
    coordinator = procs.coordinator(unique_source, PARALLELISM, OPTIONS, *coordinator_args)
    first = _start_job(procs, "job-1", unique_source, tmp_path)
    deadline = time.monotonic() + 180
    while _rows_planned(first) < TOTAL // 4:
        assert first.popen.poll() is None, f"the job ended early:\n{first.tail(40)}"
        assert time.monotonic() < deadline, f"the job made no progress:\n{first.tail(40)}"
        time.sleep(0.2)
    time.sleep(random.uniform(0.0, 1.5))  # land anywhere in a batch
    first.kill_group()
    killed_at = _rows_planned(first)
    assert killed_at < TOTAL and not first.lines_with("RESULT "), "the job finished before it was killed"
    if down_s:
        time.sleep(down_s)
        # the slots depart a session and a departure timeout after the kill, and the log
        # shows it a step later: bounded, a loaded machine is slow to get there
        coordinator.wait_for_log("departed", timeout_s=30)

    second = _start_job(procs, "job-2", unique_source, tmp_path)
    assert second.wait(300) == 0, second.tail(60)
    result = _result(second)
    assert result["ok"], result
    assert (result["count"], result["sum"]) == (TOTAL, TOTAL * (TOTAL - 1) // 2)
    # the restarted driver registered with the splits of its restored offsets (FLIP-537)
    reported = [int(n) for n in re.findall(r"(\d+) reported splits", second.log())]
    assert reported and sum(reported) > 0, second.tail(60)
    assert second.lines_with("restored at checkpoint")
    _assert_audit_clean(kafka_bootstrap, unique_source)


def test_a_killed_coordinator_is_succeeded_and_the_job_ends_exactly_once(
    spark: Any, procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    coordinator = procs.coordinator(unique_source, PARALLELISM, OPTIONS)
    state: dict[str, Any] = {}

    def kill_coordinator_mid_run(p: JobProgress) -> None:
        if "successor" not in state and p.rows >= TOTAL // 3:
            coordinator.kill()
            state["killed_at"] = p.rows
            state["successor"] = procs.coordinator(unique_source, PARALLELISM, OPTIONS)

    table = run_job(_config(unique_source, tmp_path, kafka_bootstrap), spark, kill_coordinator_mid_run, timeout_s=360)

    assert "successor" in state, "the job ended before the coordinator was killed"
    assert state["killed_at"] < TOTAL
    assert totals(table) == (TOTAL, TOTAL * (TOTAL - 1) // 2)
    assert table == EXPECTED
    result = asyncio.run(run_audit(kafka_bootstrap, unique_source))
    assert len(result.summary.epochs) >= 2, result.summary.epochs
    _assert_audit_clean(kafka_bootstrap, unique_source)


# -- watermark alignment ----------------------------------------------------------------

ALIGNED_OPTIONS = {
    "splits": "4",
    "records_per_split": "3000",
    "event_interval_ms": "10",
    "split_time_offset_ms": "20000",
}
"""One split per subtask, each 30 s of event time, starting 20 s after the previous one."""
ALIGNED_DRIFT_MS = 5_000
ALIGNED_BUDGET = 1_200
"""300 records = 3 s of event time per split and batch: at least 10 batches."""


def _offset_log(checkpoint_dir: Path) -> list[dict[str, Any]]:
    """The source offsets Spark wrote, in batch order (offsets/N: version, metadata, offset)."""
    files = sorted((checkpoint_dir / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    return [json.loads(f.read_text().splitlines()[2]) for f in files]


def _positions(offset: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """split id -> (planned position, start of the split)."""
    return {
        sid: (entry["pos"], entry["split"]["start"])
        for sub in offset["subtasks"].values()
        for sid, entry in sub.get("splits", {}).items()
    }


def test_with_watermark_alignment_splits_ahead_pause_and_the_job_still_ends_exactly_once(
    spark: Any, procs: ProcessGroup, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    procs.coordinator(unique_source, PARALLELISM, ALIGNED_OPTIONS, "--max-watermark-drift-ms", str(ALIGNED_DRIFT_MS))
    config = _config(unique_source, tmp_path, kafka_bootstrap, ALIGNED_OPTIONS, ALIGNED_BUDGET)
    table = run_job(config, spark, timeout_s=300)

    total = 4 * 3000
    assert totals(table) == (total, total * (total - 1) // 2)
    assert table == expected_sequence_windows(ALIGNED_OPTIONS)
    _assert_audit_clean(kafka_bootstrap, unique_source, splits=4)

    # Without alignment every unfinished split advances in every batch (the budget is
    # shared by backlog). With it, a split that has read past the bound waits: some
    # batch advances one split while another, already started and unfinished, stays.
    offsets = _offset_log(tmp_path / "checkpoint")
    paused = 0
    batches_with_a_pause: list[tuple[int, int, int]] = []
    for before, after in itertools.pairwise(offsets):
        was, now = _positions(before), _positions(after)
        moved = {sid for sid in now if sid in was and now[sid][0] > was[sid][0]}
        waiting = {
            sid
            for sid in now
            if sid in was and now[sid][0] == was[sid][0] and was[sid][1] < was[sid][0] < was[sid][1] + 3000
        }
        if moved and waiting:
            paused += 1
            # FLINK-37399: the splits that may read get the whole budget meanwhile, the
            # paused ones do not keep a share of it (unless less than that was left to read)
            advanced = sum(now[sid][0] - was[sid][0] for sid in moved)
            left = sum(start + 3000 - was[sid][0] for sid, (_, start) in was.items() if sid not in waiting)
            batches_with_a_pause.append((advanced, left, len(moved)))
    assert paused > 0, f"no batch paused a split ahead of the others in {len(offsets)} offsets"
    # (each split's share is rounded as Spark's Kafka source rounds it: down, so the batch
    # may plan up to a record less per split than the budget)
    assert all(
        min(ALIGNED_BUDGET, left) - moved < advanced <= min(ALIGNED_BUDGET, left)
        for advanced, left, moved in batches_with_a_pause
    ), f"paused splits kept part of the budget: (rows planned, rows left, splits read) = {batches_with_a_pause}"
