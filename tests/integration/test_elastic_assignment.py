"""Fewer readers than slots, over real Kafka and real processes: a coordinator for an
unbounded ``sequence`` source of 8 splits and 4 subtask slots, and reader processes
for subtasks 0 and 1 only. Whatever the assigner, the splits that wait for slots 2
and 3 go to the two live readers once ``assignment_grace_ms`` (2 s) has passed: all
8 splits are assigned, each once, and read. (Before the assigners, the sequence
enumerator's fair share ceil(8/4) = 2 per reader left 4 splits unread for as long as
slots 2 and 3 had no reader.) The audit is the oracle; the coordinator's own topics
show that it goes quiet once both readers have left.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import ProcessGroup, output_records, poll_until, read_topic, readers_messages

from sluicegate.audit.commands import run_audit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

SPLITS = 8
SLOTS = 4
GRACE_MS = 5_000
"""Longer than two reader processes started together may take between their registrations
on a loaded machine: a reader later than the delay finds its splits with the other one."""
ALL_SPLIT_IDS = {f"seq-{k:05d}" for k in range(SPLITS)}
# (session timeouts stay at their 10 s default: no reader fails here, even on a loaded machine)
READER_TIMING = ("--checkpoint-interval-ms", "500", "--heartbeat-interval-ms", "500")


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        yield group
    finally:
        group.stop_all()


def add_splits(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] == "AddSplits"]


def split_ids_read(*outs: Path) -> dict[int, set[str]]:
    """subtask -> the split ids it wrote records of."""
    read: dict[int, set[str]] = {}
    for record in output_records(*outs):
        read.setdefault(record["subtask"], set()).add(record["split_id"])
    return read


@pytest.mark.parametrize("assigner", ["sticky", "round_robin", "fair_share"])
async def test_two_readers_of_four_slots_read_all_eight_splits_after_the_grace_delay(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path, assigner: str
) -> None:
    options = {"splits": str(SPLITS), "records_per_split": "unbounded", "rate": "200"}
    coordinator = procs.coordinator(
        unique_source,
        SLOTS,
        {**options, "assigner": assigner, "assignment_grace_ms": str(GRACE_MS)},
    )
    outs = [tmp_path / f"reader-{k}.jsonl" for k in range(2)]
    readers = [procs.reader(unique_source, k, options, outs[k], *READER_TIMING) for k in range(2)]
    for reader in readers:
        await reader.wait_for_log_async("registered as attempt 1", timeout_s=30)
    registered = time.monotonic()

    # every split read within ~20 s of the registrations (the grace delay is 5 s of it)
    async def all_read() -> bool:
        for reader in readers:
            assert reader.returncode is None, f"{reader.name} exited:\n{reader.tail()}"
        return set().union(*split_ids_read(*outs).values()) == ALL_SPLIT_IDS

    try:
        await poll_until(all_read, 20, f"{assigner}: records of all {SPLITS} splits in the readers' outputs")
    except AssertionError as exc:
        read = split_ids_read(*outs)
        raise AssertionError(f"{exc}; read: {read}\n{procs.describe()}") from None
    took_s = time.monotonic() - registered

    messages = await readers_messages(kafka_bootstrap, unique_source)
    given = [(m["subtask"], m["ts"], s["split_id"]) for m in add_splits(messages) for s in m["body"]["splits"]]
    counts = Counter(split_id for _, _, split_id in given)
    assert set(counts) == ALL_SPLIT_IDS and set(counts.values()) == {1}, f"{assigner}: {given}"
    assert {subtask for subtask, _, _ in given} == {0, 1}, f"{assigner}: a split went to a slot without a reader"
    # some waited for slots 2 and 3 and went out only at the end of the grace delay, which
    # began when the first reader registered
    registrations = [m["ts"] for m in messages if m["type"] == "ReaderRegistered"]
    assert len(registrations) == 2
    waited = [split_id for _, ts, split_id in given if ts >= min(registrations) + GRACE_MS - 250]
    assert waited, f"{assigner}: no split waited for the grace delay: {given}"
    assert max(ts for _, ts, _ in given) <= max(registrations) + GRACE_MS + 3_000, given
    # each reader wrote the splits it was given, and both keep reading
    read = split_ids_read(*outs)
    for k in (0, 1):
        assert read[k] == {split_id for subtask, _, split_id in given if subtask == k}, f"{assigner}: {read}"
    assert [r.returncode for r in readers] == [None, None], procs.describe()

    # both leave gracefully: the audit finds every split owned once and handed back
    for reader in readers:
        reader.request_stop()
    assert [await r.wait_async(30) for r in readers] == [0, 0], procs.describe()
    left = time.monotonic()
    result = await run_audit(kafka_bootstrap, unique_source)
    assert result.ok, "the audit found violations:\n" + "\n".join(map(str, result.violations[:10]))
    summary = result.summary
    assert summary.splits_assigned == SPLITS
    assert summary.splits_owned == 0 and summary.splits_finished == 0
    assert summary.released_by_reason.get("session-timeout", 0) == 0
    assert {s.subtask: s.attempts for s in summary.subtasks} == {0: 1, 1: 1}

    # The first reader to leave handed back splits that then waited (the other was live
    # for a moment); with no reader left their grace delay runs out. The coordinator must
    # go quiet, not wake up (and commit its state) over and over for them: in 2 s it
    # writes only its liveness record (``meta``, every takeover_silence_ms / 4 = 500 ms,
    # which standbys watch for fast takeover), no other part of its state.
    state_topic = f"sluicegate.{unique_source}.coordinator-state"
    await _sleep_until(left + GRACE_MS / 1000 + 1.5)
    before = len(await read_topic(kafka_bootstrap, state_topic))
    await _sleep_until(time.monotonic() + 2)
    written = (await read_topic(kafka_bootstrap, state_topic))[before:]
    keys = sorted({(r.key or b"").decode() for r in written})
    assert keys in ([], [f"{unique_source}/meta"]), f"{assigner}: the idle coordinator wrote {keys} in 2 s"
    assert len(written) <= 6, f"{assigner}: the idle coordinator wrote {len(written)} liveness records in 2 s"
    assert coordinator.returncode is None, coordinator.tail()
    timeline = ", ".join(
        f"{len(m['body']['splits'])} to {m['subtask']} at +{m['ts'] - min(registrations)} ms"
        for m in add_splits(messages)
    )
    print(f"{assigner}: all {SPLITS} splits read {took_s:.1f} s after the readers registered; AddSplits: {timeline}")


async def _sleep_until(when: float) -> None:
    await asyncio.sleep(max(0.0, when - time.monotonic()))
