"""The standalone reader host against a real broker and an in-test coordinator."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from inline_coordinator import InlineCoordinator, create_topics
from sluicegate_connectors.sequence import SequenceOptions, SequenceSource

from sluicegate.protocol import CheckpointAck, ReaderRegistration
from sluicegate.reader.host import ReaderHost, ReaderSettings
from sluicegate.reader.output import OutputSpec

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(90)]

SPLITS = 20
RECORDS_PER_SPLIT = 50
ALL_VALUES = set(range(SPLITS * RECORDS_PER_SPLIT))


def values_in(*paths: Path) -> Counter[int]:
    counts: Counter[int] = Counter()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_bytes().splitlines():
            if line.strip():
                counts[orjson.loads(line)["value"]] += 1
    return counts


def settings(bootstrap: str, source: str, subtask: int, out: Path, **extra: Any) -> ReaderSettings:
    return ReaderSettings(
        source=source,
        subtask=subtask,
        connector="sequence",
        output=OutputSpec.parse(f"jsonl:{out}"),
        bootstrap_servers=bootstrap,
        options={"splits": str(SPLITS), "records_per_split": str(RECORDS_PER_SPLIT)},
        checkpoint_interval_ms=500,
        heartbeat_interval_ms=300,
        topic_wait_timeout_s=30,
        **extra,
    )


async def test_two_readers_read_a_bounded_source_exactly_once(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    await create_topics(kafka_bootstrap, unique_source, 2)
    source = SequenceSource(SequenceOptions(splits=SPLITS, records_per_split=RECORDS_PER_SPLIT))
    outs = [tmp_path / "reader-0.jsonl", tmp_path / "reader-1.jsonl"]
    async with InlineCoordinator(
        kafka_bootstrap, unique_source, source, max_parallelism=2
    ) as coord:
        hosts = [
            ReaderHost(
                settings(kafka_bootstrap, unique_source, k, outs[k]),
                SequenceSource(SequenceOptions(splits=SPLITS, records_per_split=RECORDS_PER_SPLIT)),
            )
            for k in range(2)
        ]
        codes = await asyncio.wait_for(asyncio.gather(*(h.run() for h in hosts)), timeout=60)
        assert codes == [0, 0]
        await coord.wait_until(
            lambda: len(coord.received_of_type("ReaderLeaving")) == 2, timeout_s=10
        )
        assert coord.core.is_finished()

    counts = values_in(*outs)
    assert set(counts) == ALL_VALUES
    assert max(counts.values()) == 1, "a value was written twice without any failure"
    # both readers did some of the work, and every record has its subtask
    for k, out in enumerate(outs):
        lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
        assert lines and {line["subtask"] for line in lines} == {k}
        assert all(line["event_time_ms"] is not None for line in lines)
    for k, host in enumerate(hosts):
        assert host.session is not None
        assert host.session.checkpoints_committed >= 1
        acks = [e for e in coord.received_of_type("CheckpointAck", k)]
        assert acks and isinstance(acks[-1].body, CheckpointAck) and acks[-1].body.splits == []
        leaving = coord.received_of_type("ReaderLeaving", k)[-1]
        assert leaving.attempt == 1 and leaving.body.to_json() == {"splits": []}
    assert coord.undecodable == 0


def start_reader(
    source: str, subtask: int, out: Path, log_path: Path, bootstrap: str, rate: int
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "sluicegate.reader",
        "--source", source, "--subtask", str(subtask), "--connector", "sequence",
        "--option", f"splits={SPLITS}", "--option", f"records_per_split={RECORDS_PER_SPLIT}",
        "--option", f"rate={rate}",
        "--output", f"jsonl:{out}",
        "--checkpoint-interval-ms", "300", "--heartbeat-interval-ms", "300",
    ]  # fmt: skip
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    with log_path.open("ab") as log:
        return subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


async def wait_for_text(
    log_path: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        content = log_path.read_text(errors="replace") if log_path.exists() else ""
        if text in content:
            return
        if proc.poll() is not None:
            raise AssertionError(
                f"reader exited with {proc.returncode} before logging {text!r}:\n{content[-3000:]}"
            )
        await asyncio.sleep(0.1)
    raise AssertionError(
        f"no {text!r} in {log_path} within {timeout_s} s:\n{log_path.read_text()[-3000:]}"
    )


async def wait_exit(proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(
                f"reader still running after {timeout_s} s:\n{log_path.read_text()[-3000:]}"
            )
        await asyncio.sleep(0.1)
    return proc.returncode


async def test_a_reader_killed_mid_run_restarts_from_its_checkpoint(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    await create_topics(kafka_bootstrap, unique_source, 2)
    source = SequenceSource(SequenceOptions(splits=SPLITS, records_per_split=RECORDS_PER_SPLIT))
    first, restarted, other = (
        tmp_path / "r0.jsonl",
        tmp_path / "r0-restarted.jsonl",
        tmp_path / "r1.jsonl",
    )
    logs = [tmp_path / "r0.log", tmp_path / "r0-restarted.log", tmp_path / "r1.log"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        async with InlineCoordinator(
            kafka_bootstrap, unique_source, source, max_parallelism=2
        ) as coord:
            procs.append(start_reader(unique_source, 0, first, logs[0], kafka_bootstrap, rate=150))
            procs.append(start_reader(unique_source, 1, other, logs[2], kafka_bootstrap, rate=150))
            await wait_for_text(logs[0], "registered as attempt 1", procs[0], 30)
            # let it read and checkpoint for a while, then kill it without warning
            await wait_for_text(logs[0], "checkpoint 3:", procs[0], 30)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(10)
            assert values_in(first), "the killed reader wrote nothing"

            procs.append(
                start_reader(unique_source, 0, restarted, logs[1], kafka_bootstrap, rate=400)
            )
            await wait_for_text(logs[1], "restored checkpoint", procs[2], 30)
            await wait_for_text(logs[1], "registered as attempt 2", procs[2], 30)
            assert await wait_exit(procs[2], logs[1], 40) == 0
            assert await wait_exit(procs[1], logs[2], 40) == 0

            # the restarted reader reported exactly what its killed predecessor last acknowledged
            # (in inbox order: the acks of subtask 0 before its second registration)
            inbox = coord.received
            second = [
                i for i, e in enumerate(inbox) if e.type == "ReaderRegistration" and e.subtask == 0
            ]
            assert len(second) == 2
            acks = [e for e in inbox[: second[1]] if e.type == "CheckpointAck" and e.subtask == 0]
            assert acks
            reg, ack = inbox[second[1]].body, acks[-1].body
            assert isinstance(reg, ReaderRegistration) and isinstance(ack, CheckpointAck)
            assert reg.restored_checkpoint_id == ack.checkpoint_id
            assert reg.reported_splits == ack.splits
            assert reg.reported_splits, "the kill should have landed while subtask 0 owned splits"
            assert coord.core.slots[0].attempt == 2
            await coord.wait_until(coord.core.is_finished, timeout_s=10)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    counts = values_in(first, restarted, other)
    missing = ALL_VALUES - set(counts)
    assert not missing, f"{len(missing)} values never written, e.g. {sorted(missing)[:10]}"
    summary = logs[1].read_text()
    assert "records written" in summary and "splits finished" in summary
