"""The standalone reader host against a real broker and an in-test coordinator."""

from __future__ import annotations

import asyncio
import dataclasses
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
from acks import acknowledged_splits
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from inline_coordinator import InlineCoordinator, create_topics

from sluicegate.kafka.compacted import read_latest_value
from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol import (
    CheckpointAck,
    ReaderLeaving,
    ReaderRegistration,
    encode,
    envelope,
)
from sluicegate.protocol.topics import ControlTopics, TopicSpec
from sluicegate.reader.host import EXIT_DUPLICATE, EXIT_OK, ReaderHost, ReaderSettings
from sluicegate.reader.output import OutputSpec
from sluicegate.reader.state import ReaderCheckpoint
from sluicegate_connectors.sequence import SequenceOptions, SequenceSource

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(90)]

SPLITS = 20
RECORDS_PER_SPLIT = 50
ALL_VALUES = set(range(SPLITS * RECORDS_PER_SPLIT))
SEQUENCE = {"splits": str(SPLITS), "records_per_split": str(RECORDS_PER_SPLIT)}
"""The sequence connector's options of the coordinator and the readers."""
RIVAL_RATE = 120
"""Records/s of a reader that a rival of its subtask must find still reading: 8 s for the
1,000 values, against two checkpoints and a second reader's start-up on a loaded machine."""


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
    outs = [tmp_path / "reader-0.jsonl", tmp_path / "reader-1.jsonl"]
    async with InlineCoordinator(kafka_bootstrap, unique_source, "sequence", SEQUENCE, max_parallelism=2) as coord:
        hosts = [
            ReaderHost(
                settings(kafka_bootstrap, unique_source, k, outs[k]),
                SequenceSource(SequenceOptions(splits=SPLITS, records_per_split=RECORDS_PER_SPLIT)),
            )
            for k in range(2)
        ]
        codes = await run_hosts(coord, hosts, 40)
        assert codes == [0, 0]
        await coord.wait_until(lambda: len(coord.received_of_type("ReaderLeaving")) == 2, timeout_s=10)
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


def describe(coord: InlineCoordinator, hosts: list[ReaderHost]) -> str:
    """What the coordinator and the hosts were doing, for a failure message."""
    lines = [f"coordinator slots: {[(s.state.value, s.attempt, s.seq) for s in coord.core.slots]}"]
    lines.append(f"owned: {coord.core.tracker.snapshot()['owned']}")
    lines.append(f"sent: {[(e.type, e.subtask, e.attempt) for e in coord.sent][-30:]}")
    inbox = [(e.type, e.subtask, e.attempt) for e in coord.received if e.type != "Heartbeat"]
    lines.append(f"received: {inbox[-30:]}")
    for host in hosts:
        s = host.session
        if s is not None:
            lines.append(
                f"host {s.subtask}: {s.phase.value} attempt {s.attempt} owned {list(s.owned)} "
                f"applied {s.applied_seq} no_more {s.no_more_splits} counters {dict(s.counters)}"
            )
    return "\n".join(lines)


async def run_hosts(coord: InlineCoordinator, hosts: list[ReaderHost], timeout_s: float) -> list[int]:
    tasks = [asyncio.create_task(h.run()) for h in hosts]
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    if pending:
        report = describe(coord, hosts)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise AssertionError(f"reader hosts still running after {timeout_s} s:\n{report}")
    return [t.result() for t in tasks]


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
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


async def wait_for_text(log_path: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        content = log_path.read_text(errors="replace") if log_path.exists() else ""
        if text in content:
            return
        if proc.poll() is not None:
            raise AssertionError(f"reader exited with {proc.returncode} before logging {text!r}:\n{content[-3000:]}")
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {text!r} in {log_path} within {timeout_s} s:\n{log_path.read_text()[-3000:]}")


async def wait_exit(proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"reader still running after {timeout_s} s:\n{log_path.read_text()[-3000:]}")
        await asyncio.sleep(0.1)
    return proc.returncode


async def test_a_reader_killed_mid_run_restarts_from_its_checkpoint(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    await create_topics(kafka_bootstrap, unique_source, 2)
    first, restarted, other = (
        tmp_path / "r0.jsonl",
        tmp_path / "r0-restarted.jsonl",
        tmp_path / "r1.jsonl",
    )
    logs = [tmp_path / "r0.log", tmp_path / "r0-restarted.log", tmp_path / "r1.log"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        async with InlineCoordinator(kafka_bootstrap, unique_source, "sequence", SEQUENCE, max_parallelism=2) as coord:
            procs.append(start_reader(unique_source, 0, first, logs[0], kafka_bootstrap, rate=150))
            procs.append(start_reader(unique_source, 1, other, logs[2], kafka_bootstrap, rate=150))
            await wait_for_text(logs[0], "registered as attempt 1", procs[0], 30)
            # let it read and checkpoint for a while, then kill it without warning
            await wait_for_text(logs[0], "checkpoint 3:", procs[0], 30)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(10)
            assert values_in(first), "the killed reader wrote nothing"

            procs.append(start_reader(unique_source, 0, restarted, logs[1], kafka_bootstrap, rate=400))
            await wait_for_text(logs[1], "restored checkpoint", procs[2], 30)
            await wait_for_text(logs[1], "registered as attempt 2", procs[2], 30)
            assert await wait_exit(procs[2], logs[1], 40) == 0
            assert await wait_exit(procs[1], logs[2], 40) == 0

            # the restarted reader reported exactly what its killed predecessor last acknowledged
            # (in inbox order: the acks of subtask 0 before its second registration)
            inbox = coord.received
            second = [i for i, e in enumerate(inbox) if e.type == "ReaderRegistration" and e.subtask == 0]
            assert len(second) == 2
            acks = [e for e in inbox[: second[1]] if e.type == "CheckpointAck" and e.subtask == 0]
            assert acks
            reg, ack = inbox[second[1]].body, acks[-1].body
            assert isinstance(reg, ReaderRegistration) and isinstance(ack, CheckpointAck)
            assert reg.restored_checkpoint_id == ack.checkpoint_id
            first_attempt = [(e.type, e.body.to_json()) for e in inbox[: second[1]] if (e.subtask, e.attempt) == (0, 1)]
            assert {s["split_id"]: s for s in reg.reported_splits} == acknowledged_splits(first_attempt)
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


async def test_kafka_output_commits_data_with_the_checkpoint(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    out_topic = f"{unique_source}.out"
    await create_topics(kafka_bootstrap, unique_source, 2)
    await apply_topics(kafka_bootstrap, [TopicSpec(out_topic, 3)])
    async with InlineCoordinator(kafka_bootstrap, unique_source, "sequence", SEQUENCE, max_parallelism=2) as coord:
        hosts = [
            ReaderHost(
                dataclasses.replace(
                    settings(kafka_bootstrap, unique_source, k, tmp_path / "unused"),
                    output=OutputSpec.parse(f"kafka:{out_topic}", "envelope"),
                ),
                SequenceSource(SequenceOptions(splits=SPLITS, records_per_split=RECORDS_PER_SPLIT)),
            )
            for k in range(2)
        ]
        assert await run_hosts(coord, hosts, 40) == [0, 0]

    consumer = AIOKafkaConsumer(
        out_topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=None,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    counts: Counter[int] = Counter()
    try:
        deadline = time.monotonic() + 20
        while sum(counts.values()) < len(ALL_VALUES) and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    counts[orjson.loads(record.value)["value"]] += 1
    finally:
        await consumer.stop()
    assert set(counts) == ALL_VALUES and max(counts.values()) == 1


async def test_sigterm_even_sent_twice_at_once_leaves_with_positions_and_an_empty_state_record(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    await create_topics(kafka_bootstrap, unique_source, 1)
    log_path, out = tmp_path / "r.log", tmp_path / "r.jsonl"
    async with InlineCoordinator(
        kafka_bootstrap, unique_source, "sequence", {"splits": "4", "records_per_split": "unbounded"}, max_parallelism=1
    ) as coord:
        args = [
            *(sys.executable, "-m", "sluicegate.reader", "--source", unique_source),
            *("--subtask", "0", "--connector", "sequence", "--option", "splits=4"),
            *("--option", "records_per_split=unbounded", "--option", "rate=200"),
            *("--output", f"jsonl:{out}", "--checkpoint-interval-ms", "300"),
        ]
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, PYTHONUNBUFFERED="1")
        with log_path.open("ab") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            await wait_for_text(log_path, "checkpoint 2:", proc, 30)
            # twice, as timeout(1) sends it (to the process, then to its group): one stop. The
            # kernel merges two that come before the first is handled; these come after.
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            assert await wait_exit(proc, log_path, 20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
        assert "stopping at once" not in log_path.read_text()
        await coord.wait_until(lambda: bool(coord.received_of_type("ReaderLeaving", 0)), 10)
        leaving = coord.received_of_type("ReaderLeaving", 0)[-1].body
        assert isinstance(leaving, ReaderLeaving)
        assert sorted(s["split_id"] for s in leaving.splits) == [f"seq-{k:05d}" for k in range(4)]
        final_ack = coord.received_of_type("CheckpointAck", 0)[-1].body
        assert isinstance(final_ack, CheckpointAck)
        acknowledged = acknowledged_splits((e.type, e.body.to_json()) for e in coord.received if e.subtask == 0)
        assert {s["split_id"]: s for s in leaving.splits} == acknowledged, "it leaves at its last checkpoint"
        assert any(s["position"] > s["start"] for s in leaving.splits)
        assert coord.core.tracker.total_owned() == 0  # every split went back to the enumerator

    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, isolation_level="read_committed")
    await consumer.start()
    try:
        state_topic = ControlTopics.for_source(unique_source).reader_state
        raw = await read_latest_value(consumer, TopicPartition(state_topic, 0), b"0")
    finally:
        await consumer.stop()
    assert raw is not None
    state = ReaderCheckpoint.decode(raw)
    assert state.splits == [] and state.checkpoint_id >= 2
    assert "stopped:" in log_path.read_text()


async def test_a_rival_registration_stops_the_reader_and_bad_records_are_dead_lettered(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    await create_topics(kafka_bootstrap, unique_source, 1)
    topics = ControlTopics.for_source(unique_source)
    options = SequenceOptions(splits=SPLITS, records_per_split=RECORDS_PER_SPLIT, rate=RIVAL_RATE)
    out = tmp_path / "r.jsonl"
    async with InlineCoordinator(
        kafka_bootstrap, unique_source, "sequence", {**SEQUENCE, "rate": str(RIVAL_RATE)}, 1
    ) as coord:
        base = settings(kafka_bootstrap, unique_source, 0, out)
        host = ReaderHost(
            dataclasses.replace(base, options={**base.options, "rate": str(RIVAL_RATE)}),
            SequenceSource(options),
        )
        run = asyncio.create_task(host.run())
        await coord.wait_until(lambda: len(coord.received_of_type("CheckpointAck", 0)) >= 2, 30)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            # garbage on the reader's partition, then a rival incarnation of subtask 0
            await producer.send_and_wait(topics.readers, b"{not json", key=b"0", partition=0)
            rival = ReaderRegistration("rival", "elsewhere:1", [], None)
            env = envelope(rival, source=unique_source, subtask=0, attempt=None, epoch=1, ts=0)
            await producer.send_and_wait(topics.coordinator, encode(env), key=b"0")
        finally:
            await producer.stop()
        # another live incarnation registered: this reader is the duplicate and stops for
        # good (it does not register again, which would fence the rival, and so on)
        assert await asyncio.wait_for(run, 40) == EXIT_DUPLICATE
        assert coord.core.slots[0].attempt == 2  # us, then the rival; nobody after
        released = coord.sent_of_type("SplitsReleased", 0)
        fence = next(e.body.to_json() for e in released if e.body.to_json()["failed_attempt"] == 1)
        assert (fence["successor_incarnation"], fence["successor_location"]) == ("rival", "elsewhere:1")
    assert host.stats.fenced == 0 and host.stats.dead_letters == 1
    assert values_in(out)  # it read until it stopped

    consumer = AIOKafkaConsumer(
        topics.dead_letter,
        bootstrap_servers=kafka_bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=5000)
    finally:
        await consumer.stop()
    letters = [r for records in batches.values() for r in records]
    assert [r.value for r in letters] == [b"{not json"]
    headers = dict(letters[0].headers)
    assert headers["sluicegate.origin.topic"] == topics.readers.encode()
    assert headers["sluicegate.error.kind"] == b"malformed"


async def test_a_second_process_of_the_same_subtask_stops_the_first(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    await create_topics(kafka_bootstrap, unique_source, 1)
    options = SequenceOptions(splits=SPLITS, records_per_split=RECORDS_PER_SPLIT, rate=RIVAL_RATE)
    outs = [tmp_path / "zombie.jsonl", tmp_path / "successor.jsonl"]

    def make_host(out: Path) -> ReaderHost:
        base = settings(kafka_bootstrap, unique_source, 0, out)
        return ReaderHost(
            dataclasses.replace(base, options={**base.options, "rate": str(RIVAL_RATE)}),
            SequenceSource(options),
        )

    async with InlineCoordinator(
        kafka_bootstrap, unique_source, "sequence", {**SEQUENCE, "rate": str(RIVAL_RATE)}, 1
    ) as coord:
        zombie = make_host(outs[0])
        first = asyncio.create_task(zombie.run())
        await coord.wait_until(lambda: len(coord.received_of_type("CheckpointAck", 0)) >= 2, 30)
        successor = make_host(outs[1])
        second = asyncio.create_task(successor.run())
        # one of the two stops as the duplicate (normally the first: the second fenced its
        # producer and registered after it); the other reads the source to its end
        codes = sorted(await asyncio.wait_for(asyncio.gather(first, second), 60))
        assert codes == [EXIT_OK, EXIT_DUPLICATE]
        assert coord.core.slots[0].attempt >= 2
    assert set(values_in(*outs)) == ALL_VALUES
