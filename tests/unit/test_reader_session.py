"""ReaderSession: the reader's side of docs/protocol.md, without Kafka."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from sluicegate.api import (
    Boundedness,
    InputStatus,
    LowWatermarkListener,
    ReadResult,
    Record,
    Source,
    SourceReader,
    SourceReaderContext,
    SplitEnumerator,
    SplitEnumeratorContext,
    WireSplit,
)
from sluicegate.protocol import (
    AddSplits,
    CoordinatorSourceEvent,
    Envelope,
    Heartbeat,
    NoMoreSplits,
    ReaderRegistered,
    ReaderSourceEvent,
    ReleaseRequest,
    RequestSplit,
    SplitsReleased,
    WatermarkAnnouncement,
    decode,
    encode,
    envelope,
)
from sluicegate.protocol.messages import Body, Direction
from sluicegate.protocol.pieces import MAX_RECORD_BYTES
from sluicegate.reader.protocol import CheckpointPlan, Fenced
from sluicegate.reader.session import Disposition, Phase, ReaderSession
from sluicegate.reader.state import ReaderCheckpoint, StateRecordError
from sluicegate.reader.watermark import SplitWatermarks
from sluicegate_connectors.sequence import SequenceOptions, SequenceSource

SOURCE = "orders"
SUBTASK = 3


# -- a connector without reassignment on recovery, which records what it is told --


@dataclass
class FakeSplit:
    split_id: str
    position: int = 0
    end: int = 3


class FakeCodec:
    def to_wire(self, split: FakeSplit) -> WireSplit:
        return {"split_id": split.split_id, "position": split.position, "end": split.end}

    def from_wire(self, data: Mapping[str, Any]) -> FakeSplit:
        return FakeSplit(data["split_id"], data.get("position", 0), data.get("end", 3))


class FakeReader(SourceReader[FakeSplit]):
    def __init__(self, context: SourceReaderContext) -> None:
        self.context = context
        self.splits: dict[str, FakeSplit] = {}
        self.added: list[str] = []
        self.no_more = False
        self.events: list[Any] = []
        self.paused: set[str] = set()
        self.closed = False
        self.completed: list[int] = []

    def add_splits(self, splits: Sequence[FakeSplit]) -> None:
        for s in splits:
            self.splits[s.split_id] = FakeSplit(s.split_id, s.position, s.end)
            self.added.append(s.split_id)

    def next_batch(self, max_records: int) -> ReadResult:
        result = ReadResult()
        for split in list(self.splits.values()):
            if split.split_id in self.paused:
                continue
            result.records.append(Record(split.split_id, split.position, 1000 * split.position))
            split.position += 1
            if split.position >= split.end:
                result.finished_split_ids.append(split.split_id)
                del self.splits[split.split_id]
        active = [s for s in self.splits if s not in self.paused]
        result.status = InputStatus.MORE_AVAILABLE if active else InputStatus.NOTHING_AVAILABLE
        return result

    def snapshot_state(self, checkpoint_id: int) -> list[FakeSplit]:
        return [FakeSplit(s.split_id, s.position, s.end) for s in self.splits.values()]

    def notify_no_more_splits(self) -> None:
        self.no_more = True

    def handle_source_event(self, event: Any) -> None:
        self.events.append(event)
        self.context.send_source_event({"echo": event})

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed.append(checkpoint_id)

    def pause_or_resume_splits(self, to_pause: Sequence[str], to_resume: Sequence[str]) -> None:
        self.paused.update(to_pause)
        self.paused.difference_update(to_resume)

    def close(self) -> None:
        self.closed = True


class FakeSource(Source[FakeSplit]):
    """No SupportsSplitReassignmentOnRecovery: restored splits stay with the reader."""

    def __init__(self) -> None:
        self.readers: list[FakeReader] = []

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> FakeSource:
        return cls()

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def split_codec(self) -> FakeCodec:
        return FakeCodec()

    def create_enumerator(self, context: SplitEnumeratorContext[FakeSplit]) -> SplitEnumerator[FakeSplit]:
        raise NotImplementedError

    def restore_enumerator(
        self, context: SplitEnumeratorContext[FakeSplit], checkpoint: Any
    ) -> SplitEnumerator[FakeSplit]:
        raise NotImplementedError

    def create_reader(self, context: SourceReaderContext) -> FakeReader:
        reader = FakeReader(context)
        self.readers.append(reader)
        return reader


# -- helpers -------------------------------------------------------------------


def to_reader(body: Body, attempt: int | None, epoch: int = 1, subtask: int = SUBTASK) -> Envelope:
    """An envelope as it arrives: encoded and decoded, so the schemas are checked too."""
    env = envelope(body, source=SOURCE, subtask=subtask, attempt=attempt, epoch=epoch, ts=1)
    return decode(encode(env), Direction.TO_READER)


def split(sid: str, position: int = 0, end: int = 3) -> WireSplit:
    return {"split_id": sid, "position": position, "end": end}


def fake_session(
    restored: ReaderCheckpoint | None = None,
) -> tuple[ReaderSession[FakeSplit], FakeSource]:
    source = FakeSource()
    return ReaderSession(SOURCE, SUBTASK, source, location="host-a:42", restored=restored), source


def registered(session: ReaderSession[Any], attempt: int = 1, epoch: int = 1) -> None:
    reg = session.begin_registration()
    out = session.on_message(to_reader(ReaderRegistered(reg.incarnation, attempt), attempt, epoch))
    assert out.disposition is Disposition.REGISTERED
    assert session.attempt == attempt


def checkpoint(cid: int, applied_seq: int, splits: list[WireSplit], epoch: int = 1) -> ReaderCheckpoint:
    return ReaderCheckpoint(SOURCE, SUBTASK, cid, applied_seq, splits, epoch=epoch, attempt=1)


def drain(session: ReaderSession[Any], rounds: int = 20) -> list[Record]:
    records: list[Record] = []
    for _ in range(rounds):
        records.extend(session.read(100).records)
    return records


# -- registration ----------------------------------------------------------------


def test_registration_reports_the_restored_checkpoint() -> None:
    restored = checkpoint(7, 4, [split("a", 1)], epoch=2)
    session, _ = fake_session(restored)
    reg = session.begin_registration()
    assert reg.reported_splits == [split("a", 1)]
    assert reg.restored_checkpoint_id == 7
    assert reg.location == "host-a:42"
    assert session.phase is Phase.REGISTERING
    env = session.envelope(reg, now_ms=5)
    assert env.attempt is None and env.epoch == 2 and env.subtask == SUBTASK and env.type == "ReaderRegistration"


def test_fresh_registration_reports_nothing() -> None:
    session, _ = fake_session()
    reg = session.begin_registration()
    assert reg.reported_splits == [] and reg.restored_checkpoint_id is None


def test_only_our_incarnation_registers_us() -> None:
    session, source = fake_session()
    reg = session.begin_registration()
    other = to_reader(ReaderRegistered("someone-else", 4), 4)
    assert session.on_message(other).disposition is Disposition.IGNORED_ATTEMPT
    assert session.phase is Phase.REGISTERING and not source.readers
    assert session.on_message(to_reader(ReaderRegistered(reg.incarnation, 5), 5)).disposition is Disposition.REGISTERED
    assert session.active and session.attempt == 5
    assert session.envelope(session.heartbeat(), 1).attempt == 5


def test_messages_before_registration_are_ignored() -> None:
    session, _ = fake_session()
    session.begin_registration()
    assert session.on_message(to_reader(AddSplits(1, [split("a")]), 1)).disposition is Disposition.IGNORED_ATTEMPT
    assert session.applied_seq == 0


def test_without_reassignment_the_reader_keeps_its_restored_splits() -> None:
    restored = checkpoint(3, 2, [split("a", 1), split("b", 2)])
    session, source = fake_session(restored)
    registered(session)
    assert source.readers[0].added == ["a", "b"]
    assert list(session.owned) == ["a", "b"]
    assert session.applied_seq == 2


def test_without_reassignment_dropped_splits_are_not_kept() -> None:
    restored = checkpoint(3, 2, [split("a", 1), split("b", 2), split("c", 0)])
    session, source = fake_session(restored)
    reg = session.begin_registration()
    out = session.on_message(to_reader(ReaderRegistered(reg.incarnation, 1, ["b"]), 1))
    assert out.disposition is Disposition.REGISTERED
    assert source.readers[0].added == ["a", "c"]
    assert list(session.owned) == ["a", "c"]


def test_with_reassignment_restored_splits_go_back_through_the_coordinator() -> None:
    source = SequenceSource(SequenceOptions(splits=2, records_per_split=5))
    restored = checkpoint(3, 2, [{"split_id": "seq-00000", "start": 0, "end": 5, "position": 2}])
    session: ReaderSession[Any] = ReaderSession(SOURCE, SUBTASK, source, location="h:1", restored=restored)
    reg = session.begin_registration()
    assert reg.reported_splits == restored.splits
    registered(session)
    assert not session.owned
    assert session.read(10).records == []
    # the coordinator hands it back (seq 3, after the checkpointed seq 2)
    assert session.on_message(to_reader(AddSplits(3, restored.splits), 1)).disposition is Disposition.APPLIED
    values = [r.value for r in drain(session)]
    assert values == [2, 3, 4]
    assert session.finished_pending == ["seq-00000"]


# -- assignments ----------------------------------------------------------------------


def test_add_splits_apply_in_seq_order_and_old_seqs_are_skipped() -> None:
    session, source = fake_session(checkpoint(1, 2, []))
    registered(session)
    assert session.on_message(to_reader(AddSplits(2, [split("old")]), 1)).disposition is Disposition.SKIPPED_SEQ
    assert session.on_message(to_reader(AddSplits(3, [split("a")]), 1)).disposition is Disposition.APPLIED
    assert session.on_message(to_reader(AddSplits(3, [split("a")]), 1)).disposition is Disposition.SKIPPED_SEQ
    assert session.on_message(to_reader(AddSplits(5, [split("b")]), 1)).disposition is Disposition.APPLIED
    assert source.readers[0].added == ["a", "b"]
    assert session.applied_seq == 5


def test_messages_to_other_attempts_and_older_epochs_are_ignored() -> None:
    session, source = fake_session()
    registered(session, attempt=2, epoch=3)
    assert (
        session.on_message(to_reader(AddSplits(1, [split("x")]), 1, epoch=3)).disposition is Disposition.IGNORED_ATTEMPT
    )
    assert (
        session.on_message(to_reader(AddSplits(1, [split("y")]), 2, epoch=2)).disposition is Disposition.IGNORED_EPOCH
    )
    assert session.on_message(to_reader(AddSplits(1, [split("z")]), 2, epoch=4)).disposition is Disposition.APPLIED
    assert session.highest_epoch == 4
    assert source.readers[0].added == ["z"]
    assert session.envelope(session.heartbeat(), 1).epoch == 4


def test_a_split_held_already_is_not_added_twice() -> None:
    session, source = fake_session()
    registered(session)
    session.on_message(to_reader(AddSplits(1, [split("a")]), 1))
    session.on_message(to_reader(AddSplits(2, [split("a"), split("b")]), 1))
    assert source.readers[0].added == ["a", "b"]
    assert session.applied_seq == 2


def test_no_more_splits_then_every_split_finished_is_the_bounded_end() -> None:
    session, source = fake_session()
    registered(session)
    session.on_message(to_reader(AddSplits(1, [split("a"), split("b")]), 1))
    assert session.on_message(to_reader(NoMoreSplits(1), 1)).disposition is Disposition.SKIPPED_SEQ
    assert session.on_message(to_reader(NoMoreSplits(2), 1)).disposition is Disposition.APPLIED
    assert source.readers[0].no_more and session.applied_seq == 2
    assert not session.is_finished
    records = drain(session)
    assert sorted((r.split_id, r.value) for r in records) == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 0),
        ("b", 1),
        ("b", 2),
    ]
    assert session.is_finished
    assert sorted(session.finished_pending) == ["a", "b"]
    assert session.maybe_request_split(10_000) is None


def test_request_split_when_idle_at_most_once_a_second() -> None:
    session, _ = fake_session()
    registered(session)
    assert session.maybe_request_split(0) is None  # nothing read yet: don't know
    session.read(10)
    assert session.nothing_to_read
    assert session.maybe_request_split(1_000) == RequestSplit(hostname="host-a")
    assert session.maybe_request_split(1_500) is None
    assert session.maybe_request_split(2_000) == RequestSplit(hostname="host-a")
    session.on_message(to_reader(AddSplits(1, [split("a", end=100)]), 1))
    assert session.maybe_request_split(5_000) is None
    session.read(10)
    assert session.maybe_request_split(6_000) is None


def test_source_events_both_ways() -> None:
    session, source = fake_session()
    registered(session)
    assert session.on_message(to_reader(CoordinatorSourceEvent({"k": 1}), 1)).disposition is Disposition.APPLIED
    assert source.readers[0].events == [{"k": 1}]
    assert session.take_outbox() == [ReaderSourceEvent(payload={"echo": {"k": 1}})]
    assert session.take_outbox() == []


# -- fencing ---------------------------------------------------------------------------


def test_splits_released_for_our_attempt_fences_and_restores_the_last_checkpoint() -> None:
    session, source = fake_session()
    registered(session, attempt=1)
    session.on_message(to_reader(AddSplits(1, [split("a", end=10)]), 1))
    session.read(1)
    plan = session.prepare_checkpoint()
    session.checkpoint_committed(plan)
    session.on_message(to_reader(AddSplits(2, [split("b", end=10)]), 1))
    session.read(1)
    # the release of another attempt's failure is not ours
    assert session.on_message(to_reader(SplitsReleased("fenced", 0, []), 1)).disposition is Disposition.APPLIED
    assert session.active
    out = session.on_message(to_reader(SplitsReleased("session-timeout", 1, ["b"]), 1))
    assert out.disposition is Disposition.FENCED
    assert isinstance(out, Fenced) and out.producer_fenced, "a timed-out attempt's producer was fenced first"
    assert session.phase is Phase.UNREGISTERED and source.readers[0].closed
    assert not session.owned and session.reader is None
    reg = session.begin_registration()
    assert reg.restored_checkpoint_id == 1
    assert reg.reported_splits == [split("a", 1, 10)]
    session.on_message(to_reader(ReaderRegistered(reg.incarnation, 2), 2))
    assert session.attempt == 2 and session.applied_seq == 1
    assert source.readers[1].added == ["a"]  # FakeSource keeps restored splits
    assert source.readers[1].splits["a"].position == 1


def test_a_newer_incarnation_fences_us() -> None:
    session, _ = fake_session()
    registered(session, attempt=3)
    assert session.on_message(to_reader(ReaderRegistered("older", 2), 2)).disposition is Disposition.IGNORED_ATTEMPT
    assert session.active
    out = session.on_message(to_reader(ReaderRegistered("newer", 4), 4))
    assert out.disposition is Disposition.FENCED
    assert isinstance(out, Fenced) and not out.producer_fenced, "the newer process fenced the producer, if anyone"
    assert session.phase is Phase.UNREGISTERED
    assert session.fenced_reason and "newer" in session.fenced_reason


def test_self_fence_drops_state() -> None:
    session, source = fake_session()
    registered(session)
    session.on_message(to_reader(AddSplits(1, [split("a")]), 1))
    session.self_fence("no heartbeat")
    assert session.phase is Phase.UNREGISTERED and not session.owned and source.readers[0].closed
    assert session.begin_registration().reported_splits == []


def test_release_without_failure_does_not_fence() -> None:
    session, _ = fake_session()
    registered(session)
    out = session.on_message(to_reader(SplitsReleased("recovery", None, ["x"]), 1))
    assert out.disposition is Disposition.APPLIED and session.active


# -- checkpoints -------------------------------------------------------------------------


def test_checkpoint_carries_positions_applied_seq_and_finished_splits() -> None:
    session, source = fake_session(checkpoint(4, 0, [], epoch=2))
    registered(session, attempt=6, epoch=2)
    session.on_message(to_reader(AddSplits(1, [split("a", end=1), split("b", end=5)]), 6, epoch=2))
    session.read(10)
    plan = session.prepare_checkpoint()
    assert plan.checkpoint_id == 5
    assert plan.checkpoint == ReaderCheckpoint(
        SOURCE, SUBTASK, 5, 1, [split("b", 1, 5)], epoch=2, attempt=6, no_more_splits=False
    )
    assert plan.finished_split_ids == ["a"] and plan.records_since_last == 2
    ack = plan.ack()
    assert (ack.checkpoint_id, ack.applied_seq, ack.splits) == (5, 1, [split("b", 1, 5)])
    assert [f.split_ids for f in plan.splits_finished()] == [["a"]]
    # not committed yet: the next attempt would still carry "a" as finished-pending
    session.read(1)
    session.checkpoint_committed(plan)
    assert session.finished_pending == []
    assert session.last_checkpoint == plan.checkpoint
    assert source.readers[0].completed == [5]
    nxt = session.prepare_checkpoint()
    assert nxt.checkpoint_id == 6 and nxt.splits_finished() == [] and nxt.records_since_last == 1


def test_after_its_first_ack_an_attempt_acknowledges_only_the_splits_that_moved() -> None:
    session, _ = _reading(FakeSource())  # a, b and c at position 1
    first = session.prepare_checkpoint()
    assert first.ack().base_checkpoint_id is None, "an attempt's first ack names every split"
    assert [s["split_id"] for s in first.ack().splits] == ["a", "b", "c"]
    session.checkpoint_committed(first)

    session.on_message(to_reader(AddSplits(2, [split("d", end=100)]), 1))
    unread = session.prepare_checkpoint()
    assert unread.checkpoint.splits == [*first.checkpoint.splits, split("d", 0, 100)], "the state stays whole"
    ack = unread.ack()
    assert (ack.base_checkpoint_id, ack.splits) == (first.checkpoint_id, [split("d", 0, 100)])

    session.read(2)  # not committed: the next ack still names changes since the first
    moved = session.prepare_checkpoint().ack()
    assert moved.base_checkpoint_id == first.checkpoint_id
    assert {s["split_id"] for s in moved.splits} == {"d"} | {
        s["split_id"] for s in session.prepare_checkpoint().checkpoint.splits if s["position"] > 1
    }


def test_a_new_attempt_acknowledges_every_split_first_even_from_the_checkpoint_it_restored() -> None:
    session, _ = _reading(FakeSource())
    first = session.prepare_checkpoint()
    session.checkpoint_committed(first)
    session.on_message(to_reader(SplitsReleased("session-timeout", 1, []), 1))
    assert not session.active
    registered(session, attempt=2)
    ack = session.prepare_checkpoint().ack()
    assert ack.base_checkpoint_id is None
    assert [s["split_id"] for s in ack.splits] == ["a", "b", "c"]


def test_splits_finished_in_one_checkpoint_beyond_one_record_go_in_records_that_each_fit() -> None:
    many = [f"split-{k:06d}" for k in range(80_000)]  # about 1.2 MB of ids
    plan = CheckpointPlan(ReaderCheckpoint(SOURCE, SUBTASK, 1, 0, []), many)
    records = plan.splits_finished()
    assert len(records) > 1
    assert all(len(orjson.dumps(r.split_ids)) < MAX_RECORD_BYTES for r in records)
    assert [sid for r in records for sid in r.split_ids] == many
    assert [type(b).__name__ for b in plan.messages()] == ["SplitsFinished"] * len(records) + ["CheckpointAck"]


def test_uncommitted_finished_splits_stay_pending() -> None:
    session, _ = fake_session()
    registered(session)
    session.on_message(to_reader(AddSplits(1, [split("a", end=1)]), 1))
    session.read(10)
    first = session.prepare_checkpoint()  # pretend its transaction failed
    second = session.prepare_checkpoint()
    assert first.finished_split_ids == second.finished_split_ids == ["a"]
    assert first.checkpoint_id == second.checkpoint_id == 1


def test_leaving_state_record_has_no_splits() -> None:
    session, _ = fake_session()
    registered(session)
    session.on_message(to_reader(AddSplits(1, [split("a", end=10)]), 1))
    session.read(2)
    plan = session.prepare_checkpoint()
    session.checkpoint_committed(plan)
    leaving = session.leaving_checkpoint()
    assert leaving.splits == [] and leaving.checkpoint_id == 1 and leaving.applied_seq == 1


# -- watermarks --------------------------------------------------------------------------


def test_heartbeat_watermark_is_min_over_unfinished_splits() -> None:
    session, _ = fake_session()
    registered(session)
    hb = session.heartbeat()
    assert hb.watermark is None and hb.idle
    session.on_message(to_reader(AddSplits(1, [split("a", 0, end=2), split("b", 5, end=9)]), 1))
    hb = session.heartbeat()
    assert hb.watermark is None and not hb.idle
    session.read(10)  # a@0 -> 0 ms, b@5 -> 5000 ms
    assert session.heartbeat().watermark == 0
    session.read(10)  # a finishes at 1000 ms; b at 6000 ms
    assert session.heartbeat().watermark == 6000
    drain(session)
    # no split left, and no low watermark announced yet: nothing to report
    assert session.heartbeat() == Heartbeat(watermark=None, idle=True)


def test_alignment_pauses_splits_past_the_allowed_watermark_and_resumes_them() -> None:
    session, source = fake_session()
    registered(session)
    session.on_message(to_reader(AddSplits(1, [split("slow", 0, end=100), split("fast", 50, end=100)]), 1))
    session.read(10)  # slow at 0 ms, fast at 50000 ms
    session.on_message(to_reader(WatermarkAnnouncement(0, 10_000), 1))
    reader = source.readers[0]
    assert reader.paused == {"fast"}
    session.read(10)
    assert session.watermarks.split_watermark("fast") == 50_000
    session.on_message(to_reader(WatermarkAnnouncement(40_000, 60_000), 1))
    assert reader.paused == set()
    assert session.low_watermark == 40_000
    session.on_message(to_reader(WatermarkAnnouncement(40_000, None), 1))
    assert reader.paused == set()


class ListeningReader(FakeReader, LowWatermarkListener):
    def __init__(self, context: SourceReaderContext) -> None:
        super().__init__(context)
        self.low_watermarks: list[int] = []

    def notify_low_watermark(self, watermark: int) -> None:
        self.low_watermarks.append(watermark)


class ListeningSource(FakeSource):
    def create_reader(self, context: SourceReaderContext) -> FakeReader:
        reader = ListeningReader(context)
        self.readers.append(reader)
        return reader


def test_a_low_watermark_listener_hears_every_announcement_and_an_empty_reader_reports_it() -> None:
    session = ReaderSession(SOURCE, SUBTASK, ListeningSource(), location="host-a:42")
    registered(session)
    session.on_message(to_reader(WatermarkAnnouncement(None, None), 1))
    session.on_message(to_reader(WatermarkAnnouncement(30_000, None), 1))
    session.on_message(to_reader(WatermarkAnnouncement(45_000, 50_000), 1))
    reader = session.reader
    assert isinstance(reader, ListeningReader) and reader.low_watermarks == [30_000, 45_000]
    # with no split at all it reports the announced low watermark: it never holds anyone back
    assert session.heartbeat() == Heartbeat(watermark=45_000, idle=True)
    session.on_message(to_reader(AddSplits(1, [split("a", 0, end=5)]), 1))
    session.read(10)
    assert session.heartbeat() == Heartbeat(watermark=0, idle=False)  # its own again, behind the low one


def test_split_watermarks_ignore_unknown_splits() -> None:
    wm = SplitWatermarks()
    wm.add(["a"])
    wm.observe([Record("a", 1, 5), Record("zzz", 1, 1), Record("a", 2, None), Record("a", 3, 4)])
    assert wm.current() == 5 and wm.split_ids == ["a"]
    assert wm.align(3).to_pause == ["a"]
    assert wm.align(3).to_pause == []
    assert wm.align(None).to_resume == ["a"]


# -- state record ---------------------------------------------------------------------------


def test_state_record_round_trip_and_errors() -> None:
    cp = checkpoint(9, 4, [split("a", 2)], epoch=3)
    assert ReaderCheckpoint.decode(cp.encode()) == cp
    with pytest.raises(StateRecordError):
        ReaderCheckpoint.decode(b"not json")
    with pytest.raises(StateRecordError):
        ReaderCheckpoint.decode(b'{"v": 99}')
    with pytest.raises(StateRecordError):
        ReaderCheckpoint.decode(b'{"v": 1, "source": "s", "subtask": 0}')
    with pytest.raises(StateRecordError):
        ReaderCheckpoint.decode(
            b'{"v": 1, "source": "s", "subtask": 0, "checkpoint_id": 1, "applied_seq": 0, "epoch": 0, "splits": [{}]}'
        )


def test_messages_for_another_subtask_are_ignored() -> None:
    session, _ = fake_session()
    registered(session)
    assert (
        session.on_message(to_reader(AddSplits(1, [split("a")]), 1, subtask=SUBTASK + 1)).disposition
        is Disposition.IGNORED_SOURCE
    )


def test_an_unchanged_reader_needs_no_checkpoint() -> None:
    session, _ = fake_session()
    registered(session)
    assert session.checkpoint_due  # nothing durable yet for this attempt
    session.checkpoint_committed(session.prepare_checkpoint())
    assert not session.checkpoint_due
    session.on_message(to_reader(AddSplits(1, [split("a", end=2)]), 1))
    assert session.checkpoint_due
    session.checkpoint_committed(session.prepare_checkpoint())
    session.read(1)
    assert session.checkpoint_due
    session.checkpoint_committed(session.prepare_checkpoint())
    session.read(1)  # finishes "a"
    session.checkpoint_committed(session.prepare_checkpoint())
    session.read(1)
    assert not session.checkpoint_due


# -- cooperative rebalancing (v3) -------------------------------------------------------


class RemovingReader(FakeReader):
    """A connector reader that can drop splits (``remove_splits``)."""

    def __init__(self, context: SourceReaderContext) -> None:
        super().__init__(context)
        self.removed: list[str] = []

    def remove_splits(self, split_ids: Sequence[str]) -> None:
        for split_id in split_ids:
            self.splits.pop(split_id, None)
            self.removed.append(split_id)


class RemovingSource(FakeSource):
    def create_reader(self, context: SourceReaderContext) -> FakeReader:
        reader = RemovingReader(context)
        self.readers.append(reader)
        return reader


def _reading(source: FakeSource) -> tuple[ReaderSession[FakeSplit], FakeSource]:
    session = ReaderSession(SOURCE, SUBTASK, source, location="host-a:42")
    registered(session)
    session.on_message(to_reader(AddSplits(1, [split("a", end=100), split("b", end=100), split("c", end=100)]), 1))
    session.read(10)  # each at position 1
    return session, source


def test_a_release_request_is_applied_in_seq_order_and_the_splits_go_back_with_the_next_checkpoint() -> None:
    session, source = _reading(FakeSource())
    assert session.on_message(to_reader(ReleaseRequest(2, ["a", "b"]), 1)).disposition is Disposition.APPLIED
    assert session.applied_seq == 2 and session.checkpoint_due
    assert session.on_message(to_reader(ReleaseRequest(2, ["c"]), 1)).disposition is Disposition.SKIPPED_SEQ
    # they are read on until the checkpoint: it holds their positions
    session.read(10)
    plan = session.prepare_checkpoint()
    assert plan.returned == [split("a", 2, 100), split("b", 2, 100)]
    assert plan.checkpoint.splits == [split("c", 2, 100)] and plan.checkpoint.applied_seq == 2
    ack = plan.ack()
    assert (ack.splits, ack.returned) == ([split("c", 2, 100)], plan.returned)
    assert set(session.owned) == {"a", "b", "c"}, "nothing changes before the commit"

    session.checkpoint_committed(plan)
    assert set(session.owned) == {"c"} and session.protocol.releasing == {}
    # this connector cannot drop splits: a new reader from the committed checkpoint
    old, new = source.readers
    assert old.closed and not new.closed
    assert {s.split_id: s.position for s in new.splits.values()} == {"c": 2}
    assert {r.split_id for r in drain(session, 3)} == {"c"}
    assert session.prepare_checkpoint().returned == []


def test_a_connector_with_remove_splits_drops_them_and_keeps_its_reader() -> None:
    session, source = _reading(RemovingSource())
    session.on_message(to_reader(ReleaseRequest(2, ["b"]), 1))
    plan = session.prepare_checkpoint()
    session.checkpoint_committed(plan)
    (reader,) = source.readers
    assert isinstance(reader, RemovingReader) and reader.removed == ["b"] and not reader.closed
    assert {r.split_id for r in drain(session, 3)} == {"a", "c"}


def test_the_rebuilt_reader_keeps_no_more_splits_and_paused_splits() -> None:
    session, source = _reading(FakeSource())
    session.on_message(to_reader(NoMoreSplits(2), 1))
    session.on_message(to_reader(WatermarkAnnouncement(0, 500), 1))
    session.read(10)  # every split past 500 ms of event time: paused
    paused = set(source.readers[0].paused)
    assert paused == {"a", "b", "c"}
    session.on_message(to_reader(ReleaseRequest(3, ["a"]), 1))
    session.checkpoint_committed(session.prepare_checkpoint())
    new = source.readers[-1]
    assert new.no_more and new.paused == paused - {"a"}


def test_splits_not_held_or_finished_meanwhile_are_not_returned() -> None:
    session, _ = _reading(FakeSource())
    session.on_message(to_reader(AddSplits(2, [split("d", 0, 1)]), 1))
    session.on_message(to_reader(ReleaseRequest(3, ["d", "zz"]), 1))
    assert session.counters["release_not_held"] == 1
    session.read(10)  # d finishes
    plan = session.prepare_checkpoint()
    assert plan.returned == [] and plan.finished_split_ids == ["d"]


def test_a_fence_forgets_the_requests() -> None:
    session, _ = _reading(FakeSource())
    session.on_message(to_reader(ReleaseRequest(2, ["a"]), 1))
    session.on_message(to_reader(SplitsReleased("fenced", 1, []), 1))
    assert session.phase is Phase.UNREGISTERED and session.protocol.releasing == {}


def test_the_sequence_reader_gives_splits_back_at_their_positions_and_reads_on_the_rest() -> None:
    options = SequenceOptions(splits=3, records_per_split=None)
    source = SequenceSource(options)
    session: ReaderSession[Any] = ReaderSession(SOURCE, SUBTASK, source, location="h:1")
    registered(session)
    wire = [source.split_codec.to_wire(s) for s in options.all_splits()]
    session.on_message(to_reader(AddSplits(1, wire), 1))
    session.read(30)
    session.on_message(to_reader(ReleaseRequest(2, [wire[0]["split_id"]]), 1))
    plan = session.prepare_checkpoint()
    (returned,) = plan.returned
    assert returned["split_id"] == wire[0]["split_id"] and returned["position"] == 10
    reader = session.reader
    session.checkpoint_committed(plan)
    assert session.reader is reader, "the sequence reader drops the split itself"
    records = drain(session, 3)
    assert records and wire[0]["split_id"] not in {r.split_id for r in records}


def test_a_connector_whose_remove_splits_raises_is_replaced_by_a_reader_from_the_checkpoint() -> None:
    class Broken(RemovingReader):
        def remove_splits(self, split_ids: Sequence[str]) -> None:
            raise RuntimeError("bug")

    class BrokenSource(FakeSource):
        def create_reader(self, context: SourceReaderContext) -> FakeReader:
            reader = Broken(context)
            self.readers.append(reader)
            return reader

    session, source = _reading(BrokenSource())
    session.on_message(to_reader(ReleaseRequest(2, ["a"]), 1))
    session.checkpoint_committed(session.prepare_checkpoint())
    old, new = source.readers
    assert old.closed and set(new.splits) == {"b", "c"}


def test_split_idleness_in_the_session_heartbeat() -> None:
    """A quiet split stops holding the reader back; all quiet: the reader heartbeats idle."""
    now = [0]
    source = FakeSource()
    session = ReaderSession(
        SOURCE, SUBTASK, source, location="h:1", split_idle_timeout_ms=1_000, clock_ms=lambda: now[0]
    )
    registered(session)
    session.on_message(to_reader(AddSplits(1, [split("quiet", 0, end=100), split("busy", 5, end=100)]), 1))
    session.read(10)  # quiet at 0 ms, busy at 5000 ms
    reader = source.readers[0]
    reader.paused.add("quiet")  # the connector gives nothing more from it (as an empty partition)
    assert session.heartbeat() == Heartbeat(watermark=0, idle=False)
    now[0] = 999
    session.read(10)  # busy at 6000 ms
    now[0] = 1_000
    assert session.heartbeat() == Heartbeat(watermark=6_000, idle=False)
    now[0] = 1_999
    assert session.heartbeat() == Heartbeat(watermark=0, idle=True)  # busy is quiet too now
    reader.paused.discard("quiet")
    session.read(10)  # data again: both active
    assert session.heartbeat() == Heartbeat(watermark=1_000, idle=False)
