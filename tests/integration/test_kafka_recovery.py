"""FLIP-537 with the ``kafka`` connector, over real Kafka and real processes: the cases of
docs/kafka.md ("Assignment, recovery"), each reading exactly once into ``kafka:OUT``
while a producer keeps writing to the input topic.

1. global restore: every reader stops and they start again together; the splits they
   report are redistributed over all readers (sticky: each partition at its owner);
2. partial failover: one reader restarts and gets its own splits back, the others are
   not disturbed;
3. splits assigned after the last checkpoint and never acknowledged go back to the
   enumerator before ``add_reader`` of the next attempt;
4. a reported split the coordinator gave to another subtask meanwhile is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from acks import acknowledged_splits
from confluent_kafka import Consumer, TopicPartition
from kafka_data import (
    BackgroundWriter,
    DataWriter,
    Expected,
    OutputReader,
    audit_ok,
    check_exactly_once,
    create_topic,
    hash_owner,
    kafka_options,
    of_type,
    procs,
    readers_messages,
    split_ids,
    start_coordinator,
    start_reader,
    wait_owned,
)
from processes import Proc, ProcessGroup

from sluicegate.audit.kafka_source import read_control_topics

__all__ = ["procs"]  # the fixture

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]

PARTITIONS = 8


def setup_topics(bootstrap: str, source: str, partitions: int = PARTITIONS) -> tuple[DataWriter, str]:
    data, out = f"{source}.in", f"{source}.out"
    create_topic(bootstrap, data, partitions)
    create_topic(bootstrap, out, 4)
    writer = DataWriter(bootstrap, data, partitions)
    writer.produce(500)
    writer.flush()
    return writer, out


def finish(output: OutputReader, background: BackgroundWriter, readers: Sequence[Proc]) -> Expected:
    """Stop writing, wait until OUT has every record, let the readers checkpoint a few
    more times (a late duplicate would show), and check the copy is exact."""
    expected = background.stop()
    output.wait_for(len(expected), 60, readers, "(waiting for the copy to catch up)")
    time.sleep(1.5)
    output.read_all()
    check_exactly_once(output.rows, expected)
    for reader in readers:
        assert reader.returncode is None, f"{reader.name} exited with {reader.returncode}:\n{reader.tail()}"
    return expected


def inbox_messages(bootstrap: str, source: str) -> list[dict[str, Any]]:
    import asyncio

    inbox, _ = asyncio.run(read_control_topics(bootstrap, source))
    return [orjson.loads(value) for _, value in inbox if value is not None]


def owners_after(messages: list[dict[str, Any]], cseq: int) -> dict[str, list[int]]:
    """split id -> the subtasks AddSplits gave it to after ``cseq``, in order."""
    out: dict[str, list[int]] = {}
    for m in of_type(messages, "AddSplits"):
        if m["cseq"] > cseq:
            for split_id in split_ids(m):
                out.setdefault(split_id, []).append(m["subtask"])
    return out


def positions_given(messages: list[dict[str, Any]], subtask: int, attempt: int) -> dict[str, int]:
    return {
        s["split_id"]: s["position"]
        for m in of_type(messages, "AddSplits", subtask)
        if m["attempt"] == attempt
        for s in m["body"]["splits"]
    }


# -- 1 ---------------------------------------------------------------------------------------


def test_global_restore_redistributes_the_reported_splits_over_all_readers(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """Two readers of four slots read all 8 partitions (the sticky owners 2 and 3 never
    came, so after the grace delay their partitions went to 0 and 1). Both are SIGKILLed
    and all four start together: 0 and 1 report 4 splits each, the coordinator hands
    them to the enumerator and the sticky assigner puts every partition at its owner,
    at the position of the reporting reader's checkpoint."""
    source = unique_source
    writer, out = setup_topics(kafka_bootstrap, source)
    topic = writer.topic
    owner = {f"{topic}-{p}": hash_owner(topic, p, 4) for p in range(PARTITIONS)}
    options = kafka_options(kafka_bootstrap, topics=topic, assignment_grace_ms="5000")
    start_coordinator(procs, source, 4, options, "--session-timeout-ms", "3000")
    background = BackgroundWriter(writer)
    output = OutputReader(kafka_bootstrap, out)
    try:
        first = [start_reader(procs, source, k, options, out) for k in (0, 1)]
        for reader in first:
            reader.wait_for_log("owning 4", timeout_s=60)
        for reader in first:  # a checkpoint after the last assignment
            reader.wait_for_log(": 4 splits, ", timeout_s=30)
        before = readers_messages(kafka_bootstrap, source)
        held = {k: set().union(*(split_ids(m) for m in of_type(before, "AddSplits", k))) for k in (0, 1)}
        assert held[0] | held[1] == set(owner) and not held[0] & held[1]
        assert {owner[s] for s in held[0] | held[1]} == {0, 1, 2, 3}, "set-up: 0 and 1 should hold 2's and 3's"
        for reader in first:
            reader.kill()

        readers = [start_reader(procs, source, k, options, out) for k in range(4)]
        for k, reader in enumerate(readers):
            reader.wait_for_log("owning 2", timeout_s=60)
            if k < 2:
                assert reader.lines_with("reported 4 restored splits"), reader.tail()
        finish(output, background, readers)
    finally:
        output.close()
        background.stop()

    messages = readers_messages(kafka_bootstrap, source)
    restart = min(m["cseq"] for m in of_type(messages, "ReaderRegistered") if m["body"]["attempt"] == 2)
    after = owners_after(messages, restart)
    assert {s: subtasks[-1] for s, subtasks in after.items()} == owner, "not every partition is at its sticky owner"
    assert all(len(subtasks) == 1 for subtasks in after.values()), after
    # each went out at the position of the last checkpoint of the reader that reported it
    inbox = inbox_messages(kafka_bootstrap, source)
    for k in (0, 1):
        first_attempt = [(m["type"], m["body"]) for m in inbox if m["subtask"] == k and m["attempt"] == 1]
        reported = {sid: s["position"] for sid, s in acknowledged_splits(first_attempt).items()}
        registration = [m for m in inbox if m["type"] == "ReaderRegistration" and m["subtask"] == k][-1]
        assert {s["split_id"]: s["position"] for s in registration["body"]["reported_splits"]} == reported
        for split_id, position in reported.items():
            given = positions_given(messages, owner[split_id], 1 if owner[split_id] >= 2 else 2)
            assert given[split_id] == position, (split_id, given, reported)
    # the records written after the restore were read by each partition's owner
    last: dict[str, tuple[int, int]] = {}
    for row in output.rows:
        value = row["value"]
        key = f"{value['topic']}-{value['partition']}"
        if value["offset"] >= last.get(key, (-1, 0))[0]:
            last[key] = (value["offset"], row["subtask"])
    assert {s: subtask for s, (_, subtask) in last.items()} == owner
    summary = audit_ok(kafka_bootstrap, source)
    assert {s.subtask: s.attempts for s in summary.subtasks} == {0: 2, 1: 2, 2: 1, 3: 1}
    assert summary.released_by_reason.get("recovery") == PARTITIONS


# -- 2 ---------------------------------------------------------------------------------------


def test_partial_failover_gives_a_restarted_reader_its_own_splits_back(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    source = unique_source
    writer, out = setup_topics(kafka_bootstrap, source)
    options = kafka_options(kafka_bootstrap, topics=writer.topic)
    start_coordinator(procs, source, 4, options, "--session-timeout-ms", "3000")
    background = BackgroundWriter(writer)
    output = OutputReader(kafka_bootstrap, out)
    victim = 1
    try:
        readers = [start_reader(procs, source, k, options, out) for k in range(4)]
        for reader in readers:
            reader.wait_for_log("got 2 splits (seq 1)", timeout_s=60)
        for reader in readers:
            reader.wait_for_log(": 2 splits, ", timeout_s=30)
        time.sleep(0.5)  # it reads on after its checkpoint: the kill loses uncommitted records
        readers[victim].kill()
        readers[victim] = start_reader(procs, source, victim, options, out)
        readers[victim].wait_for_log("got 2 splits (seq 2)", timeout_s=60)
        finish(output, background, readers)
    finally:
        output.close()
        background.stop()

    messages = readers_messages(kafka_bootstrap, source)
    own = positions_given(messages, victim, 1)
    again = positions_given(messages, victim, 2)
    assert set(again) == set(own), "the restarted reader did not get its own splits back"
    assert all(again[s] >= own[s] for s in own)
    kill = min(m["cseq"] for m in of_type(messages, "ReaderRegistered", victim) if m["body"]["attempt"] == 2)
    for k in (0, 2, 3):
        assert not [
            m for m in messages if m["subtask"] == k and m["cseq"] > kill and m["type"] != "WatermarkAnnouncement"
        ]
    for reader in readers:
        if reader is not readers[victim]:
            assert len(reader.lines_with("registering subtask")) == 1 and not reader.lines_with("fenced")
    summary = audit_ok(kafka_bootstrap, source)
    assert {s.subtask: s.attempts for s in summary.subtasks} == {0: 1, 1: 2, 2: 1, 3: 1}
    assert summary.assignments == PARTITIONS + 2


# -- 3 ---------------------------------------------------------------------------------------


def test_splits_never_acknowledged_go_back_to_the_enumerator_before_add_reader(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """Subtask 1 checkpoints only every 60 s: it reads and writes into OUT's open
    transaction, is SIGKILLed before its first checkpoint, and starts again. The
    registration fences attempt 1: its splits (seq 1, never acknowledged) are released
    before ReaderRegistered, and AddSplits gives them to attempt 2 at the positions
    they were first assigned with. Nothing attempt 1 wrote is committed."""
    source = unique_source
    writer, out = setup_topics(kafka_bootstrap, source, partitions=4)
    options = kafka_options(kafka_bootstrap, topics=writer.topic)
    start_coordinator(procs, source, 2, options, "--session-timeout-ms", "20000")  # the restart fences
    background = BackgroundWriter(writer, per_tick=20)
    output = OutputReader(kafka_bootstrap, out)
    try:
        steady = start_reader(procs, source, 0, options, out)
        slow = start_reader(
            procs, source, 1, options, out,
            "--checkpoint-interval-ms", "60000", "--heartbeat-interval-ms", "300",
        )  # fmt: skip
        slow.wait_for_log("got 2 splits (seq 1)", timeout_s=60)
        wait_uncommitted_rows(kafka_bootstrap, out, subtask=1, timeout_s=30)
        slow.kill()
        assert not slow.lines_with("checkpoint 1:")
        restarted = start_reader(procs, source, 1, options, out)
        restarted.wait_for_log("got 2 splits (seq 2)", timeout_s=60)
        finish(output, background, [steady, restarted])
    finally:
        output.close()
        background.stop()

    messages = readers_messages(kafka_bootstrap, source)
    first = positions_given(messages, 1, 1)
    assert len(first) == 2
    registered = next(m for m in of_type(messages, "ReaderRegistered", 1) if m["body"]["attempt"] == 2)
    released = [m for m in of_type(messages, "SplitsReleased", 1) if m["body"]["failed_attempt"] == 1]
    assert len(released) == 1 and released[0]["body"]["reason"] == "fenced", released
    assert split_ids(released[0]) == set(first)
    assert registered["body"]["dropped_split_ids"] == []  # it restored nothing
    given = [m for m in of_type(messages, "AddSplits", 1) if m["attempt"] == 2]
    assert released[0]["cseq"] < registered["cseq"] < given[0]["cseq"]
    assert positions_given(messages, 1, 2) == first, "not given back at the positions first assigned"
    inbox = inbox_messages(kafka_bootstrap, source)
    assert not [m for m in inbox if m["type"] == "CheckpointAck" and m["subtask"] == 1 and m["attempt"] == 1]
    summary = audit_ok(kafka_bootstrap, source)
    assert summary.released_by_reason.get("fenced") == 2


def wait_uncommitted_rows(bootstrap: str, topic: str, subtask: int, timeout_s: float) -> None:
    """Wait until OUT holds records of ``subtask`` in an open transaction (read_uncommitted)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sluicegate-test-unused",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.2):
                if message.error() is None and orjson.loads(message.value())["subtask"] == subtask:
                    return
        raise AssertionError(f"no uncommitted record of subtask {subtask} in {topic} within {timeout_s} s")
    finally:
        consumer.close()


# -- 4 ---------------------------------------------------------------------------------------


def test_a_reported_split_now_owned_elsewhere_is_dropped(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """A reader with checkpointed splits is SIGKILLed; its slot departs (session timeout
    3 s, departure 3 s) and after the grace delay the other reader gets its splits. The
    killed reader then starts again and reports them: ReaderRegistered tells it to drop
    them, so it does not read them while their new owner does; they come back to it
    (sticky: its own slot) only cooperatively, once their new owner has given them back
    (v3), and the copy is exact."""
    source = unique_source
    writer, out = setup_topics(kafka_bootstrap, source, partitions=4)
    options = kafka_options(kafka_bootstrap, topics=writer.topic, assignment_grace_ms="1000")
    timeouts = ("--session-timeout-ms", "3000", "--reader-departure-timeout-ms", "3000")
    start_coordinator(procs, source, 2, options, *timeouts)
    background = BackgroundWriter(writer, per_tick=20)
    output = OutputReader(kafka_bootstrap, out)
    try:
        readers = {k: start_reader(procs, source, k, options, out) for k in range(2)}
        for reader in readers.values():
            reader.wait_for_log("registered as attempt 1", timeout_s=60)
        # each partition at its own slot (sticky), also when reader 1 registered after the
        # grace delay and reader 0 read its partitions first (then they move back)
        homes = {f"{writer.topic}-{p}": hash_owner(writer.topic, p, 2) for p in range(4)}
        held = {k: {sid for sid, home in homes.items() if home == k} for k in range(2)}
        wait_owned(kafka_bootstrap, source, {k: len(ids) for k, ids in held.items() if ids}, readers.values())
        messages = readers_messages(kafka_bootstrap, source)
        victim = max(held, key=lambda k: (len(held[k]), -k))
        survivor = 1 - victim
        next_seq = len(of_type(messages, "AddSplits", survivor)) + 1
        readers[victim].wait_for_log(f": {len(held[victim])} splits, ", timeout_s=30)
        readers[victim].kill()
        readers[survivor].wait_for_log(f"got {len(held[victim])} splits (seq {next_seq})", timeout_s=30)
        restarted = start_reader(procs, source, victim, options, out)
        restarted.wait_for_log("registered as attempt 2", timeout_s=60)
        assert restarted.lines_with(f"reported {len(held[victim])} restored splits"), restarted.tail()
        restarted.wait_for_log(f"got {len(held[victim])} splits (seq ", timeout_s=30)
        finish(output, background, [readers[survivor], restarted])
    finally:
        output.close()
        background.stop()

    messages = readers_messages(kafka_bootstrap, source)
    registered = next(m for m in of_type(messages, "ReaderRegistered", victim) if m["body"]["attempt"] == 2)
    assert set(registered["body"]["dropped_split_ids"]) == held[victim]
    departed = [m for m in of_type(messages, "SplitsReleased", victim) if m["body"]["reason"] == "departed"]
    assert len(departed) == 1 and split_ids(departed[0]) == held[victim]
    moved = owners_after(messages, departed[0]["cseq"])
    assert moved == {s: [survivor, victim] for s in held[victim]}, moved
    back = [m for m in of_type(messages, "SplitsReleased", survivor) if m["cseq"] > departed[0]["cseq"]]
    assert [(m["body"]["reason"], split_ids(m)) for m in back] == [("returned", held[victim])]
    (given,) = [m for m in of_type(messages, "AddSplits", victim) if m["attempt"] == 2]
    assert split_ids(given) == held[victim] and given["cseq"] > back[0]["cseq"]
    summary = audit_ok(kafka_bootstrap, source)
    assert {s.subtask: s.attempts for s in summary.subtasks} == {victim: 2, survivor: 1}
