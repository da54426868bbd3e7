"""A reader paused past its session timeout (SIGSTOP, then SIGCONT), over real Kafka and
real processes: docs/protocol.md, "A reader paused past its session timeout".

The coordinator fences the silent reader's transactional id before its splits move, so
what the paused process had read and not checkpointed can never commit, however its
next steps are ordered after SIGCONT. Another reader takes its splits (a short departure
timeout) from their last checkpoint; the copy of the input into ``kafka:OUT`` is exact.
"""

from __future__ import annotations

import time

import pytest
from kafka_data import LiveCopy, OutputReader, audit_ok, procs, start_reader
from processes import Proc, ProcessGroup

__all__ = ["procs"]  # the fixture

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

PARTITIONS = 4
SESSION_MS = 3_000
DEPARTURE_MS = 2_000
PAUSE_S = (SESSION_MS + DEPARTURE_MS) / 1000 + 3.0
"""Long enough for the coordinator to time the reader out and hand its splits on."""
FENCING = "fencing it before its splits move"
"""A reader paused in the middle of its commit holds the inbox with its open transaction:
the coordinator ends that first, a session timeout later (open_transaction.py), and then
fences the reader as silent, within the pause all the same."""


def test_a_reader_paused_past_its_session_timeout_is_fenced_and_writes_nothing_twice(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    source = unique_source
    timeouts = ("--session-timeout-ms", str(SESSION_MS), "--reader-departure-timeout-ms", str(DEPARTURE_MS))
    copy = LiveCopy(procs, kafka_bootstrap, source, slots=2, partitions=PARTITIONS, coordinator_args=timeouts)
    try:
        readers = [start_reader(procs, source, k, copy.options, copy.out) for k in range(2)]
        for reader in readers:
            reader.wait_for_log("owning 2", timeout_s=60)
        paused = readers[0]
        pause_past_the_session_timeout(paused, copy.output, readers)
        assert copy.coordinator.lines_with(FENCING), copy.coordinator.tail()
        registered_again(paused, timeout_s=30)
        # It learns of it from the coordinator's SplitsReleased; or first from its own clock
        # (no heartbeat could be sent for longer than its session timeout); or, paused
        # mid-commit with its transaction ended before the coordinator failed it, from its
        # failed commit. Each way it restores its last checkpoint and registers again.
        learned = (
            "the coordinator timed this reader out",
            "no heartbeat could be sent for",
            "this one takes the subtask back",
        )
        assert any(paused.lines_with(line) for line in learned), paused.tail()
        copy.finish(readers)
        for reader in readers:
            assert reader.returncode is None, f"{reader.name} exited with {reader.returncode}:\n{reader.tail()}"
    finally:
        copy.close()
    summary = audit_ok(kafka_bootstrap, source)
    # checkpointed splits leave when the attempt departs, the others as it fails
    moved = summary.released_by_reason.get("departed", 0) + summary.released_by_reason.get("session-timeout", 0)
    assert moved >= 1, f"the paused reader's splits moved to the other: {summary.released_by_reason}"


def pause_past_the_session_timeout(reader: Proc, output: OutputReader, readers: list[Proc]) -> None:
    """Pause ``reader`` while it copies (so it holds records read and not checkpointed)."""
    output.wait_for(len(output.rows) + 50, 30, readers, "before the pause")
    reader.pause()
    try:
        time.sleep(PAUSE_S)
    finally:
        reader.resume()


def registered_again(reader: Proc, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while len(reader.lines_with("registered as attempt")) < 2:
        assert time.monotonic() < deadline, f"{reader.name} did not register again:\n{reader.tail()}"
        time.sleep(0.2)
