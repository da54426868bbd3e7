"""The audit (sluicegate.audit) on hand-built streams and on streams a real
CoordinatorCore produces, clean and tampered with."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from sluicegate.audit import AuditResult, Ordering, ViolationKind, audit_records, replay
from sluicegate.audit.report import print_report, to_json, to_json_bytes
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.core import CoordinatorCore, Effects
from sluicegate.protocol import (
    AddSplits,
    Body,
    CheckpointAck,
    Direction,
    Envelope,
    Heartbeat,
    NoMoreSplits,
    ReaderLeaving,
    ReaderRegistered,
    ReaderRegistration,
    ReleaseRequest,
    RequestSplit,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
    decode,
    encode,
    envelope,
)
from sluicegate.testing.core_harness import fences_done_at_once
from sluicegate_connectors.sequence import SequenceSource

SOURCE = "audit-test"
INBOX = f"sluicegate.{SOURCE}.coordinator"
READERS = f"sluicegate.{SOURCE}.readers"

InboxRecords = list[tuple[int, bytes | None]]
ReadersRecords = list[tuple[int, int, bytes | None]]


# -- a coordinator run, recorded as the two topics would hold it -------------------------------


class Run:
    """Drives a CoordinatorCore like readers would, recording both topics."""

    def __init__(self, parallelism: int = 4, splits: int = 40) -> None:
        self.parallelism = parallelism
        self.source = SequenceSource.from_options({"splits": str(splits), "records_per_split": "5"})
        self.config = CoordinatorConfig(
            SOURCE,
            parallelism,
            session_timeout_ms=10_000,
            reader_departure_timeout_ms=60_000,
            watermark_announce_interval_ms=1_000,
        )
        self.epoch = 1
        self.core: CoordinatorCore[Any] = CoordinatorCore(self.source, self.config, epoch=1)
        self.now = 1_000
        self.inbox: InboxRecords = []
        self.readers: ReadersRecords = []
        self._offsets = [0] * parallelism
        # the readers' side: current attempt, highest seq received, splits held
        self.attempt: dict[int, int | None] = dict.fromkeys(range(parallelism))
        self.seq: dict[int, int] = dict.fromkeys(range(parallelism), 0)
        self.held: dict[int, dict[str, dict[str, Any]]] = {s: {} for s in range(parallelism)}
        self.epoch_seen = 0
        self._collect(self.core.start(self.now))

    # plumbing

    def _collect(self, effects: Effects) -> None:
        for env in effects.messages:
            p = env.subtask
            self.readers.append((p, self._offsets[p], encode(env)))
            self._offsets[p] += 1
            self._reader_sees(env)

    def _reader_sees(self, env: Envelope) -> None:
        s, body = env.subtask, env.body
        self.epoch_seen = max(self.epoch_seen, env.epoch)
        if isinstance(body, ReaderRegistered):
            self.attempt[s] = body.attempt
            return
        if env.attempt != self.attempt[s]:
            return
        if isinstance(body, AddSplits):
            self.seq[s] = max(self.seq[s], body.seq)
            for split in body.splits:
                self.held[s][split["split_id"]] = dict(split)
        elif isinstance(body, SplitsReleased):
            for sid in body.split_ids:
                self.held[s].pop(sid, None)
            if body.failed_attempt == self.attempt[s]:
                self.attempt[s] = None
                self.held[s].clear()

    def send(self, subtask: int, body: Body, attempt: int | None = None) -> None:
        if attempt is None and not isinstance(body, ReaderRegistration):
            attempt = self.attempt[subtask]
        env = envelope(
            body,
            source=SOURCE,
            subtask=subtask,
            attempt=attempt,
            epoch=self.epoch_seen,
            ts=self.now,
        )
        raw = encode(env)
        offset = len(self.inbox)
        self.inbox.append((offset, raw))
        self._collect(self.core.on_message(decode(raw, Direction.TO_COORDINATOR), offset, self.now))

    def advance(self, ms: int) -> None:
        self.now += ms
        self._collect(fences_done_at_once(self.core, self.core.tick(self.now), self.now))

    def restart(self) -> None:
        """A successor coordinator (next epoch) takes over from the last state."""
        snapshot = orjson.loads(orjson.dumps(self.core.snapshot()))
        self.epoch += 1
        self.core = CoordinatorCore(self.source, self.config, epoch=self.epoch, snapshot=snapshot)
        self._collect(self.core.start(self.now))

    # reader actions

    def register(self, subtask: int) -> None:
        body = ReaderRegistration(
            incarnation=str(uuid.uuid4()),
            location="host",
            reported_splits=[],
            restored_checkpoint_id=None,
        )
        self.send(subtask, body)

    def heartbeat(self, subtask: int, watermark: int | None = None) -> None:
        self.send(subtask, Heartbeat(watermark=watermark, idle=False))

    def ack(self, subtask: int, checkpoint_id: int) -> None:
        splits = list(self.held[subtask].values())
        self.send(subtask, CheckpointAck(checkpoint_id, self.seq[subtask], splits))

    def finish(self, subtask: int, count: int | None = None) -> None:
        ids = sorted(self.held[subtask])[:count]
        for sid in ids:
            self.held[subtask].pop(sid)
        self.send(subtask, SplitsFinished(split_ids=ids))

    def leave(self, subtask: int) -> None:
        self.send(subtask, ReaderLeaving(splits=list(self.held[subtask].values())))


def full_run() -> Run:
    """Registrations, acks, watermarks, a fence with recovery, a session timeout, a
    departure, a coordinator restart, a leave, and every split finished in the end."""
    run = Run()
    for s in (0, 1, 2):
        run.register(s)  # 10 splits each; 10 stay unassigned until subtask 3 comes
    for s in (0, 1, 2):
        run.heartbeat(s, 1_000 + s)
    run.advance(500)
    for s in (0, 1, 2):
        run.ack(s, 1)
    run.register(3)
    run.heartbeat(3, 1_003)
    run.ack(3, 1)
    run.finish(0, 3)
    run.finish(1, 2)
    run.finish(3, 9)
    # subtask 1 restarts: its old attempt is fenced, its splits are recovered and
    # reassigned, some of them to subtask 3 (seq 2, never acknowledged)
    old_attempt = run.attempt[1]
    run.register(1)
    run.send(1, Heartbeat(watermark=5_000, idle=False), attempt=old_attempt)  # fenced
    for s in range(4):
        run.heartbeat(s, 2_000 + s)
    run.advance(1_000)
    for s in (0, 1, 2):
        run.ack(s, 2)
    # subtask 3 goes silent: session timeout (its unacknowledged splits), then
    # departure (its checkpointed one)
    for _ in range(40):
        run.advance(2_000)
        for s in (0, 1, 2):
            run.heartbeat(s, run.now)
    for s in (0, 1, 2):
        run.ack(s, 3)
    run.restart()
    run.register(3)
    for s in range(4):
        run.heartbeat(s, run.now)
    run.advance(1_000)
    run.ack(3, 4)
    run.leave(2)
    # the others read everything
    for _ in range(6):
        for s in (0, 1, 3):
            if run.held[s]:
                run.finish(s)
            else:
                run.send(s, RequestSplit(hostname=None))
            run.heartbeat(s, run.now)
        run.advance(1_000)
    return run


@pytest.fixture(scope="module")
def clean_run() -> Run:
    return full_run()


def audit(inbox: InboxRecords, readers: ReadersRecords, **kw: Any) -> AuditResult:
    return audit_records(inbox, readers, source=SOURCE, **kw)


def decoded(readers: ReadersRecords) -> list[tuple[int, int, Envelope]]:
    return [(p, o, decode(raw, Direction.TO_READER)) for p, o, raw in readers]


def rewrite(readers: ReadersRecords, index: int, change: Callable[[Envelope], Envelope]) -> ReadersRecords:
    out = list(readers)
    p, o, raw = out[index]
    out[index] = (p, o, encode(change(decode(raw, Direction.TO_READER))))
    return out


def with_body(env: Envelope, **changes: Any) -> Envelope:
    return dataclasses.replace(env, body=dataclasses.replace(env.body, **changes))


def find(readers: ReadersRecords, pred: Callable[[Envelope], bool], after: int = -1) -> int:
    """Index in ``readers`` of the first record in cseq order (after cseq ``after``) matching."""
    by_cseq = sorted((env.cseq or 0, i, env) for i, (_, _, env) in enumerate(decoded(readers)))
    for cseq, i, env in by_cseq:
        if cseq > after and pred(env):
            return i
    raise AssertionError("no such record")


def first_at(result: AuditResult) -> tuple[ViolationKind, str, int, int]:
    v = result.first_violation
    assert v is not None, "expected a violation"
    return v.kind, v.location.topic, v.location.partition, v.location.offset


def location_of(readers: ReadersRecords, index: int) -> tuple[str, int, int]:
    p, o, _ = readers[index]
    return READERS, p, o


# -- clean runs ----------------------------------------------------------------------------------


def test_clean_run_is_ok(clean_run: Run) -> None:
    result = audit(clean_run.inbox, clean_run.readers, max_parallelism=4)
    assert result.ok, [str(v) for v in result.violations]
    s = result.summary
    assert s.ordering is Ordering.CSEQ
    assert s.splits_assigned == 40
    assert s.splits_finished == 40
    assert s.splits_owned == 0
    assert s.epochs == [1, 2]
    assert s.fenced_messages >= 1
    assert s.undecodable_total == 0
    assert {"fenced", "session-timeout", "recovery", "departed", "left"} <= set(s.released_by_reason)
    assert s.released_by_reason["departed"] > 0
    assert s.released_by_reason["session-timeout"] > 0
    assert s.messages_by_type["readers:NoMoreSplits"] >= 3
    by_subtask = {t.subtask: t for t in s.subtasks}
    assert by_subtask[1].attempts == 2 and by_subtask[3].attempts == 2
    assert by_subtask[2].live is False
    assert s.inbox_records == len(clean_run.inbox)
    assert s.readers_records == len(clean_run.readers)
    assert s.last_cseq == len(clean_run.readers)


def test_partitions_may_be_read_in_any_order(clean_run: Run) -> None:
    shuffled = sorted(clean_run.readers, key=lambda r: (-r[0], r[1]))
    assert audit(list(reversed(clean_run.inbox)), shuffled).ok


def test_replay_puts_each_record_after_the_inbox_records_it_saw(clean_run: Run) -> None:
    merged = replay(clean_run.inbox, clean_run.readers, inbox_topic=INBOX, readers_topic=READERS)
    last_inbox = -1
    for record in merged.records:
        if record.from_reader:
            assert record.location.offset > last_inbox
            last_inbox = record.location.offset
        else:
            assert record.env.inbox_offset is None or record.env.inbox_offset <= last_inbox
    # every registration is immediately answered
    for i, record in enumerate(merged.records):
        if isinstance(record.env.body, ReaderRegistration):
            answers = [r.env.body for r in merged.records[i + 1 : i + 4]]
            assert any(isinstance(b, ReaderRegistered) for b in answers)


def test_undecodable_records_are_counted_not_violations(clean_run: Run) -> None:
    inbox = [
        *clean_run.inbox,
        (len(clean_run.inbox), b"not json"),
        (len(clean_run.inbox) + 1, None),
    ]
    readers = [*clean_run.readers, (0, 10_000, b'{"v": 99}')]
    result = audit(inbox, readers)
    assert result.ok
    assert result.summary.undecodable == {INBOX: 2, READERS: 1}
    assert all("skipped: dead-letter material" in s.reason for s in result.skipped)


def test_v1_records_without_cseq_fall_back_to_ts_order() -> None:
    def rec(body: Body, subtask: int, attempt: int | None, ts: int) -> bytes:
        return encode(
            dataclasses.replace(envelope(body, source=SOURCE, subtask=subtask, attempt=attempt, epoch=1, ts=ts), v=1)
        )

    split = {"split_id": "a", "start": 0, "end": 5, "position": 0}
    inbox: InboxRecords = [
        (0, rec(ReaderRegistration("i", "h", [], None), 0, None, 10)),
        (1, rec(SplitsFinished(["a"]), 0, 1, 30)),
    ]
    readers: ReadersRecords = [
        (0, 0, rec(ReaderRegistered("i", 1), 0, 1, 11)),
        (0, 1, rec(AddSplits(1, [split]), 0, 1, 12)),
    ]
    result = audit(inbox, readers)
    assert result.ok, [str(v) for v in result.violations]
    assert result.summary.ordering is Ordering.TS
    assert result.summary.notes
    assert result.summary.splits_finished == 1


# -- tampered runs: each kind is found, at the tampered record ----------------------------------


def test_dropped_release_means_split_owned_twice(clean_run: Run) -> None:
    readers = clean_run.readers
    i = find(
        readers,
        lambda e: isinstance(e.body, SplitsReleased) and e.body.reason == "departed" and bool(e.body.split_ids),
    )
    dropped = decode(readers[i][2], Direction.TO_READER)
    assert isinstance(dropped.body, SplitsReleased)
    released = set(dropped.body.split_ids)
    assert dropped.cseq is not None
    j = find(
        readers,
        lambda e: isinstance(e.body, AddSplits) and bool(released & {s["split_id"] for s in e.body.splits}),
        after=dropped.cseq,
    )
    after = find(readers, lambda e: e.cseq == (dropped.cseq or 0) + 1)
    tampered = [r for k, r in enumerate(readers) if k != i]
    result = audit(clean_run.inbox, tampered)
    found = {(v.kind, v.location.topic, v.location.partition, v.location.offset): v.message for v in result.violations}
    # the missing cseq shows at the next record, and what the release did not do at the AddSplits
    assert (
        f"no record carries cseq {dropped.cseq} before" in found[(ViolationKind.CSEQ_GAP, *location_of(readers, after))]
    )
    assert "owned twice" in found[(ViolationKind.SPLIT_OWNED_TWICE, *location_of(readers, j))]


def test_reused_seq(clean_run: Run) -> None:
    readers = clean_run.readers
    i = find(readers, lambda e: isinstance(e.body, AddSplits) and e.body.seq == 3)
    tampered = rewrite(readers, i, lambda e: with_body(e, seq=2))
    result = audit(clean_run.inbox, tampered)
    assert first_at(result) == (ViolationKind.SEQ_REUSED, *location_of(readers, i))
    assert "reuses seq 2" in result.violations[0].message


def test_skipped_seq(clean_run: Run) -> None:
    readers = clean_run.readers
    i = find(readers, lambda e: isinstance(e.body, AddSplits) and e.body.seq == 2)
    tampered = rewrite(readers, i, lambda e: with_body(e, seq=4))
    result = audit(clean_run.inbox, tampered)
    assert first_at(result) == (ViolationKind.SEQ_GAP, *location_of(readers, i))
    assert "skips seqs 2..3" in result.violations[0].message


def test_duplicated_add_splits(clean_run: Run) -> None:
    readers = clean_run.readers
    i = find(readers, lambda e: isinstance(e.body, AddSplits))
    p, _, raw = readers[i]
    env = decode(raw, Direction.TO_READER)
    last = max(decode(r, Direction.TO_READER).cseq or 0 for _, _, r in readers)
    copy_offset = max(o for q, o, _ in readers if q == p) + 1
    copy = encode(dataclasses.replace(env, cseq=last + 1, inbox_offset=len(clean_run.inbox) - 1))
    result = audit(clean_run.inbox, [*readers, (p, copy_offset, copy)])
    assert not result.ok
    kinds = {v.kind for v in result.violations if v.location.offset == copy_offset}
    assert ViolationKind.SEQ_REUSED in kinds
    # its splits are finished by then: assigning them again is a violation too
    assert ViolationKind.FINISHED_SPLIT_ASSIGNED in kinds or ViolationKind.SPLIT_OWNED_TWICE in kinds


def test_epoch_going_backwards(clean_run: Run) -> None:
    readers = clean_run.readers
    first_epoch2 = find(readers, lambda e: e.epoch == 2)
    after = decode(readers[first_epoch2][2], Direction.TO_READER).cseq
    assert after is not None
    i = find(readers, lambda e: e.epoch == 2, after=after + 3)
    tampered = rewrite(readers, i, lambda e: dataclasses.replace(e, epoch=1))
    result = audit(clean_run.inbox, tampered)
    assert first_at(result) == (ViolationKind.EPOCH_BACKWARDS, *location_of(readers, i))


def test_watermark_decreasing(clean_run: Run) -> None:
    readers = clean_run.readers
    first = find(readers, lambda e: isinstance(e.body, WatermarkAnnouncement))
    after = decode(readers[first][2], Direction.TO_READER).cseq
    assert after is not None
    i = find(readers, lambda e: isinstance(e.body, WatermarkAnnouncement), after=after + 20)
    tampered = rewrite(readers, i, lambda e: with_body(e, low_watermark=0))
    result = audit(clean_run.inbox, tampered)
    assert first_at(result) == (ViolationKind.WATERMARK_DECREASED, *location_of(readers, i))


def test_add_splits_to_fenced_attempt(clean_run: Run) -> None:
    readers = clean_run.readers
    registered = find(readers, lambda e: isinstance(e.body, ReaderRegistered) and e.body.attempt == 2)
    reg = decode(readers[registered][2], Direction.TO_READER)
    assert reg.cseq is not None
    i = find(
        readers,
        lambda e: isinstance(e.body, AddSplits) and e.subtask == reg.subtask,
        after=reg.cseq,
    )
    tampered = rewrite(readers, i, lambda e: dataclasses.replace(e, attempt=1))
    result = audit(clean_run.inbox, tampered)
    assert first_at(result) == (ViolationKind.MISADDRESSED, *location_of(readers, i))
    assert "current attempt is 2" in result.violations[0].message


def test_add_splits_to_subtask_without_live_attempt(clean_run: Run) -> None:
    readers = clean_run.readers
    envs = decoded(readers)
    left = next(e for _, _, e in envs if isinstance(e.body, SplitsReleased) and e.body.reason == "left")
    last_cseq = max(e.cseq or 0 for _, _, e in envs)
    last_seq = max(
        e.body.seq
        for _, _, e in envs
        if isinstance(e.body, AddSplits | NoMoreSplits | ReleaseRequest) and e.subtask == left.subtask
    )
    offset = max(o for p, o, _ in readers if p == left.subtask) + 1
    fake = envelope(
        AddSplits(last_seq + 1, [split("new-split")]),
        source=SOURCE,
        subtask=left.subtask,
        attempt=left.attempt,
        epoch=2,
        ts=clean_run.now,
        cseq=last_cseq + 1,
        inbox_offset=len(clean_run.inbox) - 1,
    )
    result = audit(clean_run.inbox, [*readers, (left.subtask, offset, encode(fake))])
    assert first_at(result) == (ViolationKind.NO_LIVE_ATTEMPT, READERS, left.subtask, offset)
    assert len(result.violations) == 1
    assert "no live attempt" in result.violations[0].message


def test_imprecise_release_of_a_failed_attempt(clean_run: Run) -> None:
    readers = clean_run.readers
    i = find(
        readers,
        lambda e: isinstance(e.body, SplitsReleased) and e.body.reason == "session-timeout" and bool(e.body.split_ids),
    )
    env = decode(readers[i][2], Direction.TO_READER)
    assert isinstance(env.body, SplitsReleased)
    kept = env.body.split_ids[1:]
    tampered = rewrite(readers, i, lambda e: with_body(e, split_ids=kept))
    result = audit(clean_run.inbox, tampered)
    assert first_at(result) == (ViolationKind.RELEASE_IMPRECISE, *location_of(readers, i))
    assert "leaves out" in result.violations[0].message


def test_cseq_out_of_order_in_a_partition(clean_run: Run) -> None:
    readers = clean_run.readers
    p = readers[0][0]
    same = [k for k, r in enumerate(readers) if r[0] == p]
    a, b = same[1], same[2]
    ea = decode(readers[a][2], Direction.TO_READER)
    eb = decode(readers[b][2], Direction.TO_READER)
    swapped = list(readers)
    swapped[a] = (p, readers[a][1], encode(dataclasses.replace(ea, cseq=eb.cseq)))
    swapped[b] = (p, readers[b][1], encode(dataclasses.replace(eb, cseq=ea.cseq)))
    result = audit(clean_run.inbox, swapped)
    kinds = [(v.kind, v.location.offset) for v in result.violations]
    assert (ViolationKind.CSEQ_ORDER, readers[b][1]) in kinds


# -- hand-built streams --------------------------------------------------------------------------


class Hand:
    """A stream by hand: ``r(...)`` adds to the readers topic, ``i(...)`` to the inbox."""

    def __init__(self) -> None:
        self.inbox: InboxRecords = []
        self.readers: ReadersRecords = []
        self.cseq = 0
        self.offsets: dict[int, int] = {}

    def i(self, subtask: int, attempt: int | None, body: Body, incarnation: str | None = None) -> int:
        offset = len(self.inbox)
        env = envelope(
            body, source=SOURCE, subtask=subtask, attempt=attempt, epoch=1, ts=offset, incarnation=incarnation
        )
        self.inbox.append((offset, encode(env)))
        return offset

    def r(self, subtask: int, attempt: int | None, body: Body, epoch: int = 1) -> tuple[int, int]:
        self.cseq += 1
        offset = self.offsets.get(subtask, 0)
        self.offsets[subtask] = offset + 1
        env = envelope(
            body,
            source=SOURCE,
            subtask=subtask,
            attempt=attempt,
            epoch=epoch,
            ts=self.cseq,
            cseq=self.cseq,
            inbox_offset=len(self.inbox) - 1 if self.inbox else None,
        )
        self.readers.append((subtask, offset, encode(env)))
        return subtask, offset

    def register(self, subtask: int, attempt: int) -> None:
        self.i(subtask, None, ReaderRegistration(f"inc-{attempt}", "h", [], None))
        self.r(subtask, attempt, ReaderRegistered(f"inc-{attempt}", attempt))

    def audit(self) -> AuditResult:
        return audit(self.inbox, self.readers)


def split(sid: str) -> dict[str, Any]:
    return {"split_id": sid, "start": 0, "end": 5, "position": 0}


def test_hand_stream_fence_releases_exactly_the_unacknowledged_splits() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a"), split("b")]))
    h.i(0, 1, CheckpointAck(1, 1, [split("a"), split("b")]))
    h.r(0, 1, AddSplits(2, [split("c")]))
    h.i(0, None, ReaderRegistration("inc-2", "h", [], None))
    h.r(0, 1, SplitsReleased("fenced", 1, ["c"]))
    h.r(0, 2, ReaderRegistered("inc-2", 2))
    h.i(0, 1, Heartbeat(5, False))  # fenced
    h.r(0, 2, SplitsReleased("recovery", None, ["a", "b"]))
    h.r(0, 2, AddSplits(3, [split("a"), split("b"), split("c")]))
    h.i(0, 2, SplitsFinished(["a", "b", "c"]))
    result = h.audit()
    assert result.ok, [str(v) for v in result.violations]
    assert result.summary.fenced_messages == 1
    assert result.summary.released_by_reason == {"fenced": 1, "recovery": 2}
    assert result.summary.subtasks[0].acked_seq == 1


def test_hand_stream_a_release_in_parts_fails_the_attempt_at_its_last_part_and_is_checked_whole() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a"), split("b"), split("c")]))
    h.r(0, 1, SplitsReleased("session-timeout", 1, ["a"], more=True))
    h.r(0, 1, SplitsReleased("session-timeout", 1, ["b", "c"]))
    h.i(0, None, ReaderRegistration("inc-2", "h", [], None))
    h.r(0, 2, ReaderRegistered("inc-2", 2))
    h.r(0, 2, AddSplits(2, [split("a"), split("b"), split("c")]))
    h.i(0, 2, SplitsFinished(["a", "b", "c"]))
    result = h.audit()
    assert result.ok, [str(v) for v in result.violations]
    assert result.summary.released_by_reason == {"session-timeout": 3}


def test_hand_stream_a_release_in_parts_that_leaves_a_split_out_is_imprecise_at_its_last_part() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a"), split("b"), split("c")]))
    h.r(0, 1, SplitsReleased("session-timeout", 1, ["a"], more=True))
    last = h.r(0, 1, SplitsReleased("session-timeout", 1, ["b"]))
    result = h.audit()
    assert [v.kind for v in result.violations] == [ViolationKind.RELEASE_IMPRECISE]
    assert "leaves out c" in result.violations[0].message
    assert (result.violations[0].location.partition, result.violations[0].location.offset) == last


def test_hand_stream_records_in_pieces_are_checked_whole_at_their_last_piece() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a"), split("b"), split("c")]))
    h.i(0, 1, CheckpointAck(1, 1, [split("a")], piece=0, more=True))
    h.i(0, 1, CheckpointAck(1, 1, [split("b"), split("c")], piece=1))
    h.i(0, None, ReaderRegistration("inc-2", "h", [split("a")], 1, piece=0, more=True))
    h.i(0, None, ReaderRegistration("inc-2", "h", [split("b"), split("c")], 1, piece=1))
    h.r(0, 1, SplitsReleased("fenced", 1, []))
    # the answer in pieces: a second attempt-2 record must not look like a second registration
    h.r(0, 2, ReaderRegistered("inc-2", 2, ["a"], piece=0, more=True))
    h.r(0, 2, ReaderRegistered("inc-2", 2, ["b", "c"], piece=1))
    h.r(0, 2, SplitsReleased("recovery", None, ["a", "b", "c"]))
    h.r(0, 2, AddSplits(2, [split("a"), split("b"), split("c")]))
    h.i(0, 2, ReaderLeaving([split("a")], piece=0, more=True))
    # the attempt is live until the leaving's last piece: a record to it in between is fine
    h.r(0, 2, WatermarkAnnouncement(5, None))
    h.i(0, 2, ReaderLeaving([split("b"), split("c")], piece=1))
    h.r(0, 2, SplitsReleased("left", None, ["a", "b", "c"]))
    result = h.audit()
    assert result.ok, [str(v) for v in result.violations]
    assert result.summary.subtasks[0].acked_seq == 1
    assert result.summary.released_by_reason == {"fenced": 0, "left": 3, "recovery": 3}
    assert result.summary.incomplete_records == {}


def test_hand_stream_a_record_never_whole_is_counted_and_not_acted_on() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a"), split("b")]))
    h.i(0, 1, ReaderLeaving([split("a")], piece=0, more=True))
    h.i(0, 1, ReaderLeaving([split("a")], piece=0, more=True))  # sent again: the first never became whole
    h.r(0, 1, WatermarkAnnouncement(5, None))  # still live: no leaving became whole
    result = h.audit()
    assert result.ok, [str(v) for v in result.violations]
    assert result.summary.incomplete_records == {"ReaderLeaving": 1}


def test_hand_stream_fence_releasing_acknowledged_split_is_imprecise() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a")]))
    h.i(0, 1, CheckpointAck(1, 1, [split("a")]))
    h.r(0, 1, AddSplits(2, [split("c")]))
    h.i(0, None, ReaderRegistration("inc-2", "h", [], None))
    at = h.r(0, 1, SplitsReleased("fenced", 1, ["a", "c"]))
    result = h.audit()
    assert first_at(result) == (ViolationKind.RELEASE_IMPRECISE, READERS, *at)
    assert "wrongly includes a" in result.violations[0].message


def test_hand_stream_registration_without_fence_release() -> None:
    h = Hand()
    h.register(0, 1)
    h.i(0, None, ReaderRegistration("inc-2", "h", [], None))
    at = h.r(0, 2, ReaderRegistered("inc-2", 2))
    assert first_at(h.audit()) == (ViolationKind.UNANNOUNCED_FENCE, READERS, *at)


def test_hand_stream_split_owned_by_two_subtasks() -> None:
    h = Hand()
    h.register(0, 1)
    h.register(1, 1)
    h.r(0, 1, AddSplits(1, [split("a")]))
    at = h.r(1, 1, AddSplits(1, [split("a")]))
    result = h.audit()
    assert first_at(result) == (ViolationKind.SPLIT_OWNED_TWICE, READERS, *at)
    assert "a (owned by subtask 0)" in result.violations[0].message


def test_hand_stream_release_of_a_split_not_owned() -> None:
    h = Hand()
    h.register(0, 1)
    h.register(1, 1)
    h.r(0, 1, AddSplits(1, [split("a")]))
    at = h.r(1, 1, SplitsReleased("recovery", None, ["a"]))
    result = h.audit()
    assert first_at(result) == (ViolationKind.RELEASE_NOT_OWNED, READERS, *at)
    assert "a (owned by subtask 0)" in result.violations[0].message


def test_hand_stream_finished_split_assigned_again() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a")]))
    h.i(0, 1, SplitsFinished(["a"]))
    at = h.r(0, 1, AddSplits(2, [split("a")]))
    assert first_at(h.audit()) == (ViolationKind.FINISHED_SPLIT_ASSIGNED, READERS, *at)


def test_hand_stream_finish_from_fenced_attempt_changes_nothing() -> None:
    h = Hand()
    h.register(0, 1)
    h.r(0, 1, AddSplits(1, [split("a")]))
    h.i(0, 7, SplitsFinished(["a"]))  # not the current attempt: fenced
    result = h.audit()
    assert result.ok
    assert result.summary.splits_finished == 0 and result.summary.splits_owned == 1
    assert result.summary.fenced_messages == 1


def test_hand_stream_wrong_partition_and_duplicate_cseq() -> None:
    h = Hand()
    h.register(0, 1)
    env = envelope(AddSplits(1, [split("a")]), source=SOURCE, subtask=0, attempt=1, epoch=1, ts=1, cseq=1)
    h.readers.append((3, 0, encode(env)))
    kinds = {(v.kind, v.location.partition) for v in h.audit().violations}
    assert (ViolationKind.WRONG_PARTITION, 3) in kinds
    assert (ViolationKind.CSEQ_ORDER, 3) in kinds


def test_hand_stream_inbox_offset_going_backwards() -> None:
    h = Hand()
    h.register(0, 1)
    h.i(0, 1, Heartbeat(1, False))
    h.r(0, 1, WatermarkAnnouncement(1, None))
    env = envelope(
        WatermarkAnnouncement(1, None),
        source=SOURCE,
        subtask=0,
        attempt=1,
        epoch=1,
        ts=9,
        cseq=99,
        inbox_offset=0,
    )
    h.readers.append((0, 9, encode(env)))
    assert first_at(h.audit()) == (ViolationKind.INBOX_OFFSET_BACKWARDS, READERS, 0, 9)


# -- report --------------------------------------------------------------------------------------


def test_report_json_and_table(clean_run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    result = audit(clean_run.inbox, clean_run.readers)
    data = orjson.loads(to_json_bytes(result))
    assert data == orjson.loads(orjson.dumps(to_json(result)))
    assert data["ok"] is True
    assert data["summary"]["splits_assigned"] == 40
    print_report(result)
    out = capsys.readouterr().out
    assert "audit ok" in out and "splits ever assigned" in out

    i = find(clean_run.readers, lambda e: isinstance(e.body, AddSplits) and e.body.seq == 3)
    bad = audit(clean_run.inbox, rewrite(clean_run.readers, i, lambda e: with_body(e, seq=2)))
    data = orjson.loads(to_json_bytes(bad))
    assert data["ok"] is False
    assert data["violations"][0]["kind"] == "seq-reused"
    assert data["violations"][0]["offset"] == clean_run.readers[i][1]
    print_report(bad)
    out = capsys.readouterr().out
    assert "audit failed" in out and "first violation at" in out


# -- cooperative rebalancing (v3) ----------------------------------------------------------------


def _releasing() -> Hand:
    """Subtask 0 owns a and b; a ReleaseRequest (seq 2) asks for a; subtask 1 is live."""
    h = Hand()
    h.register(0, 1)
    h.register(1, 1)
    h.r(0, 1, AddSplits(1, [split("a"), split("b")]))
    h.r(0, 1, ReleaseRequest(2, ["a"]))
    return h


def test_hand_stream_a_split_returned_then_given_elsewhere_is_clean() -> None:
    h = _releasing()
    h.i(0, 1, CheckpointAck(1, 2, [split("b")], returned=[{**split("a"), "position": 3}]))
    h.r(0, 1, SplitsReleased("returned", None, ["a"]))
    h.r(1, 1, AddSplits(1, [{**split("a"), "position": 3}]))
    result = h.audit()
    assert result.ok, [str(v) for v in result.violations]
    assert result.summary.released_by_reason == {"returned": 1}
    assert {s.subtask: s.owned for s in result.summary.subtasks} == {0: 1, 1: 1}


def test_hand_stream_a_requested_split_given_elsewhere_before_it_is_returned_is_owned_twice() -> None:
    h = _releasing()
    at = h.r(1, 1, AddSplits(1, [split("a")]))
    result = h.audit()
    assert first_at(result) == (ViolationKind.SPLIT_OWNED_TWICE, READERS, *at)


def test_hand_stream_a_release_as_returned_before_any_ack_returned_it_is_imprecise() -> None:
    h = _releasing()
    h.i(0, 1, CheckpointAck(1, 1, [split("a"), split("b")]))  # before the request: returns nothing
    at = h.r(0, 1, SplitsReleased("returned", None, ["a"]))
    result = h.audit()
    assert first_at(result) == (ViolationKind.RELEASE_IMPRECISE, READERS, *at)
    assert "no accepted CheckpointAck" in result.violations[0].message


def test_hand_stream_a_release_request_must_take_the_next_seq_and_name_owned_splits() -> None:
    h = _releasing()
    at = h.r(0, 1, ReleaseRequest(2, ["b"]))
    at2 = h.r(1, 1, ReleaseRequest(1, ["b"]))
    result = h.audit()
    assert [(v.kind, v.location.partition, v.location.offset) for v in result.violations] == [
        (ViolationKind.SEQ_REUSED, *at),
        (ViolationKind.RELEASE_NOT_OWNED, *at2),
    ]


# -- incarnations (v4) ---------------------------------------------------------------------------


def test_hand_stream_an_attempt_given_to_an_incarnation_that_never_registered_for_it() -> None:
    h = Hand()
    h.register(0, 1)
    h.i(1, None, ReaderRegistration("inc-9", "h", [], None))  # registers for subtask 1, not 0
    h.r(0, 1, SplitsReleased("fenced", 1, []))
    at = h.r(0, 2, ReaderRegistered("inc-9", 2))
    result = h.audit()
    assert first_at(result) == (ViolationKind.INCARNATION_WITHOUT_REGISTRATION, READERS, *at)
    assert "incarnation inc-9, which never asked to register for subtask 0" in result.violations[0].message


def test_hand_stream_a_message_from_another_incarnation_changes_nothing() -> None:
    """A reader naming subtask 0's live attempt from another incarnation is dropped, as by
    the coordinator: its SplitsFinished finishes nothing, and a coordinator that had
    taken its ack's returned split would show as an imprecise release."""
    h = _releasing()
    h.i(0, 1, SplitsFinished(["b"]), incarnation="someone-else")
    h.i(0, 1, CheckpointAck(1, 2, [split("b")], returned=[split("a")]), incarnation="someone-else")
    clean = h.audit()
    assert clean.ok, [str(v) for v in clean.violations]
    assert clean.summary.other_incarnation_messages == 2
    assert clean.summary.subtasks[0].other_incarnation_messages == 2
    assert (clean.summary.splits_finished, clean.summary.splits_owned) == (0, 2)
    at = h.r(0, 1, SplitsReleased("returned", None, ["a"]))
    result = h.audit()
    assert result.summary.other_incarnation_messages == 2
    assert first_at(result) == (ViolationKind.RELEASE_IMPRECISE, READERS, *at)


# -- cseq gaps -----------------------------------------------------------------------------------


def test_hand_stream_a_missing_cseq_is_a_gap_at_the_next_record() -> None:
    h = Hand()
    h.register(0, 1)
    h.register(1, 1)
    h.cseq += 2  # two coordinator records that nobody can read
    at = h.r(1, 1, AddSplits(1, [split("a")]))
    h.r(0, 1, AddSplits(1, [split("b")]))
    result = h.audit()
    assert len(result.violations) == 1, [str(v) for v in result.violations]
    assert first_at(result) == (ViolationKind.CSEQ_GAP, READERS, *at)
    assert "no record carries cseq 3 to 4 before this one (cseq 5)" in result.violations[0].message


def test_hand_stream_an_undecodable_record_that_shows_its_cseq_is_no_gap() -> None:
    h = Hand()
    h.register(0, 1)
    h.cseq += 1
    h.readers.append((0, 99, orjson.dumps({"v": 99, "type": "FromTheFuture", "cseq": h.cseq})))
    h.r(0, 1, AddSplits(1, [split("a")]))
    result = h.audit()
    assert result.ok, [str(v) for v in result.violations]
    assert len(result.skipped) == 1
