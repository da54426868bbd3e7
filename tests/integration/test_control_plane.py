"""The control plane end to end: a coordinator process, reader processes, raw records
on the topics, SIGKILLs. The audit (``run_audit``) is the oracle of every test, and
every test also checks what the readers wrote.

Timeouts are short so that failures show within seconds: session 3 s (coordinator
and readers), reader departure 5 s, reader checkpoints every 500 ms.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from processes import (
    ProcessGroup,
    output_records,
    poll_until,
    read_topic,
    readers_messages,
    value_counts,
)

from sluicegate.audit import AuditSummary, SubtaskSummary
from sluicegate.audit.commands import run_audit
from sluicegate.audit.kafka_source import MissingTopicsError
from sluicegate.protocol import (
    CheckpointAck,
    Heartbeat,
    ReaderRegistration,
    SplitsFinished,
    encode,
    envelope,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

COORDINATOR_TIMEOUTS = ("--session-timeout-ms", "3000", "--reader-departure-timeout-ms", "5000")
READER_TIMING = ("--checkpoint-interval-ms", "500", "--heartbeat-interval-ms", "500", "--session-timeout-ms", "3000")


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        yield group
    finally:
        group.stop_all()


async def audit_ok(bootstrap: str, source: str) -> AuditSummary:
    result = await run_audit(bootstrap, source)
    assert result.ok, "the audit found violations:\n" + "\n".join(map(str, result.violations[:10]))
    return result.summary


def subtask_summaries(summary: AuditSummary) -> dict[int, SubtaskSummary]:
    """The audit's per-subtask summaries (of the subtasks that ever registered)."""
    return {s.subtask: s for s in summary.subtasks}


def of_type(messages: list[dict[str, Any]], type_: str, subtask: int | None = None) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] == type_ and (subtask is None or m["subtask"] == subtask)]


def split_ids(message: dict[str, Any]) -> set[str]:
    body = message["body"]
    return {s["split_id"] for s in body["splits"]} if "splits" in body else set(body["split_ids"])


def assigned_after(messages: list[dict[str, Any]], cseq: int, split_id: str) -> list[int]:
    """Subtasks that AddSplits gave ``split_id`` to after the record with ``cseq``."""
    return [m["subtask"] for m in of_type(messages, "AddSplits") if m["cseq"] > cseq and split_id in split_ids(m)]


async def produce(bootstrap: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    return producer


async def send_inbox(producer: AIOKafkaProducer, source: str, key: bytes, value: bytes) -> int:
    """Write one raw record to NS.S.coordinator; its offset."""
    meta = await producer.send_and_wait(f"sluicegate.{source}.coordinator", value, key=key, partition=0)
    return int(meta.offset)


# -- 1 --------------------------------------------------------------------------------


async def test_four_readers_share_200_splits_each_assigned_exactly_once(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    splits, per_split = 200, 100
    options = {"splits": str(splits), "records_per_split": str(per_split)}
    procs.coordinator(unique_source, 4, options, *COORDINATOR_TIMEOUTS)
    outs = [tmp_path / f"reader-{k}.jsonl" for k in range(4)]
    readers = [procs.reader(unique_source, k, options, outs[k], *READER_TIMING) for k in range(4)]
    codes = [await reader.wait_async(60) for reader in readers]
    assert codes == [0, 0, 0, 0], procs.describe()

    counts = value_counts(*outs)
    assert set(counts) == set(range(splits * per_split))
    assert max(counts.values()) == 1, "a value was written twice without any failure"

    summary = await audit_ok(kafka_bootstrap, unique_source)
    assert summary.splits_assigned == splits
    assert summary.assignments == splits, "a split was assigned more than once"
    assert summary.splits_finished == splits
    assert summary.splits_owned == 0
    # (a Heartbeat racing the final ReaderLeaving may be fenced: harmless, so not checked)
    assert summary.released_by_reason.get("session-timeout", 0) == 0
    assert {k: s.attempts for k, s in subtask_summaries(summary).items()} == {0: 1, 1: 1, 2: 1, 3: 1}

    # The same, read off NS.S.readers: every split in exactly one AddSplits, and each
    # reader wrote exactly the splits it was given.
    messages = await readers_messages(kafka_bootstrap, unique_source)
    given = Counter(sid for m in of_type(messages, "AddSplits") for sid in split_ids(m))
    assert len(given) == splits and set(given.values()) == {1}
    assert not [m for m in of_type(messages, "SplitsReleased") if m["body"]["failed_attempt"] is not None]
    for k, out in enumerate(outs):  # (a reader that registers last may find nothing left)
        records = output_records(out)
        assert {r["subtask"] for r in records} <= {k}
        mine = set().union(*(split_ids(m) for m in of_type(messages, "AddSplits", k)))
        assert {r["split_id"] for r in records} == mine
    assert len(of_type(messages, "NoMoreSplits")) == 4


# -- 2 --------------------------------------------------------------------------------


async def test_a_killed_reader_s_splits_are_released_and_read_by_the_others(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """Subtask 0 (the victim) holds a checkpointed split (seq 1) and uncheckpointed ones
    (seq 2) when it is SIGKILLed. To get there deterministically: subtasks 1, 2, 3 take
    the fair share ceil(13/4) = 4 splits each, so the victim gets the last one (seq 1) and
    checkpoints it; then subtask 3 leaves gracefully and the victim, owning fewer than the
    fair share, gets some of its splits (seq 2). The victim checkpoints only every 3 s, so
    it is killed before it acknowledges seq 2."""
    splits, per_split = 13, 200
    # no cooperative rebalancing: the set-up needs the victim to get its seq 2 from the leaver;
    # a grace delay longer than four reader processes take to start on a loaded machine: once
    # it is over, the share divides by the live readers and the victim's split goes to another
    options = {
        "splits": str(splits),
        "records_per_split": str(per_split),
        "assignment_rebalance": "false",
        "assignment_grace_ms": "30000",
    }
    procs.coordinator(unique_source, 4, options, *COORDINATOR_TIMEOUTS)
    outs = {k: tmp_path / f"reader-{k}.jsonl" for k in range(4)}
    # slow enough that few splits finish during the set-up (~8 s), which would shrink the fair share
    rates = {1: "50", 2: "50", 3: "30"}
    steady = {k: procs.reader(unique_source, k, {**options, "rate": rates[k]}, outs[k], *READER_TIMING) for k in rates}
    for reader in steady.values():
        await reader.wait_for_log_async("registered as attempt 1", timeout_s=30)
    victim = procs.reader(
        unique_source, 0, {**options, "rate": "20"}, outs[0],
        "--checkpoint-interval-ms", "3000", "--heartbeat-interval-ms", "500", "--session-timeout-ms", "3000",
    )  # fmt: skip
    await victim.wait_for_log_async("got 1 splits (seq 1)", timeout_s=30)
    await victim.wait_for_log_async("applied seq 1", timeout_s=10)  # its first checkpoint; the next is 3 s away
    leaver = steady.pop(3)
    leaver.request_stop()
    await victim.wait_for_log_async("(seq 2)", timeout_s=10, poll_s=0.02)
    victim.kill()
    killed_at_ms = int(time.time() * 1000)
    assert not victim.lines_with("applied seq 2"), "set-up: the victim acknowledged seq 2 before it was killed"
    assert await leaver.wait_async(20) == 0, leaver.tail()
    codes = [await reader.wait_async(60) for reader in steady.values()]
    assert codes == [0, 0], procs.describe()

    messages = await readers_messages(kafka_bootstrap, unique_source)
    victim_adds = {m["body"]["seq"]: split_ids(m) for m in of_type(messages, "AddSplits", 0)}
    assert sorted(victim_adds) == [1, 2]
    checkpointed, uncheckpointed = victim_adds[1], victim_adds[2]
    assert len(checkpointed) == 1 and uncheckpointed

    releases = of_type(messages, "SplitsReleased", 0)
    timed_out = [m for m in releases if m["body"]["reason"] == "session-timeout"]
    assert len(timed_out) == 1, releases
    failure = timed_out[0]
    assert failure["body"]["failed_attempt"] == 1
    assert split_ids(failure) == uncheckpointed, "the session timeout must release exactly the uncheckpointed splits"
    # the last heartbeat was sent at most one heartbeat interval before the kill
    assert failure["ts"] >= killed_at_ms + 3000 - 600
    departed = [m for m in releases if m["body"]["reason"] == "departed"]
    assert len(departed) == 1, releases
    assert split_ids(departed[0]) == checkpointed, "the departure must release the checkpointed splits"
    assert departed[0]["ts"] - failure["ts"] >= 5000
    for release in (failure, departed[0]):
        for split_id in split_ids(release):
            owners = assigned_after(messages, release["cseq"], split_id)
            assert owners and set(owners) <= {1, 2}, f"{split_id} went to {owners} after {release['body']}"
    assert not [m for m in of_type(messages, "AddSplits", 0) if m["cseq"] > failure["cseq"]]

    records = output_records(*outs.values())
    counts = Counter(r["value"] for r in records)
    assert set(counts) == set(range(splits * per_split))
    repeated_in = {r["split_id"] for r in records if counts[r["value"]] > 1}
    assert repeated_in <= checkpointed | uncheckpointed, f"values repeated outside the victim's splits: {repeated_in}"

    summary = await audit_ok(kafka_bootstrap, unique_source)
    assert summary.splits_finished == splits and summary.splits_owned == 0
    victim_summary = subtask_summaries(summary)[0]
    assert victim_summary.attempts == 1 and victim_summary.finished == 0
    # (counted in splits)
    assert summary.released_by_reason.get("session-timeout") == len(uncheckpointed)
    assert summary.released_by_reason.get("departed") == len(checkpointed)


# -- 3 --------------------------------------------------------------------------------


async def test_re_registration_fences_the_old_attempt(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """3 splits, 2 subtasks (fair share 2): attempt 1 gets seq-0 and seq-1; fenced, they go back
    behind seq-2, and attempt 2 gets seq-2 and seq-0. So seq-0 was given to attempt 1 and
    is owned by attempt 2 when attempt 1's stale SplitsFinished for it arrives."""
    splits, per_split = 3, 50
    options = {"splits": str(splits), "records_per_split": str(per_split)}
    procs.coordinator(unique_source, 2, options, *COORDINATOR_TIMEOUTS)
    src = unique_source

    async def registered(incarnation: str) -> dict[str, Any] | None:
        found = [
            m
            for m in of_type(await readers_messages(kafka_bootstrap, src), "ReaderRegistered", 0)
            if m["body"]["incarnation"] == incarnation
        ]
        return found[0] if found else None

    def registration(incarnation: str) -> bytes:
        body = ReaderRegistration(
            incarnation=incarnation, location="raw-test", reported_splits=[], restored_checkpoint_id=None
        )
        return encode(envelope(body, source=src, subtask=0, attempt=None, epoch=0, ts=int(time.time() * 1000)))

    def from_attempt(attempt: int, body: Any) -> bytes:
        return encode(envelope(body, source=src, subtask=0, attempt=attempt, epoch=1, ts=int(time.time() * 1000)))

    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    producer = await produce(kafka_bootstrap)
    try:
        await send_inbox(producer, src, b"0", registration(first))
        first_registered = await poll_until(lambda: registered(first), 20, "ReaderRegistered of the first incarnation")
        await send_inbox(producer, src, b"0", registration(second))
        second_registered = await poll_until(lambda: registered(second), 20, "ReaderRegistered of the second")
        assert (first_registered["body"]["attempt"], second_registered["body"]["attempt"]) == (1, 2)

        messages = await readers_messages(kafka_bootstrap, src)
        to_first = [m for m in of_type(messages, "AddSplits", 0) if m["attempt"] == 1]
        assert to_first, "the first attempt was given no splits"
        given_first = split_ids(to_first[0])
        fenced = [m for m in of_type(messages, "SplitsReleased", 0) if m["body"]["reason"] == "fenced"]
        assert len(fenced) == 1 and fenced[0]["body"]["failed_attempt"] == 1
        assert split_ids(fenced[0]) == given_first  # never acknowledged: all of them go back
        to_second = [m for m in of_type(messages, "AddSplits", 0) if m["attempt"] == 2]
        assert to_second and to_second[0]["cseq"] > fenced[0]["cseq"]
        both = given_first & split_ids(to_second[0])
        assert both, "set-up: no split was given to both attempts"
        target = sorted(both)[0]

        # The old attempt reports the split finished and acknowledges a checkpoint: fenced, no effect.
        stale = [
            await send_inbox(producer, src, b"0", from_attempt(1, SplitsFinished(split_ids=[target]))),
            await send_inbox(producer, src, b"0", from_attempt(1, CheckpointAck(1, to_first[0]["body"]["seq"], []))),
        ]
    finally:
        await producer.stop()

    summary = await audit_ok(kafka_bootstrap, src)
    assert summary.fenced_messages >= 2
    assert summary.splits_finished == 0
    raw_subtask = subtask_summaries(summary)[0]
    assert raw_subtask.attempts == 2 and raw_subtask.finished == 0

    # The coordinator agrees: when the silent second attempt times out, the target is still
    # owned by it (it was not finished) and goes back to the enumerator, after the stale records.
    async def second_timed_out() -> dict[str, Any] | None:
        found = [
            m
            for m in of_type(await readers_messages(kafka_bootstrap, src), "SplitsReleased", 0)
            if m["body"]["failed_attempt"] == 2
        ]
        return found[0] if found else None

    timed_out = await poll_until(second_timed_out, 20, "the session timeout of attempt 2")
    assert timed_out["body"]["reason"] == "session-timeout"
    assert target in split_ids(timed_out)
    assert timed_out["inbox_offset"] >= max(stale)

    # A real reader for subtask 1 then reads every split, the target included.
    out = tmp_path / "reader-1.jsonl"
    reader = procs.reader(src, 1, options, out, *READER_TIMING)
    assert await reader.wait_async(60) == 0, reader.tail()
    counts = value_counts(out)
    assert set(counts) == set(range(splits * per_split)) and max(counts.values()) == 1
    assert target in {r["split_id"] for r in output_records(out)}
    summary = await audit_ok(kafka_bootstrap, src)
    assert summary.splits_finished == splits
    assert {k: s.finished for k, s in subtask_summaries(summary).items()} == {0: 0, 1: splits}


# -- 4 --------------------------------------------------------------------------------


async def test_bad_inbox_records_are_dead_lettered_and_the_coordinator_goes_on(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    splits, per_split = 6, 50
    options = {"splits": str(splits), "records_per_split": str(per_split)}
    procs.coordinator(unique_source, 2, options, *COORDINATOR_TIMEOUTS)
    src = unique_source

    def raw(**changes: Any) -> bytes:
        valid = envelope(Heartbeat(watermark=None, idle=True), source=src, subtask=0, attempt=1, epoch=1, ts=1)
        return orjson.dumps({**valid.to_json(), **changes})

    outside = ReaderRegistration(
        incarnation=str(uuid.uuid4()), location="x", reported_splits=[], restored_checkpoint_id=None
    )
    bad = {
        "malformed": b'{"v": 2, "type": "Heartbeat", ',
        "unknown-type": raw(type="Gossip"),
        "unknown-version": raw(v=99),
        "schema": raw(body={"watermark": "noon"}),
        "rejected": encode(envelope(outside, source=src, subtask=2, attempt=None, epoch=0, ts=1)),
    }
    producer = await produce(kafka_bootstrap)
    try:
        offsets = {kind: await send_inbox(producer, src, b"0", value) for kind, value in bad.items()}
    finally:
        await producer.stop()

    async def dead_letters() -> list[Any] | None:
        records = await read_topic(kafka_bootstrap, f"sluicegate.{src}.dead-letter")
        return records if len(records) >= len(bad) else None

    letters = await poll_until(dead_letters, 30, "five dead letters")
    assert len(letters) == len(bad)
    by_offset = {int(r.headers["sluicegate.origin.offset"]): r for r in letters}
    assert set(by_offset) == set(offsets.values())
    for kind, offset in offsets.items():
        letter = by_offset[offset]
        assert letter.headers["sluicegate.error.kind"] == kind.encode(), (kind, letter.headers)
        assert letter.headers["sluicegate.origin.topic"] == f"sluicegate.{src}.coordinator".encode()
        assert letter.headers["sluicegate.origin.partition"] == b"0"
        assert letter.value == bad[kind] and letter.key == b"0"
    assert b"max_parallelism" in by_offset[offsets["rejected"]].headers["sluicegate.error.reason"]

    # Still serving: new registrations are answered and the source is read to the end.
    outs = [tmp_path / f"reader-{k}.jsonl" for k in range(2)]
    readers = [procs.reader(src, k, options, outs[k], *READER_TIMING) for k in range(2)]
    assert [await r.wait_async(60) for r in readers] == [0, 0], procs.describe()
    messages = await readers_messages(kafka_bootstrap, src)
    assert sorted(m["subtask"] for m in of_type(messages, "ReaderRegistered")) == [0, 1]
    assert min(m["inbox_offset"] for m in of_type(messages, "ReaderRegistered")) > max(offsets.values())
    counts = value_counts(*outs)
    assert set(counts) == set(range(splits * per_split)) and max(counts.values()) == 1

    summary = await audit_ok(kafka_bootstrap, src)
    assert summary.undecodable_total == 4
    assert summary.rejected_messages == 1
    assert summary.splits_finished == splits


# -- 5 --------------------------------------------------------------------------------


async def test_bad_settings_fail_at_start_up_naming_the_setting(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    src = unique_source
    good = {"splits": "4", "records_per_split": "10"}
    out = tmp_path / "never.jsonl"
    no_bootstrap = ("KAFKA_BOOTSTRAP_SERVERS",)
    cases: list[tuple[str, list[str], tuple[str, ...]]] = [
        ("max_parallelism", procs.coordinator_args(src, 0, good), ()),
        ("splits", procs.coordinator_args(src, 2, {**good, "splits": "abc"}), ()),
        ("connector", ["coordinator", "--source", src, "--connector", "no-such", "--max-parallelism", "2"], ()),
        ("--output", procs.reader_args(src, 0, good, "nowhere:x"), ()),
        ("KAFKA_BOOTSTRAP_SERVERS", procs.coordinator_args(src, 2, good), no_bootstrap),
        ("KAFKA_BOOTSTRAP_SERVERS", procs.reader_args(src, 0, good, out), no_bootstrap),
    ]
    started = [
        (setting, procs.start(f"bad-{i}", args, without_env=without))
        for i, (setting, args, without) in enumerate(cases)
    ]
    for setting, proc in started:
        code = await proc.wait_async(60)
        log = proc.log()
        assert code == 2, f"{proc.args}: exit {code}\n{log}"
        assert setting in log, f"{proc.args}: the error does not name {setting}:\n{log}"
        assert "invalid setting" in log and "Traceback" not in log, log

    # Nothing was started: no topics (the audit has nothing to read), no output.
    with pytest.raises(MissingTopicsError):
        await run_audit(kafka_bootstrap, src)
    assert not out.exists()


# -- 6 --------------------------------------------------------------------------------


async def test_a_coordinator_killed_mid_run_is_succeeded_without_resetting_readers(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """Three subtasks, two readers: each takes ceil(12/3) = 4 splits at once, and the
    4 left over are handed out on RequestSplit, by the successor."""
    splits, per_split = 12, 200
    # no cooperative rebalancing: each split is to be assigned exactly once
    options = {"splits": str(splits), "records_per_split": str(per_split), "assignment_rebalance": "false"}
    coordinator_args = (unique_source, 3, options, *COORDINATOR_TIMEOUTS)
    first = procs.coordinator(*coordinator_args)
    assert "epoch 1" in first.lines_with("is serving")[0]
    outs = [tmp_path / f"reader-{k}.jsonl" for k in range(2)]
    readers = [procs.reader(unique_source, k, {**options, "rate": "100"}, outs[k], *READER_TIMING) for k in range(2)]
    for reader in readers:
        await reader.wait_for_log_async("checkpoint 1:", timeout_s=30)
    first.kill()
    successor = procs.coordinator(*coordinator_args)
    assert "epoch 2" in successor.lines_with("is serving")[0], successor.tail()
    assert [r.returncode for r in readers] == [None, None], "a reader stopped while the coordinator was away"
    assert [await r.wait_async(60) for r in readers] == [0, 0], procs.describe()

    for reader in readers:
        assert len(reader.lines_with("registering subtask")) == 1, reader.tail()
        assert not reader.lines_with("fenced"), reader.tail()
    counts = value_counts(*outs)
    assert set(counts) == set(range(splits * per_split))
    assert max(counts.values()) == 1, "a reader was reset"

    summary = await audit_ok(kafka_bootstrap, unique_source)
    assert summary.epochs == [1, 2]
    assert {k: s.attempts for k, s in subtask_summaries(summary).items()} == {0: 1, 1: 1}
    assert summary.splits_assigned == splits and summary.assignments == splits
    assert summary.splits_finished == splits
    messages = await readers_messages(kafka_bootstrap, unique_source)
    assert {m["epoch"] for m in of_type(messages, "ReaderRegistered")} == {1}
    assert [m for m in of_type(messages, "AddSplits") if m["epoch"] == 2], "the successor assigned nothing"
    assert {m["epoch"] for m in of_type(messages, "NoMoreSplits")} == {2}
