"""``audit --follow`` without Kafka: the follower (audit/follow.py) fed the records of a
real core's run (test_audit.full_run) in the order Kafka may hand them over, against
the batch audit of the same records; and its order (audit/follow_order.py) alone."""

from __future__ import annotations

import random

import orjson
import pytest
from test_audit import READERS, SOURCE, Hand, Run, audit, find, full_run, split
from typer.testing import CliRunner

from sluicegate.audit import ViolationKind
from sluicegate.audit.follow import AuditFollower, Finding, FollowSnapshot
from sluicegate.audit.follow_kafka import FollowCollector
from sluicegate.audit.follow_order import FollowOrder
from sluicegate.audit.replay import Location, ReplayRecord
from sluicegate.audit.split_events import SplitEvents
from sluicegate.cli import app
from sluicegate.protocol import (
    AddSplits,
    CheckpointAck,
    Direction,
    Heartbeat,
    SplitsFinished,
    SplitsReleased,
    decode,
    envelope,
)
from sluicegate.protocol.state_records import state_key

INBOX = "coordinator"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def follower(clock: Clock, gap_timeout_ms: int = 10_000) -> AuditFollower:
    return AuditFollower(SOURCE, None, INBOX, READERS, clock, gap_timeout_ms)


def feed_shuffled(
    f: AuditFollower, inbox: list[tuple[int, bytes | None]], readers: list[tuple[int, int, bytes | None]], seed: int
) -> list[Finding]:
    """Hand the records over as Kafka may: each partition in its own order, the partitions
    interleaved at random, the inbox ahead or behind; step after every record."""
    rng = random.Random(seed)
    queues: dict[str, list[tuple[int, int, bytes | None]]] = {INBOX: [(0, o, raw) for o, raw in inbox]}
    for p, o, raw in readers:
        queues.setdefault(f"r{p}", []).append((p, o, raw))
    found: list[Finding] = []
    while any(queues.values()):
        name = rng.choice([n for n, q in queues.items() if q])
        p, o, raw = queues[name].pop(0)
        if name == INBOX:
            f.inbox(o, raw)
            f.inbox_read_to(o + 1)
        else:
            f.readers(p, o, raw)
        found += f.step()
    return found


def test_a_clean_run_followed_in_any_arrival_order_ends_as_the_batch_audit() -> None:
    run = full_run()
    batch = audit(run.inbox, run.readers)
    assert batch.ok
    for seed in range(5):
        f = follower(Clock())
        assert feed_shuffled(f, run.inbox, run.readers, seed) == []
        assert f.applied == batch.summary.inbox_records + batch.summary.readers_records
        assert (len(f.model.finished), len(f.model.owner)) == (
            batch.summary.splits_finished,
            batch.summary.splits_owned,
        )
        assert f.order.waiting == 0


def test_a_dropped_release_is_found_where_the_batch_audit_finds_it() -> None:
    run: Run = full_run()
    i = find(
        run.readers,
        lambda e: isinstance(e.body, SplitsReleased) and e.body.reason == "departed" and bool(e.body.split_ids),
    )
    tampered = [r for k, r in enumerate(run.readers) if k != i]
    batch = {(v.kind, v.location) for v in audit(run.inbox, tampered).violations}
    clock = Clock()
    f = follower(clock, gap_timeout_ms=1_000)
    found = feed_shuffled(f, run.inbox, tampered, seed=1)
    assert found == [], "the records after the missing one wait for it"
    clock.now += 1.0
    found = f.step()
    assert found[0].violation.kind is ViolationKind.CSEQ_GAP
    assert {(x.violation.kind, x.violation.location) for x in found} == batch


def test_a_record_waits_for_the_inbox_records_it_was_decided_on() -> None:
    h = Hand()
    h.register(0, 1)
    order = FollowOrder(10_000, Clock())
    records = [
        ReplayRecord(Location(INBOX, 0, o), Direction.TO_COORDINATOR, decode(raw, Direction.TO_COORDINATOR))
        for o, raw in h.inbox
    ]
    registered = [
        ReplayRecord(Location(READERS, p, o), Direction.TO_READER, decode(raw, Direction.TO_READER))
        for p, o, raw in h.readers
    ]
    order.add_readers(registered[0])
    assert order.ready() == []
    order.add_inbox(records[0])
    assert order.ready() == [], "the inbox is not known to be read past offset 0 yet"
    order.inbox_read_to(1)
    assert order.ready() == [records[0], registered[0]]


def test_a_cseq_used_twice_is_reported_and_not_applied() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a")]))
    h.cseq -= 1
    h.r(0, 1, AddSplits(2, [split("b")]))
    f = follower(Clock())
    found = feed_shuffled(f, h.inbox, h.readers, seed=0)
    assert [x.violation.kind for x in found] == [ViolationKind.CSEQ_ORDER]
    assert "cseq 2 was already used" in found[0].violation.message
    assert set(f.model.owner) == {"a"}


def test_v1_records_without_cseq_are_applied_as_they_come() -> None:
    f = follower(Clock())
    env = envelope(Heartbeat(5, False), source=SOURCE, subtask=0, attempt=None, epoch=1, ts=1)
    order = f.order
    record = ReplayRecord(Location(READERS, 0, 0), Direction.TO_READER, env)
    order.add_readers(record)
    assert order.ready() == [record]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--fail-fast"], "--fail-fast and --metrics-port go with --follow"),
        (["--metrics-port", "9100"], "--fail-fast and --metrics-port go with --follow"),
        (["--follow", "--timeline", "t.png"], "--follow prints as it goes"),
    ],
)
def test_follow_options_that_do_not_go_together_fail_at_start(args: list[str], named: str) -> None:
    result = CliRunner().invoke(app, ["audit", "--source", "s", "-b", "127.0.0.1:1", *args])
    assert result.exit_code == 2
    assert named in " ".join(result.output.split())


def test_inbox_records_that_made_the_coordinator_send_nothing_wait_for_its_committed_progress() -> None:
    """A SplitsFinished leads to no coordinator record: it is applied once the coordinator's
    ``meta`` state part says it processed that inbox offset, after all it had sent then."""
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a")]))
    finished_at = h.i(0, 1, SplitsFinished(["a"]))
    f = follower(Clock())
    assert feed_shuffled(f, h.inbox, h.readers, seed=0) == []
    assert not f.model.finished and f.order.waiting == 1
    f.coordinator_state(state_key(SOURCE, "other"), orjson.dumps({"cseq": h.cseq, "inbox_offset": finished_at}))
    f.coordinator_state(state_key(SOURCE, "meta"), b"\x00sluicegate-chunked\x00{}")
    assert f.step() == [] and not f.model.finished, "only the meta part, in JSON, says how far it got"
    f.coordinator_state(state_key(SOURCE, "meta"), orjson.dumps({"cseq": h.cseq, "inbox_offset": finished_at}))
    assert f.step() == []
    assert f.model.finished == {"a"} and f.order.waiting == 0


def test_committed_progress_releases_inbox_records_only_after_every_record_sent_by_then() -> None:
    h = Hand()
    h.register(0, 1)  # inbox 0: the registration; cseq 1: ReaderRegistered naming it
    heartbeat_at = h.i(0, 1, Heartbeat(5, False))
    inbox = [
        ReplayRecord(Location(INBOX, 0, o), Direction.TO_COORDINATOR, decode(raw, Direction.TO_COORDINATOR))
        for o, raw in h.inbox
    ]
    (p, o, raw) = h.readers[0]
    registered = ReplayRecord(Location(READERS, p, o), Direction.TO_READER, decode(raw, Direction.TO_READER))
    order = FollowOrder(10_000, Clock())
    for record in inbox:
        order.add_inbox(record)
    order.inbox_read_to(heartbeat_at + 1)
    order.progress(1, heartbeat_at)
    assert order.ready() == [], "cseq 1 was sent before the heartbeat was processed, and has not come"
    order.add_readers(registered)
    assert order.ready() == [inbox[0], registered, inbox[1]]


def test_a_split_history_grows_as_its_records_are_applied() -> None:
    """``audit --split ID --follow``: every record that names the split, once, in order; an
    acknowledgement only when the position moved."""
    run = full_run()
    f = AuditFollower(SOURCE, None, INBOX, READERS, Clock(), split_id="seq-00000")
    assert feed_shuffled(f, run.inbox, run.readers, seed=3) == []
    events = [event for _, event in f.events]
    assert events[0].startswith("given to subtask 0 attempt 1 at position 0 (seq 1")
    assert events[-1].startswith("finished by subtask")
    acks = [e for e in events if "acknowledged position" in e]
    assert len(acks) == len(set(acks)) > 0, "an unchanged position is printed once"


def test_an_acknowledgement_is_told_only_when_the_position_moved() -> None:
    events = SplitEvents("a")

    def ack(checkpoint: int, position: int) -> str | None:
        body = CheckpointAck(checkpoint, 1, [{**split("a"), "position": position}, split("b")])
        env = envelope(body, source=SOURCE, subtask=0, attempt=1, epoch=1, ts=checkpoint)
        return events.describe(ReplayRecord(Location(INBOX, 0, checkpoint), Direction.TO_COORDINATOR, env))

    assert ack(1, 0) == "subtask 0 attempt 1 acknowledged position 0 (checkpoint 1)"
    assert ack(2, 0) is None
    assert ack(3, 4) == "subtask 0 attempt 1 acknowledged position 4 (checkpoint 3)"


def test_a_released_split_counts_as_unowned_from_its_release_until_it_is_assigned_again() -> None:
    """What the "split unowned past the grace" alert reads: splits taken from a subtask
    and not given to another, each with the ``ts`` of the record that took it."""
    run = full_run()
    f = follower(Clock())
    releases: dict[str, int] = {}
    seen_unowned: set[str] = set()
    for offset, inbox_raw in run.inbox:  # the inbox ahead: each coordinator record applies as it comes
        f.inbox(offset, inbox_raw)
    f.inbox_read_to(len(run.inbox))
    for p, o, raw in sorted(run.readers, key=lambda r: decode(r[2], Direction.TO_READER).cseq or 0):
        f.readers(p, o, raw)
        assert f.step() == []
        env = decode(raw, Direction.TO_READER)
        if isinstance(env.body, SplitsReleased):
            releases.update(dict.fromkeys(env.body.split_ids, env.ts))
        unowned = f.model.unowned_since
        assert not unowned.keys() & f.model.owner.keys() and not unowned.keys() & f.model.finished
        assert all(unowned[sid] == releases[sid] for sid in unowned)
        assert list(unowned.values()) == sorted(unowned.values()), "the first one is the oldest"
        assert f.splits_by_state()["unowned"] == len(unowned)
        seen_unowned |= unowned.keys()
    assert seen_unowned, "the run releases splits (a fence, a session timeout, a departure)"
    assert f.model.unowned_since == {} and f.oldest_unowned_ms() is None, "every split is finished in the end"


def test_the_follower_serves_how_long_the_oldest_unowned_split_has_waited() -> None:
    collector = FollowCollector(SOURCE, clock=lambda: 1_000.0)
    collector.snapshot = FollowSnapshot(oldest_unowned_ms=958_500, splits={"unowned": 3})
    served = {m.name: m for m in collector.collect()}
    assert served["sluicegate_audit_oldest_unowned_split_seconds"].samples[0].value == 41.5
    assert [s.value for s in served["sluicegate_audit_splits"].samples] == [3]
    collector.snapshot = FollowSnapshot()
    served = {m.name: m for m in collector.collect()}
    assert served["sluicegate_audit_oldest_unowned_split_seconds"].samples[0].value == 0


def test_readers_that_join_leave_or_fail_are_said_as_they_happen() -> None:
    """``audit --follow`` said nothing when a reader joined, left or failed (issue 51 item 5)."""
    run = full_run()
    f = follower(Clock())
    feed_shuffled(f, run.inbox, run.readers, seed=3)
    events = f.reader_events
    joined = [e for e in events if "a reader joined" in e]
    assert {e.split(":")[0] for e in joined} == {f"subtask {s}" for s in range(4)}, events
    fenced = events.index("subtask 1: its reader failed (attempt 1, fenced)")
    assert events[fenced + 1] == "subtask 1: a reader joined (attempt 2)", events
    assert any(e.startswith("subtask 3: its reader failed (attempt 1, session-timeout") for e in events), events
    assert any("its reader left" in e for e in events), events
