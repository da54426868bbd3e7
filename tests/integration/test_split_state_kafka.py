"""A stateful function's per-split state over real Kafka and real processes
(reader/split_state.py): saved with each checkpoint, restored after a SIGKILL, handed to
the next owner of a split when it moves, and never counted twice; with issue 20's fault
scenario (reader and coordinator SIGKILLs, readers joining and leaving).

The function (record_functions.counted_envelope) writes each record as the exactly-once
checks' envelope plus ``seen``: how many records of its split it has seen, kept in the
split's state. Whoever reads a partition and however often readers die, the n-th record
of a partition must say ``seen == n``; a state lost restarts the count, a state applied
twice skips ahead.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from kafka_data import (
    LiveCopy,
    audit_ok,
    create_topic,
    hash_owner,
    kafka_options,
    owned_by_subtask,
    start_coordinator,
    start_reader,
    stop_readers,
    wait_owned,
)
from processes import ProcessGroup
from test_cooperative_rebalancing import GRACE_MS, KAFKA_PARTITIONS

from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol.topics import DEFAULT_NAMESPACE, ControlTopics, topic_specs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

SLOTS = 4
FUNCTION = "counted_envelope"


def check_counts(rows: list[dict[str, Any]]) -> None:
    """In each partition, the record at rank n (by offset) says ``seen == n``."""
    by_split: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        by_split[row["split_id"]].append((row["value"]["offset"], row["seen"]))
    wrong = []
    for split_id, seen in sorted(by_split.items()):
        counts = [n for _, n in sorted(seen)]
        expected = list(range(1, len(counts) + 1))
        if counts != expected:
            first = next(i for i, (a, b) in enumerate(zip(counts, expected, strict=True)) if a != b)
            wrong.append(f"{split_id}: record {first + 1} says seen={counts[first]}")
    assert not wrong, "a split's state was lost or applied twice:\n" + "\n".join(wrong)


def test_a_stateful_copy_is_exact_through_kills_and_readers_joining_and_leaving(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """8 partitions, 4 slots, a producer writing all along, each step while the copy runs:

    1. readers 0 and 1 take every partition;
    2. reader 1 is SIGKILLed and started again: its splits come back with their states;
    3. the coordinator is SIGKILLed and another one started: the readers go on;
    4. readers 2 and 3 join: the partitions of their slots move to them, each with the
       state its old owner saved with the checkpoint that gave it back;
    5. reader 0 leaves (SIGTERM): its partitions go to the others with their states.

    OUT holds the function of every input record exactly once, every count is right, and
    the audit is clean."""
    source = unique_source
    copy = LiveCopy(procs, kafka_bootstrap, source, slots=SLOTS, partitions=KAFKA_PARTITIONS, grace_ms=GRACE_MS)
    data, out, options, output = copy.data, copy.out, copy.options, copy.output

    def copy_goes_on(what: str) -> None:
        output.wait_for(len(output.rows) + KAFKA_PARTITIONS * 200, 60, list(readers.values()), f"({what})")

    try:
        readers = {k: start_reader(procs, source, k, options, out, process=FUNCTION) for k in (0, 1)}
        assert wait_owned(kafka_bootstrap, source, {0: 4, 1: 4}, readers.values()) == {0, 1}
        copy_goes_on("two readers")

        readers[1].kill()
        readers[1] = start_reader(procs, source, 1, options, out, process=FUNCTION)
        readers[1].wait_for_log("registered as attempt", timeout_s=60)
        copy_goes_on("after the reader's kill")

        copy.coordinator.kill()
        start_coordinator(procs, source, SLOTS, options)
        copy_goes_on("after the coordinator's kill")

        readers.update({k: start_reader(procs, source, k, options, out, process=FUNCTION) for k in (2, 3)})
        homes = {f"{data}-{p}": hash_owner(data, p, SLOTS) for p in range(KAFKA_PARTITIONS)}
        wait_owned(kafka_bootstrap, source, Counter(homes.values()), readers.values())
        copy_goes_on("after two readers joined")

        leaving = readers.pop(0)
        leaving.request_stop()
        assert leaving.wait(30) == 0, leaving.tail()
        wait_for_every_split_owned(kafka_bootstrap, source, set(readers))
        copy_goes_on("after reader 0 left")

        rows = copy.finish(list(readers.values()))
    finally:
        copy.close()
    check_counts(rows)
    assert {hash_owner(data, p, SLOTS) for p in range(KAFKA_PARTITIONS)} & {2, 3}, "nothing moved to 2 or 3"
    stop_readers(list(readers.values()), procs)
    summary = audit_ok(kafka_bootstrap, source)
    assert len(summary.epochs) >= 2, f"the second coordinator served at a new epoch: {summary.epochs}"


def wait_for_every_split_owned(bootstrap: str, source: str, subtasks: set[int]) -> None:
    """Until the 8 partitions are owned by ``subtasks`` only (as the control topics say)."""
    deadline = time.monotonic() + 30
    owned: dict[int, int] = {}
    while time.monotonic() < deadline:
        owned = asyncio.run(owned_by_subtask(bootstrap, source))
        if sum(owned.values()) == KAFKA_PARTITIONS and set(owned) <= subtasks:
            return
        time.sleep(0.3)
    raise AssertionError(f"ownership {owned}: not every partition went to {sorted(subtasks)}")


def test_a_stateful_reader_of_a_source_without_the_split_state_topic_says_which(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """A source set up before the split-state topic existed (its other control topics
    are there): a stateful reader waits for it and then stops, naming it."""
    source, data, out = unique_source, f"{unique_source}.in", f"{unique_source}.out"
    create_topic(kafka_bootstrap, data, 2)
    create_topic(kafka_bootstrap, out, 2)
    older = [spec for spec in topic_specs(DEFAULT_NAMESPACE, source, 1) if spec.role != "split_state"]
    asyncio.run(apply_topics(kafka_bootstrap, older))
    options = kafka_options(kafka_bootstrap, topics=data, stopping_offsets="latest")
    reader = start_reader(procs, source, 0, options, out, "--topic-wait-timeout-s", "3", process=FUNCTION)
    assert reader.wait(60) == 2, reader.tail()
    assert ControlTopics.for_source(source).split_state in reader.log(), reader.tail()
