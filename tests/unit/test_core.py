"""CoordinatorCore against docs/protocol.md, through the in-memory harness.

Every test asserts what the coordinator sends (records per subtask partition,
their order, seq and cseq), who owns what, and its counters.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson
import pytest
from core_harness import CoreHarness, sequence_source

from sluicegate.api import (
    AsyncCallHandle,
    Boundedness,
    NoLiveReaderError,
    Source,
    SourceReader,
    SourceReaderContext,
    SplitEnumerator,
    SplitEnumeratorContext,
    WireSplit,
)
from sluicegate.coordinator.core import CoordinatorCore, ReaderFence, StepFailedError
from sluicegate.protocol import (
    AddSplits,
    CheckpointAck,
    CoordinatorSourceEvent,
    Envelope,
    Heartbeat,
    NoMoreSplits,
    ReaderRegistered,
    ReaderRegistration,
    ReaderSourceEvent,
    ReleaseRequest,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
    encode,
)

# -- a source whose enumerator is scripted by the test ------------------------------------


@dataclass
class Item:
    split_id: str
    position: int = 0


class ItemCodec:
    def to_wire(self, split: Item) -> WireSplit:
        return {"split_id": split.split_id, "position": split.position}

    def from_wire(self, data: Mapping[str, Any]) -> Item:
        return Item(data["split_id"], data["position"])


class ScriptedEnumerator(SplitEnumerator[Item]):
    """Runs the commands a reader sends it as a SourceEvent payload, inside a core step:
    ``["assign", {"0": ["a"]}]``, ``["event", subtask, payload, attempt]``,
    ``["no_more", subtask]``, ``["release", subtask, ["a"]]``, ``["raise", message]``, ``["raise_once", token]``
    (raises the first time a token is seen, in any incarnation), ``["periodic", period_ms]``, ``["cancel"]``
    (the newest periodic call). Errors of assign/no_more are kept in ``errors`` (like an enumerator that keeps
    its splits on NoLiveReaderError)."""

    raised_tokens: ClassVar[set[str]] = set()

    def __init__(self, context: SplitEnumeratorContext[Item], returned: list[Item] | None = None) -> None:
        self.context = context
        self.returned: list[Item] = returned or []
        self.readers_added: list[int] = []
        self.errors: list[Exception] = []
        self.handles: list[AsyncCallHandle] = []
        self.results: list[Any] = []

    def handle_split_request(self, subtask: int, hostname: str | None) -> None:
        pass

    def add_splits_back(self, splits: list[Item], subtask: int) -> None:
        self.returned.extend(splits)

    def add_reader(self, subtask: int) -> None:
        self.readers_added.append(subtask)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return {"returned": [ItemCodec().to_wire(s) for s in self.returned]}

    def handle_source_event(self, subtask: int, event: Any) -> None:
        for command, *args in event:
            if command == "assign":
                try:
                    self.context.assign_splits({int(s): [Item(i) for i in items] for s, items in args[0].items()})
                except Exception as exc:
                    self.errors.append(exc)
            elif command == "no_more":
                try:
                    self.context.signal_no_more_splits(args[0])
                except Exception as exc:
                    self.errors.append(exc)
            elif command == "event":
                self.context.send_event_to_source_reader(*args)
            elif command == "release":
                try:
                    self.context.request_split_release(args[0], args[1])
                except Exception as exc:
                    self.errors.append(exc)
            elif command == "raise":
                raise RuntimeError(args[0])
            elif command == "raise_once" and args[0] not in self.raised_tokens:
                self.raised_tokens.add(args[0])
                raise RuntimeError(f"once: {args[0]}")
            elif command == "periodic":
                handle = self.context.call_async(lambda: "tick", self._on_result, args[0], args[0])
                self.handles.append(handle)
            elif command == "cancel":
                self.handles[-1].cancel()

    def _on_result(self, result: Any, error: BaseException | None) -> None:
        self.results.append(result)


class ScriptedSource(Source[Item]):
    """Keeps reported splits with the reader on recovery (no FLIP-537 reassignment)."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ScriptedSource:
        return cls()

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def split_codec(self) -> ItemCodec:
        return ItemCodec()

    def create_enumerator(self, context: SplitEnumeratorContext[Item]) -> ScriptedEnumerator:
        return ScriptedEnumerator(context)

    def restore_enumerator(self, context: SplitEnumeratorContext[Item], checkpoint: Any) -> ScriptedEnumerator:
        return ScriptedEnumerator(context, [ItemCodec().from_wire(s) for s in checkpoint["returned"]])

    def create_reader(self, context: SourceReaderContext) -> SourceReader[Item]:
        raise NotImplementedError


def scripted(max_parallelism: int = 4, **config: Any) -> CoreHarness:
    return CoreHarness(ScriptedSource(), max_parallelism=max_parallelism, **config)


def run(h: CoreHarness, subtask: int, *commands: list[Any]) -> list[Envelope]:
    """Have ``subtask``'s reader send the commands to the scripted enumerator."""
    return h.send(subtask, ReaderSourceEvent(payload=list(commands))).messages


def enumerator(h: CoreHarness) -> ScriptedEnumerator:
    assert isinstance(h.core.enumerator, ScriptedEnumerator)
    return h.core.enumerator


def kinds(messages: list[Envelope]) -> list[tuple[int, str]]:
    return [(m.subtask, m.type) for m in messages]


def enumerator_positions(h: CoreHarness) -> dict[str, int]:
    pending = h.core.enumerator._distributor.assigner.pending  # type: ignore[attr-defined]
    return {s.split_id: s.position for s in pending}


def split_ids(env: Envelope) -> list[str]:
    body = env.body
    if isinstance(body, AddSplits):
        return [s["split_id"] for s in body.splits]
    assert isinstance(body, SplitsReleased)
    return list(body.split_ids)


# -- registration -------------------------------------------------------------------


def test_registration_sends_reader_registered_then_add_splits() -> None:
    h = CoreHarness(sequence_source(splits=8), max_parallelism=2)
    reader = h.register(0)
    first, second = h.last.messages
    assert first.body == ReaderRegistered(incarnation=reader.incarnation, attempt=1)
    assert isinstance(second.body, AddSplits)
    assert second.body.seq == 1
    assert split_ids(second) == ["seq-00000", "seq-00001", "seq-00002", "seq-00003"]
    for env in (first, second):
        assert (env.subtask, env.attempt, env.epoch, env.inbox_offset, env.source) == (
            0,
            1,
            1,
            0,
            "orders",
        )
    assert [first.cseq, second.cseq] == [1, 2]
    assert reader.attempt == 1 and set(reader.splits) == h.owned(0)

    other = h.register(1)
    assert kinds(h.last.messages) == [(1, "ReaderRegistered"), (1, "AddSplits")]
    assert h.last.messages[1].body.seq == 1  # type: ignore[attr-defined]  # seq is per subtask
    assert [m.cseq for m in h.last.messages] == [3, 4]  # cseq is per source
    assert h.last.messages[1].inbox_offset == 1
    assert len(other.splits) == 4 and h.unassigned() == []


def test_seq_continues_over_later_assignments() -> None:
    h = CoreHarness(sequence_source(splits=6), max_parallelism=2)
    h.register(0)
    h.register(1)
    assert h.unassigned() == []
    h.finish(0)
    h.leave(1)  # its 3 splits go back; the only live reader gets a fair share (2 of 3)
    adds = h.to(0, AddSplits)
    assert [e.body.seq for e in adds] == [1, 2]  # type: ignore[attr-defined]
    assert len(h.owned(0)) == 2 and h.reader(0).applied_seq == 2
    assert len(h.unassigned()) == 1
    h.finish(0)
    h.request_split(0)
    assert [e.body.seq for e in h.to(0, AddSplits)] == [1, 2, 3]  # type: ignore[attr-defined]
    assert h.unassigned() == [] and len(h.owned(0)) == 1


def test_a_message_of_a_never_registered_subtask_is_fenced() -> None:
    h = CoreHarness(max_parallelism=2)
    effects = h.send(1, Heartbeat(watermark=5, idle=False), attempt=1)
    assert not effects
    assert h.counters["fenced_messages"] == 1


# -- fencing ------------------------------------------------------------------------


def test_reregistration_fences_the_old_attempt_first() -> None:
    h = CoreHarness(sequence_source(splits=8), max_parallelism=2)
    h.register(1)
    old = h.register(0)
    old_splits = sorted(old.splits)
    new = h.register(0)
    msgs = h.last.messages
    assert kinds(msgs)[:2] == [(0, "SplitsReleased"), (0, "ReaderRegistered")]
    fenced = msgs[0]
    # the release names the registration that fenced the attempt (v3): a reader still
    # running learns that another process took its subtask
    assert fenced.body == SplitsReleased(
        reason="fenced",
        failed_attempt=1,
        split_ids=old_splits,
        successor_incarnation=new.incarnation,
        successor_location="host-a",
    )
    assert fenced.attempt == 1  # addressed to the failed attempt
    assert msgs[1].body == ReaderRegistered(incarnation=new.incarnation, attempt=2)
    assert old.failed and not old.splits
    # the released, never acknowledged splits came back to the new attempt with the next seq
    assert new.attempt == 2 and sorted(new.splits) == old_splits
    assert h.to(0, AddSplits)[-1].body.seq == 2  # type: ignore[attr-defined]
    assert h.counters["attempts_failed_fenced"] == 1


def test_messages_of_a_fenced_attempt_change_nothing() -> None:
    h = CoreHarness(sequence_source(splits=8), max_parallelism=2)
    h.register(1)
    old = h.register(0)
    old_splits = sorted(old.splits)
    h.register(0)
    owned_before = h.core.tracker.snapshot()
    sent_before = len(h.sent)

    assert not h.send(0, SplitsFinished(split_ids=old_splits), attempt=1)
    assert not h.send(0, CheckpointAck(checkpoint_id=9, applied_seq=2, splits=[]), attempt=1)
    assert not h.send(0, Heartbeat(watermark=10_000, idle=False), attempt=1)
    assert not h.send(0, ReaderSourceEvent(payload=1), attempt=1)

    assert h.counters["fenced_messages"] == 4
    assert h.core.tracker.snapshot() == owned_before
    assert h.owned(0) == set(old_splits)
    assert len(h.sent) == sent_before
    assert h.core.watermarks.state.low_watermark is None


def test_heartbeats_of_a_fenced_attempt_do_not_keep_the_subtask_alive() -> None:
    h = CoreHarness(max_parallelism=1, session_timeout_ms=1_000)
    h.register(0)
    h.register(0)
    for _ in range(3):
        h.advance(400)
        h.send(0, Heartbeat(watermark=None, idle=False), attempt=1)
    released = h.of_type(SplitsReleased, messages=h.to(0))
    assert released[-1].body.reason == "session-timeout"  # type: ignore[attr-defined]
    assert released[-1].body.failed_attempt == 2  # type: ignore[attr-defined]


# -- failure and departure ----------------------------------------------------------


def _three_readers_one_with_mixed_splits() -> CoreHarness:
    """9 splits, 3 subtasks. Subtask 0 holds 2 checkpointed splits (seq 1, positions
    advanced) and 1 split assigned after its checkpoint (seq 2)."""
    h = CoreHarness(
        sequence_source(splits=9),
        max_parallelism=3,
        session_timeout_ms=1_000,
        reader_departure_timeout_ms=5_000,
    )
    r0 = h.register(0)
    assert len(r0.splits) == 3
    r0.splits["seq-00000"]["position"] = 4
    r0.splits["seq-00001"]["position"] = 17
    h.ack(0)
    h.finish(0, ["seq-00002"])
    h.register(1)
    h.request_split(0)
    assert h.to(0, AddSplits)[-1].body.seq == 2  # type: ignore[attr-defined]
    h.register(2)
    assert h.unassigned() == []
    assert h.core.tracker.uncheckpointed_count(0) == 1
    return h


def test_session_timeout_releases_exactly_the_uncheckpointed_splits() -> None:
    h = _three_readers_one_with_mixed_splits()
    late = sorted(h.owned(0) - {"seq-00000", "seq-00001"})
    assert len(late) == 1
    h.heartbeat(1)
    h.heartbeat(2)
    first = len(h.sent)
    msgs = h.pass_time(1_200, alive=[1, 2])
    assert h.reader(0).failed
    releases = h.of_type(SplitsReleased, messages=msgs)
    assert [e.body for e in releases] == [SplitsReleased(reason="session-timeout", failed_attempt=1, split_ids=late)]
    assert releases[0].subtask == 0 and releases[0].attempt == 1
    # the released split went to another live reader, after the release
    adds = h.of_type(AddSplits, messages=msgs)
    assert [split_ids(e) for e in adds] == [late]
    assert adds[0].subtask in (1, 2) and adds[0].cseq > releases[0].cseq  # type: ignore[operator]
    assert h.core.tracker.owner_of(late[0]) == adds[0].subtask
    # the checkpointed splits stay with subtask 0 for its next attempt
    assert h.owned(0) == {"seq-00000", "seq-00001"}
    assert h.counters["attempts_failed_session-timeout"] == 1
    assert first < len(h.sent)


def test_a_silent_attempt_is_fenced_first_and_a_checkpoint_it_committed_before_the_fence_counts() -> None:
    """The tick asks for a fence and releases nothing; an ack read before the fence is
    reported done is applied (a starved reader committed it just in time); then the
    attempt fails, and only what that ack did not cover moves."""
    h = _three_readers_one_with_mixed_splits()
    h.hold_fences = True
    late = sorted(h.owned(0) - {"seq-00000", "seq-00001"})
    msgs = h.pass_time(1_200, alive=[1, 2])
    assert h.fences == [ReaderFence(subtask=0, attempt=1)]
    assert h.of_type(SplitsReleased, messages=msgs) == [] and not h.reader(0).failed
    h.pass_time(1_200, alive=[1, 2])
    assert len(h.fences) == 1, "one fence per silent attempt, however many ticks pass"

    h.ack(0)  # committed before the fence: the late split is checkpointed now
    effects = h.complete_fence()
    releases = h.of_type(SplitsReleased, messages=effects.messages)
    assert [e.body for e in releases] == [SplitsReleased(reason="session-timeout", failed_attempt=1, split_ids=[])]
    assert h.reader(0).failed
    assert h.owned(0) == {"seq-00000", "seq-00001", *late}, "checkpointed splits wait for the next attempt"
    assert h.counters["readers_fenced"] == 1


def _registered(h: CoreHarness, subtask: int) -> list[ReaderRegistered]:
    return [e.body for e in h.to(subtask, ReaderRegistered)]  # type: ignore[misc]


def test_a_registration_read_while_its_subtask_is_fenced_waits_for_the_fence_and_renews_its_producer() -> None:
    """A reader restarted as its predecessor timed out starts its producer, perhaps just
    before the coordinator's fence: it is answered only after the fence, and told to start a
    new producer before its first transaction."""
    h = _three_readers_one_with_mixed_splits()
    h.hold_fences = True
    h.pass_time(1_200, alive=[1, 2])
    before = len(_registered(h, 0))
    h.register(0, restore=True)
    assert len(_registered(h, 0)) == before, "no answer while the fence runs"
    assert h.persisted["slot/0"]["slot"]["deferred_registrations"], "committed with the slot, for a successor"
    h.complete_fence()
    answered = _registered(h, 0)[-1]
    assert answered.attempt == 2 and answered.renew_producer
    released = h.of_type(SplitsReleased, messages=h.to(0))
    assert "session-timeout" in [e.body.reason for e in released], "the silent attempt failed first"  # type: ignore[attr-defined]
    assert "deferred_registrations" not in h.persisted["slot/0"]["slot"]


def test_a_registration_waiting_for_a_fence_is_answered_by_a_successor_coordinator() -> None:
    h = _three_readers_one_with_mixed_splits()
    h.hold_fences = True
    h.pass_time(1_200, alive=[1, 2])
    h.register(0, restore=True)
    h.restart_coordinator()  # the fence was under way: nobody will report it
    answered = _registered(h, 0)[-1]
    assert answered.attempt == 2 and answered.renew_producer


def test_a_registration_soon_after_a_fence_renews_its_producer_and_a_later_one_does_not() -> None:
    h = _three_readers_one_with_mixed_splits()
    h.pass_time(1_200, alive=[1, 2])  # fenced and failed at once (the harness's default)
    h.register(0, restore=True)
    assert _registered(h, 0)[-1].renew_producer, "started within a session timeout of the fence"
    h.pass_time(3_000, alive=[0, 1, 2])
    h.register(0, restore=True)
    assert not _registered(h, 0)[-1].renew_producer


def test_an_ended_open_transaction_fails_nobody_and_a_registration_soon_after_renews_its_producer() -> None:
    h = _three_readers_one_with_mixed_splits()
    h.end_open_transaction(0)
    assert not h.reader(0).failed and h.counters["open_transactions_ended"] == 1
    h.register(0, restore=True)
    assert _registered(h, 0)[-1].renew_producer, "started within a session timeout of the fence"


def test_checkpointed_splits_are_released_only_after_the_departure_timeout() -> None:
    h = _three_readers_one_with_mixed_splits()
    h.pass_time(1_500, alive=[1, 2])  # subtask 0 fails
    assert h.reader(0).failed
    msgs = h.pass_time(4_500, alive=[1, 2])
    assert h.of_type(SplitsReleased, messages=msgs) == []
    assert h.owned(0) == {"seq-00000", "seq-00001"}

    msgs = h.pass_time(1_500, alive=[1, 2])
    releases = h.of_type(SplitsReleased, messages=msgs)
    assert [e.body for e in releases] == [
        SplitsReleased(reason="departed", failed_attempt=None, split_ids=["seq-00000", "seq-00001"])
    ]
    assert releases[0].subtask == 0
    assert h.owned(0) == set()
    assert h.of_type(AddSplits, messages=msgs) == []  # 1 and 2 already hold a fair share
    # back with the enumerator, at the positions of the last checkpoint ...
    assert enumerator_positions(h) == {"seq-00000": 4, "seq-00001": 17}
    # ... and given from there to a reader that asks
    h.finish(1)
    h.request_split(1)
    assert {s["split_id"]: s["position"] for s in h.reader(1).splits.values()} == {
        "seq-00000": 4,
        "seq-00001": 17,
    }
    assert h.owned(1) == {"seq-00000", "seq-00001"}
    # nothing more happens later
    assert h.of_type(SplitsReleased, messages=h.pass_time(10_000, alive=[1, 2])) == []


def test_restored_reader_gets_its_checkpointed_splits_back_at_their_positions() -> None:
    h = _three_readers_one_with_mixed_splits()
    h.pass_time(1_500, alive=[1, 2])
    new = h.register(0, restore=True)
    msgs = h.last.messages
    assert kinds(msgs)[:2] == [(0, "ReaderRegistered"), (0, "SplitsReleased")]
    assert msgs[1].body == SplitsReleased(reason="recovery", failed_attempt=None, split_ids=["seq-00000", "seq-00001"])
    assert new.attempt == 2
    positions = {s["split_id"]: s["position"] for s in new.splits.values()}
    assert positions == {"seq-00000": 4, "seq-00001": 17}
    # and the departure timer no longer applies
    assert h.of_type(SplitsReleased, messages=h.pass_time(8_000, alive=[0, 1, 2])) == []


def test_reader_leaving_returns_everything() -> None:
    h = _three_readers_one_with_mixed_splits()
    r0 = h.reader(0)
    r0.splits["seq-00000"]["position"] = 8
    held = sorted(r0.splits)
    msgs = h.leave(0).messages
    assert msgs[0].body == SplitsReleased(reason="left", failed_attempt=None, split_ids=held)
    assert (msgs[0].subtask, msgs[0].attempt) == (0, 1)
    assert h.owned(0) == set()
    reassigned = {s["split_id"]: s for e in msgs[1:] for s in e.body.splits}  # type: ignore[attr-defined]
    assert {e.subtask for e in msgs[1:]} <= {1, 2}
    positions = {k: v["position"] for k, v in reassigned.items()} | enumerator_positions(h)
    assert sorted(positions) == held  # every split is either reassigned or with the enumerator
    assert positions["seq-00000"] == 8  # the leaving reader's position wins
    # the attempt is over: its messages are fenced, and no departure follows
    assert not h.send(0, SplitsFinished(split_ids=held), attempt=1)
    assert h.counters["fenced_messages"] == 1
    assert h.of_type(SplitsReleased, messages=h.pass_time(10_000, alive=[1, 2])) == []


def test_leaving_with_no_splits_still_says_so() -> None:
    h = CoreHarness(sequence_source(splits=1), max_parallelism=2)
    h.register(0)
    h.register(1)
    assert h.owned(1) == set()
    msgs = h.leave(1).messages
    assert [m.body for m in msgs] == [SplitsReleased(reason="left", failed_attempt=None, split_ids=[])]


# -- recovery without reassignment (reported splits stay with the reader) ------------


def test_reported_splits_stay_with_the_reader_without_reassignment_on_recovery() -> None:
    h = scripted(max_parallelism=2)
    r0 = h.register(0)
    run(h, 0, ["assign", {"0": ["a", "b"]}])
    r0.splits["a"]["position"] = 5
    h.ack(0)
    run(h, 0, ["assign", {"0": ["c"]}])
    new = h.register(0, restore=True)
    assert [m.body for m in h.last.messages] == [
        SplitsReleased(
            reason="fenced",
            failed_attempt=1,
            split_ids=["c"],
            successor_incarnation=new.incarnation,
            successor_location="host-a",
        ),
        ReaderRegistered(incarnation=new.incarnation, attempt=2),
    ]
    assert h.owned(0) == {"a", "b"}
    assert [s.split_id for s in enumerator(h).returned] == ["c"]
    assert enumerator(h).readers_added == [0, 0]
    info = h.core.reader_info(0)
    assert {(s.split_id, s.position) for s in info.reported_splits} == {("a", 5), ("b", 0)}


def test_a_fresh_reader_without_state_releases_what_the_subtask_held() -> None:
    h = scripted(max_parallelism=2)
    r0 = h.register(0)
    run(h, 0, ["assign", {"0": ["a", "b"]}])
    r0.splits["b"]["position"] = 3
    h.ack(0)
    h.register(0)  # no restored state
    assert [m.body for m in h.last.messages][2] == SplitsReleased(
        reason="recovery", failed_attempt=None, split_ids=["a", "b"]
    )
    assert h.owned(0) == set()
    assert {(s.split_id, s.position) for s in enumerator(h).returned} == {("a", 0), ("b", 3)}


def test_a_restored_reader_is_not_left_reading_a_split_that_departed_to_another_subtask() -> None:
    h = scripted(max_parallelism=2, session_timeout_ms=1_000, reader_departure_timeout_ms=3_000)
    h.register(0)
    h.register(1)
    run(h, 0, ["assign", {"0": ["a"]}])
    h.ack(0)  # subtask 0's host durably checkpointed split a
    h.pass_time(5_000, alive=[1])  # 0 fails, then departs: a goes back to the enumerator
    run(h, 1, ["assign", {"1": ["a"]}])
    assert h.core.tracker.owner_of("a") == 1
    restored = h.register(0, restore=True)  # restarts from that acknowledged checkpoint
    assert h.counters["reported_split_conflicts"] == 1
    assert "a" not in restored.splits  # ReaderRegistered.dropped_split_ids told it to drop a


# -- the enumerator context -----------------------------------------------------------


def test_assignment_to_a_subtask_without_live_attempt_raises_and_assigns_nothing() -> None:
    h = scripted(max_parallelism=4)
    h.register(0)
    msgs = run(h, 0, ["assign", {"0": ["a"], "2": ["b"]}], ["assign", {"9": ["c"]}])
    assert msgs == []
    errors = enumerator(h).errors
    assert [type(e) for e in errors] == [NoLiveReaderError, NoLiveReaderError]
    assert [e.subtask for e in errors] == [2, 9]  # type: ignore[attr-defined]
    assert "subtask 2" in str(errors[0])
    assert h.core.tracker.total_owned() == 0
    # no seq was consumed
    run(h, 0, ["assign", {"0": ["a"]}])
    assert [e.body.seq for e in h.to(0, AddSplits)] == [1]  # type: ignore[attr-defined]


def test_assignment_to_a_failed_subtask_raises() -> None:
    h = scripted(max_parallelism=2, session_timeout_ms=1_000)
    h.register(0)
    h.register(1)
    h.pass_time(2_000, alive=[0])
    assert h.reader(1).failed
    assert run(h, 0, ["assign", {"1": ["x"]}], ["no_more", 1]) == []
    assert [type(e) for e in enumerator(h).errors] == [NoLiveReaderError, NoLiveReaderError]
    assert h.core.tracker.owner_of("x") is None


def test_assigning_an_owned_split_is_refused() -> None:
    h = scripted(max_parallelism=2)
    h.register(0)
    h.register(1)
    run(h, 0, ["assign", {"0": ["a"]}])
    assert run(h, 0, ["assign", {"1": ["b", "a"]}]) == []
    assert "'a' is owned by subtask 0" in str(enumerator(h).errors[0])
    assert h.core.tracker.owner_of("b") is None
    assert h.to(1, AddSplits) == []


@pytest.mark.parametrize(
    "assignment",
    [{"0": ["a", "a"]}, {"0": ["a"], "1": ["a"]}],
    ids=["same-subtask", "two-subtasks"],
)
def test_a_split_named_twice_in_one_assignment_is_refused_as_a_whole(
    assignment: dict[str, list[str]],
) -> None:
    h = scripted(max_parallelism=2)
    h.register(0)
    h.register(1)
    assert run(h, 0, ["assign", assignment]) == []
    assert len(enumerator(h).errors) == 1
    assert h.core.tracker.total_owned() == 0
    # no seq was consumed: the next assignment is seq 1 on both subtasks
    run(h, 0, ["assign", {"0": ["b"], "1": ["c"]}])
    assert [e.body.seq for e in h.to(0, AddSplits)] == [1]  # type: ignore[attr-defined]
    assert [e.body.seq for e in h.to(1, AddSplits)] == [1]  # type: ignore[attr-defined]


def test_source_events_reach_live_readers_and_dead_ones_are_dropped() -> None:
    h = scripted(max_parallelism=4)
    r0 = h.register(0)
    msgs = run(
        h,
        0,
        ["event", 0, {"hello": 1}, None],
        ["event", 0, "for-attempt-1", 1],
        ["event", 0, "stale", 7],
        ["event", 3, "nobody", None],
        ["event", 99, "out-of-range", None],
    )
    assert [(m.subtask, m.attempt, m.body) for m in msgs] == [
        (0, 1, CoordinatorSourceEvent(payload={"hello": 1})),
        (0, 1, CoordinatorSourceEvent(payload="for-attempt-1")),
    ]
    assert r0.events == [{"hello": 1}, "for-attempt-1"]
    assert h.counters["source_events_dropped"] == 3


def test_a_step_whose_enumerator_raises_keeps_nothing_and_the_restart_offers_its_input_again() -> None:
    h = scripted(max_parallelism=2)
    r0 = h.register(0)
    sent_before, persisted_before = len(h.sent), orjson.dumps(h.persisted)
    with pytest.raises(StepFailedError) as failed:
        run(h, 0, ["assign", {"0": ["a"]}], ["event", 0, "before", None], ["raise_once", "step-1"])
    message = str(failed.value)
    assert "RuntimeError: once: step-1 at test_core.py:" in message
    assert "in handle_source_event while handling SourceEvent from subtask 0 (inbox offset 1)" in message
    # nothing of the step: no AddSplits, no event, no state
    assert len(h.sent) == sent_before
    assert orjson.dumps(h.persisted) == persisted_before
    assert r0.splits == {} and r0.events == []
    with pytest.raises(StepFailedError, match="a step after a failed one"):
        h.tick()  # a failed core takes no further step
    # the host restarts from the last commit, which offers the record again
    h.restart_after_failure()
    assert r0.events == ["before"]
    assert set(r0.splits) == {"a"}
    assert h.owned(0) == {"a"}
    assert [split_ids(m) for m in h.of_type(AddSplits)] == [["a"]]


def test_an_enumerator_raising_in_start_fails_the_start() -> None:
    class Broken(ScriptedEnumerator):
        def start(self) -> None:
            raise ValueError("no")

    class BrokenSource(ScriptedSource):
        def create_enumerator(self, context: SplitEnumeratorContext[Item]) -> ScriptedEnumerator:
            return Broken(context)

    with pytest.raises(StepFailedError, match=r"ValueError: no .*while handling the enumerator's start"):
        CoreHarness(BrokenSource(), max_parallelism=1)


def test_a_cancelled_periodic_call_is_stopped_and_its_late_result_dropped() -> None:
    h = scripted(max_parallelism=1)
    h.register(0)
    run(h, 0, ["periodic", 500])
    (call,) = h.last.async_calls
    assert (call.initial_delay_ms, call.period_ms) == (500, 500)
    h.core.on_async_result(call.call_id, "tick", None, h.now_ms)
    assert enumerator(h).results == ["tick"]
    run(h, 0, ["cancel"])
    assert h.last.cancelled_calls == [call.call_id]  # the host stops the timer
    assert not h.core.on_async_result(call.call_id, "late", None, h.now_ms)
    assert enumerator(h).results == ["tick"]
    assert enumerator(h).handles[-1].cancelled


def test_a_call_cancelled_in_the_step_that_made_it_never_reaches_the_host() -> None:
    h = scripted(max_parallelism=1)
    h.register(0)
    run(h, 0, ["periodic", 100], ["cancel"])
    assert h.last.async_calls == [] and h.last.cancelled_calls == []


def test_closing_the_core_stops_every_periodic_call() -> None:
    h = scripted(max_parallelism=1)
    h.register(0)
    ids = []
    for period_ms in (100, 200):
        run(h, 0, ["periodic", period_ms])
        ids += [call.call_id for call in h.last.async_calls]
    assert h.core.close() == sorted(ids)
    assert all(not h.core.on_async_result(i, "late", None, h.now_ms) for i in ids)
    assert enumerator(h).results == []


def test_the_context_refuses_calls_from_another_thread() -> None:
    h = scripted(max_parallelism=1)
    h.register(0)
    context = enumerator(h).context
    errors: list[BaseException] = []

    def from_a_worker() -> None:
        try:
            context.assign_splits({0: [Item("a")]})
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=from_a_worker)
    worker.start()
    worker.join()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "assign_splits was called from a thread other than the coordinator's loop" in str(errors[0])
    assert h.owned(0) == set()
    run(h, 0, ["assign", {"0": ["a"]}])  # the loop itself may
    assert h.owned(0) == {"a"}


# -- invalid input ---------------------------------------------------------------------


@pytest.mark.parametrize("subtask", [4, 5, 1000])
def test_a_message_for_a_subtask_beyond_max_parallelism_is_rejected(subtask: int) -> None:
    h = CoreHarness(max_parallelism=4)
    h.register(0)
    effects = h.feed(h.envelope(subtask, Heartbeat(watermark=1, idle=False), 1))
    assert effects.messages == []
    assert effects.rejection is not None and "max_parallelism" in effects.rejection
    assert str(subtask) in effects.rejection
    assert h.counters["rejected_messages"] == 1


def test_a_registration_beyond_max_parallelism_is_rejected() -> None:
    h = CoreHarness(max_parallelism=2)
    effects = h.feed(
        h.envelope(
            2,
            ReaderRegistration(incarnation="x", location="h", reported_splits=[], restored_checkpoint_id=None),
            None,
        )
    )
    assert effects.rejection is not None and effects.messages == []
    assert h.core.live_subtasks() == []


def test_a_message_for_another_source_is_rejected() -> None:
    h = CoreHarness(max_parallelism=2)
    h.register(0)
    effects = h.feed(h.envelope(0, Heartbeat(watermark=1, idle=False), 1, source="payments"))
    assert effects.messages == []
    assert effects.rejection is not None and "payments" in effects.rejection
    assert h.counters["rejected_messages"] == 1
    assert h.counters["fenced_messages"] == 0


# -- message size ----------------------------------------------------------------------


@pytest.mark.parametrize("max_message_bytes", [1024, 4096])
def test_add_splits_is_chunked_below_max_message_bytes(max_message_bytes: int) -> None:
    h = CoreHarness(
        sequence_source(splits=200),
        max_parallelism=1,
        max_message_bytes=max_message_bytes,
        source_name="s" * 100,
    )
    reader = h.register(0)
    adds = h.to(0, AddSplits)
    assert len(adds) > 1
    assert [e.body.seq for e in adds] == list(range(1, len(adds) + 1))  # type: ignore[attr-defined]
    assert all(len(encode(e)) <= max_message_bytes for e in adds)
    ids = [sid for e in adds for sid in split_ids(e)]
    assert ids == [f"seq-{k:05d}" for k in range(200)]
    assert len(reader.splits) == 200 and reader.applied_seq == len(adds)
    # acknowledging the last chunk checkpoints all of them
    h.ack(0)
    assert h.core.tracker.uncheckpointed_count(0) == 0


def test_a_release_too_large_for_one_record_goes_in_parts_and_the_attempt_fails_at_the_last() -> None:
    h = CoreHarness(sequence_source(splits=200), max_parallelism=1, max_message_bytes=1024, session_timeout_ms=1_000)
    reader = h.register(0)
    msgs = h.pass_time(1_200)
    assert reader.failed
    parts = h.of_type(SplitsReleased, messages=msgs)
    assert len(parts) > 1
    assert all(len(encode(e)) <= 1024 for e in parts)
    assert [e.body.more for e in parts] == [True] * (len(parts) - 1) + [False]  # type: ignore[attr-defined]
    assert {(e.body.reason, e.body.failed_attempt, e.attempt) for e in parts} == {("session-timeout", 1, 1)}  # type: ignore[attr-defined]
    released = [sid for e in parts for sid in e.body.split_ids]  # type: ignore[attr-defined]
    assert sorted(released) == [f"seq-{k:05d}" for k in range(200)], "every split once, across the parts"


def test_a_release_request_too_large_for_one_record_goes_as_several_requests_each_its_own_seq() -> None:
    h = scripted(max_message_bytes=1024)
    names = [f"split-{k:04d}" for k in range(150)]
    _owning(h, {"0": names, "1": ["d"]})
    msgs = run(h, 0, ["release", 0, names])
    requests = [m for m in msgs if isinstance(m.body, ReleaseRequest)]
    assert len(requests) > 1 and all(len(encode(e)) <= 1024 for e in requests)
    seqs = [e.body.seq for e in requests]  # type: ignore[attr-defined]
    assert seqs == list(range(seqs[0], seqs[0] + len(requests)))
    assert [sid for e in requests for sid in e.body.split_ids] == names  # type: ignore[attr-defined]
    assert h.core.tracker.releasing_ids(0) == set(names)


def test_one_small_assignment_is_one_record() -> None:
    h = CoreHarness(sequence_source(splits=3), max_parallelism=1)
    h.register(0)
    assert len(h.to(0, AddSplits)) == 1


# -- bounded completion ---------------------------------------------------------------


def test_bounded_source_completes_with_no_more_splits_to_every_reader() -> None:
    h = CoreHarness(sequence_source(splits=4), max_parallelism=2)
    h.register(0)
    h.register(1)
    assert not h.core.is_finished()
    h.finish(0)
    h.request_split(0)  # a reader out of work asks for more
    assert h.to(0, NoMoreSplits) == [] and not h.core.is_finished()
    h.finish(1)
    h.request_split(1)
    for s in (0, 1):
        (nms,) = h.to(s, NoMoreSplits)
        assert nms.body == NoMoreSplits(seq=2)  # shares the seq counter with AddSplits
        assert nms.attempt == 1
        assert h.reader(s).no_more_splits
    assert h.core.is_finished()
    # NoMoreSplits is sent once per attempt
    h.request_split(0)
    assert len(h.to(0, NoMoreSplits)) == 1


def test_a_restarted_reader_of_a_finished_source_is_told_again() -> None:
    h = CoreHarness(sequence_source(splits=2), max_parallelism=2)
    h.register(0)
    h.register(1)
    h.finish(0)
    h.finish(1)
    h.request_split(1)
    assert h.core.is_finished()
    h.register(1)
    assert kinds(h.last.messages) == [
        (1, "SplitsReleased"),
        (1, "ReaderRegistered"),
        (1, "NoMoreSplits"),
    ]
    assert h.last.messages[-1].body == NoMoreSplits(seq=3)
    assert h.core.is_finished()


def test_unfinished_splits_keep_the_source_running() -> None:
    h = CoreHarness(sequence_source(splits=4), max_parallelism=2)
    h.register(0)
    h.register(1)
    h.finish(0)
    h.finish(1, sorted(h.reader(1).splits)[:1])
    h.request_split(0)
    h.request_split(1)
    assert h.of_type(NoMoreSplits) == []
    assert not h.core.is_finished()


# -- coordinator restart ---------------------------------------------------------------


def _busy_harness() -> CoreHarness:
    h = CoreHarness(sequence_source(splits=10), max_parallelism=3, max_watermark_drift_ms=100)
    h.register(0)
    h.register(1)
    h.ack(0)
    h.heartbeat(0, watermark=500)
    h.heartbeat(1, watermark=700)
    h.finish(1, sorted(h.reader(1).splits)[:1])
    return h


def test_a_successor_continues_seq_cseq_and_ownership() -> None:
    h = _busy_harness()
    snap = orjson.loads(orjson.dumps(h.core.snapshot()))  # it is stored as JSON
    successor = CoreHarness(
        sequence_source(splits=10),
        max_parallelism=3,
        max_watermark_drift_ms=100,
        epoch=2,
        snapshot=snap,
        now_ms=h.now_ms + 120_000,
        first_offset=h.next_offset,
        start=False,
    )
    successor.incarnations = h.incarnations  # the readers keep running
    core, old = successor.core, h.core
    assert core.cseq == old.cseq
    for s in range(3):
        assert core.tracker.owned(s) == old.tracker.owned(s)
        assert core.tracker.applied_seq(s) == old.tracker.applied_seq(s)
    assert [s.seq for s in core.slots] == [s.seq for s in old.slots]
    assert [(s.state, s.attempt) for s in core.slots] == [(s.state, s.attempt) for s in old.slots]
    assert successor.unassigned() == h.unassigned()
    assert core.watermarks.state == old.watermarks.state

    # restored live attempts get a fresh session window: nobody times out at start
    successor.start()
    successor.tick()
    assert successor.of_type(SplitsReleased) == []
    # the old attempts are still the current ones
    assert successor.heartbeat(0, watermark=600).rejection is None
    assert successor.counters["fenced_messages"] == 0
    # the next record continues cseq; the next assignment continues seq, at the new epoch
    successor.register(2)
    assert successor.sent[0].cseq == old.cseq + 1
    assert all(m.epoch == 2 for m in successor.sent)
    assert [slot.seq for slot in core.slots][:2] == [slot.seq for slot in old.slots][:2]
    successor.finish(0)
    successor.leave(1)
    adds = successor.of_type(AddSplits, messages=successor.last.messages)
    assert [(e.subtask, e.body.seq) for e in adds] == [(0, old.slots[0].seq + 1)]  # type: ignore[attr-defined]
    cseqs = [m.cseq for m in h.sent + successor.sent]
    assert cseqs == list(range(1, len(cseqs) + 1))


def test_a_successor_needs_a_higher_epoch() -> None:
    h = _busy_harness()
    snap = h.core.snapshot()
    for epoch in (0, 1):
        with pytest.raises(ValueError, match="epoch"):
            CoordinatorCore(sequence_source(splits=10), h.config, epoch=epoch, snapshot=snap)


# -- watermarks --------------------------------------------------------------------------


def _announcements(msgs: list[Envelope]) -> list[tuple[int, int | None, int | None]]:
    return [
        (m.subtask, m.body.low_watermark, m.body.max_allowed_watermark)
        for m in msgs
        if isinstance(m.body, WatermarkAnnouncement)
    ]


def test_watermark_announcements_go_to_every_live_reader_on_the_next_tick() -> None:
    h = CoreHarness(sequence_source(splits=6), max_parallelism=4, max_watermark_drift_ms=1_000)
    h.register(0)
    h.register(1)
    h.register(2)
    assert _announcements(h.heartbeat(0, watermark=100).messages) == []  # heartbeats never announce
    assert _announcements(h.tick().messages) == [(0, 100, 1_100), (1, 100, 1_100), (2, 100, 1_100)]
    h.heartbeat(1, watermark=50)  # never backwards
    h.heartbeat(0, watermark=200)
    h.heartbeat(2, watermark=150)
    h.heartbeat(1, watermark=300)
    assert _announcements(h.advance(1_000).messages) == [(0, 150, 1_150), (1, 150, 1_150), (2, 150, 1_150)]
    assert all(m.attempt == 1 for m in h.of_type(WatermarkAnnouncement))
    assert h.to(3) == []
    assert h.reader(0).watermarks == [100, 150]


def test_advances_within_an_interval_are_coalesced_into_one_announcement_per_reader() -> None:
    h = CoreHarness(sequence_source(splits=2), max_parallelism=2, watermark_announce_interval_ms=1_000)
    h.register(0)
    h.register(1)
    h.heartbeat(0, watermark=10)
    h.heartbeat(1, watermark=20)
    assert _announcements(h.tick().messages) == [(0, 10, None), (1, 10, None)]
    for wm in range(30, 300, 10):  # the low watermark advances 27 times within the interval
        h.heartbeat(0, watermark=wm)
        h.heartbeat(1, watermark=wm + 5)
        assert _announcements(h.advance(30).messages) == []
    assert _announcements(h.advance(1_000).messages) == [(0, 290, None), (1, 290, None)]


def test_watermark_is_reannounced_every_interval() -> None:
    h = CoreHarness(sequence_source(splits=2), max_parallelism=2, watermark_announce_interval_ms=500)
    h.register(0)
    h.register(1)
    assert _announcements(h.advance(1_000).messages) == []  # nothing known yet
    h.heartbeat(0, watermark=10)
    h.heartbeat(1, watermark=20)
    assert _announcements(h.advance(100).messages) == [(0, 10, None), (1, 10, None)]  # the first tick that knows
    assert _announcements(h.advance(100).messages) == []
    assert _announcements(h.advance(400).messages) == [(0, 10, None), (1, 10, None)]


def test_a_reader_without_splits_does_not_hold_the_watermark_back() -> None:
    h = CoreHarness(sequence_source(splits=2), max_parallelism=3)
    h.register(0)
    h.register(1)
    h.register(2)
    assert h.owned(2) == set()
    h.heartbeat(2, watermark=10)  # idle: owns nothing
    assert _announcements(h.tick().messages) == []
    h.heartbeat(0, watermark=None)  # no event time yet: does not hold back
    h.heartbeat(1, watermark=600)
    assert _announcements(h.tick().messages) == [(0, 600, None), (1, 600, None), (2, 600, None)]
    h.heartbeat(0, watermark=700)
    h.heartbeat(1, watermark=900)
    assert _announcements(h.advance(1_000).messages) == [(0, 700, None), (1, 700, None), (2, 700, None)]


def test_a_failed_readers_watermark_stops_counting_at_once() -> None:
    h = CoreHarness(sequence_source(splits=2), max_parallelism=2, session_timeout_ms=1_000)
    h.register(0)
    h.register(1)
    h.heartbeat(0, watermark=100)
    h.heartbeat(1, watermark=900)
    h.advance(600)
    h.heartbeat(1, watermark=950)
    assert (0, "SplitsReleased") in kinds(h.advance(600).messages)  # subtask 0 times out
    h.heartbeat(1, watermark=950)
    msgs = h.advance(1_000).messages  # the next announcement: 0's watermark no longer counts
    assert (1, 950, None) in _announcements(msgs)
    assert all(m.subtask == 1 for m in h.of_type(WatermarkAnnouncement, messages=msgs))


def test_a_leaving_readers_watermark_stops_counting_at_once() -> None:
    h = CoreHarness(sequence_source(splits=2), max_parallelism=2)
    h.register(0)
    h.register(1)
    h.heartbeat(0, watermark=100)
    h.heartbeat(1, watermark=900)
    h.leave(0)
    assert _announcements(h.tick().messages) == [(1, 900, None)]


def test_announced_watermarks_never_decrease_across_failures() -> None:
    h = CoreHarness(sequence_source(splits=3), max_parallelism=3, session_timeout_ms=1_000)
    for s in range(3):
        h.register(s)
    h.heartbeat(0, watermark=100)
    h.heartbeat(1, watermark=400)
    h.heartbeat(2, watermark=300)
    h.pass_time(1_500, alive=[1, 2])  # 0 fails: low 300
    h.register(0)
    h.heartbeat(0, watermark=50)  # the new attempt is behind
    h.pass_time(3_000, alive=[0, 1, 2])
    lows = [m.body.low_watermark for m in h.of_type(WatermarkAnnouncement)]  # type: ignore[attr-defined]
    assert lows[0] == 100 and 300 in lows
    assert lows == sorted(lows)


# -- cooperative rebalancing (v3) ------------------------------------------------------


def _owning(h: CoreHarness, assignment: dict[str, list[str]]) -> None:
    """Register the named subtasks and give them the splits; each acknowledges them."""
    for s in assignment:
        h.register(int(s))
    run(h, int(next(iter(assignment))), ["assign", assignment])
    for s in assignment:
        h.ack(int(s))


def test_a_release_request_goes_out_in_seq_order_and_the_split_stays_owned_until_returned() -> None:
    h = scripted()
    _owning(h, {"0": ["a", "b", "c"], "1": ["d"]})
    msgs = run(h, 0, ["release", 0, ["a", "b"]])
    assert [(m.subtask, m.body) for m in msgs] == [(0, ReleaseRequest(seq=2, split_ids=["a", "b"]))]
    assert h.owned(0) == {"a", "b", "c"} and h.core.tracker.releasing_ids(0) == {"a", "b"}
    # nobody else can be given a split that is being released: it would be read twice
    run(h, 1, ["assign", {"1": ["a"]}])
    assert [type(e).__name__ for e in enumerator(h).errors] == ["SplitAlreadyOwnedError"]
    # the seq counter is shared with AddSplits
    run(h, 0, ["assign", {"0": ["e"]}])
    assert [e.body.seq for e in h.to(0, AddSplits, ReleaseRequest)] == [1, 2, 3]  # type: ignore[attr-defined]


def test_the_ack_returning_the_splits_releases_them_at_its_positions_then_the_enumerator_gets_them() -> None:
    h = scripted()
    _owning(h, {"0": ["a", "b", "c"], "1": ["d"]})
    run(h, 0, ["release", 0, ["a", "b"]])
    h.reader(0).splits["a"]["position"] = 7
    h.reader(0).splits["b"]["position"] = 9
    msgs = h.ack(0).messages
    assert [(m.subtask, m.attempt, m.body) for m in msgs] == [
        (0, 1, SplitsReleased(reason="returned", failed_attempt=None, split_ids=["a", "b"]))
    ]
    assert h.owned(0) == {"c"} and h.core.tracker.releasing_ids(0) == set()
    assert [(s.split_id, s.position) for s in enumerator(h).returned] == [("a", 7), ("b", 9)]
    assert h.counters["splits_returned"] == 2
    # now they may go to the newcomer
    run(h, 1, ["assign", {"1": ["a"]}])
    assert h.owned(1) == {"a", "d"} and enumerator(h).errors == []


def test_an_ack_before_the_request_was_applied_returns_nothing_and_the_request_stays() -> None:
    h = scripted()
    _owning(h, {"0": ["a", "b"]})
    stale = h.reader(0).applied_seq
    run(h, 0, ["release", 0, ["a"]])
    msgs = h.send(0, CheckpointAck(checkpoint_id=50, applied_seq=stale, splits=[{"split_id": "a", "position": 3}]))
    assert msgs.messages == []
    assert h.core.tracker.releasing_ids(0) == {"a"} and h.counters["releases_refused"] == 0


def test_a_pending_release_survives_a_coordinator_restart() -> None:
    h = scripted()
    _owning(h, {"0": ["a", "b"], "1": ["c"]})
    run(h, 0, ["release", 0, ["a"]])
    h.restart_coordinator()
    assert h.core.tracker.releasing_ids(0) == {"a"}
    h.ack(0)
    assert [m.body for m in h.of_type(SplitsReleased, messages=h.last.messages)] == [
        SplitsReleased(reason="returned", failed_attempt=None, split_ids=["a"])
    ]
    assert h.owned(0) == {"b"} and [s.split_id for s in enumerator(h).returned] == ["a"]


def test_an_owner_that_fails_before_returning_follows_the_failure_rules_and_the_request_is_dropped() -> None:
    h = scripted(session_timeout_ms=1_000)
    _owning(h, {"0": ["a", "b"], "1": ["c"]})
    run(h, 0, ["release", 0, ["a"]])
    msgs = h.pass_time(1_500, alive=[1])
    assert [m.body for m in h.of_type(SplitsReleased, messages=msgs)] == [
        SplitsReleased(reason="session-timeout", failed_attempt=1, split_ids=[])
    ]
    # checkpointed: they wait for subtask 0's next attempt, and nothing asks for them any more
    assert h.owned(0) == {"a", "b"} and h.core.tracker.releasing_ids(0) == set()
    assert h.counters["release_requests_dropped"] == 1
    h.register(0, restore=True)
    assert h.owned(0) == {"a", "b"}
    # a late ack of the failed attempt returning "a" changes nothing
    h.send(0, CheckpointAck(checkpoint_id=99, applied_seq=1, splits=[], returned=[{"split_id": "a"}]), attempt=1)
    assert h.owned(0) == {"a", "b"} and enumerator(h).returned == []


def test_odd_returns_and_requests_are_counted_never_fatal() -> None:
    h = scripted()
    _owning(h, {"0": ["a", "b"], "1": ["c"]})
    # asking for a split the subtask does not own: skipped, no record (and no seq) spent
    assert run(h, 0, ["release", 0, ["c", "zz"]]) == []
    assert h.counters["release_requests_not_owned"] == 2 and h.core.slots[0].seq == 1
    # asking for one already asked for: not asked twice
    run(h, 0, ["release", 0, ["a"]])
    assert run(h, 0, ["release", 0, ["a"]]) == []
    # returning one not asked for (taken: the reader stopped reading it) and one of another subtask (ignored)
    applied = h.core.slots[0].seq
    ack = CheckpointAck(
        checkpoint_id=70,
        applied_seq=applied,
        splits=[],
        returned=[{"split_id": "a", "position": 1}, {"split_id": "b", "position": 2}, {"split_id": "c"}],
    )
    msgs = h.send(0, ack).messages
    assert [m.body for m in msgs] == [SplitsReleased(reason="returned", failed_attempt=None, split_ids=["a", "b"])]
    assert h.counters["returned_splits_not_requested"] == 1
    assert h.counters["returned_splits_not_owned"] == 1
    assert h.owned(1) == {"c"} and h.owned(0) == set()
    # a release from a subtask without a live attempt is refused like an assignment to it
    run(h, 1, ["release", 3, ["c"]])
    assert type(enumerator(h).errors[-1]).__name__ == "NoLiveReaderError"


def test_a_checkpoint_covering_the_request_that_keeps_the_split_drops_the_request() -> None:
    h = scripted()
    _owning(h, {"0": ["a", "b"], "1": ["c"]})
    run(h, 0, ["release", 0, ["a"]])
    seq = h.core.slots[0].seq
    split_a = {"split_id": "a", "position": 4}
    h.send(0, CheckpointAck(checkpoint_id=80, applied_seq=seq, splits=[split_a, {"split_id": "b", "position": 0}]))
    assert h.counters["releases_refused"] == 1
    assert h.core.tracker.releasing_ids(0) == set() and h.owned(0) == {"a", "b"}


def test_a_checkpoint_of_changes_that_keeps_a_requested_split_unmoved_drops_the_request() -> None:
    h = scripted()
    _owning(h, {"0": ["a", "b"], "1": ["c"]})
    run(h, 0, ["release", 0, ["a"]])
    h.reader(0).applied_seq = h.core.slots[0].seq
    h.reader(0).releasing.clear()  # the reader does not give "a" back, and reads nothing
    h.ack(0, changes_only=True)
    assert h.counters["releases_refused"] == 1
    assert h.core.tracker.releasing_ids(0) == set() and h.owned(0) == {"a", "b"}


# -- acks of changes (v7) ------------------------------------------------------------------


def _positions(h: CoreHarness, subtask: int) -> dict[str, int]:
    return {sid: split["position"] for sid, split in h.core.tracker.owned_by_id(subtask).items()}


def test_an_ack_of_changes_moves_the_splits_it_names_and_keeps_the_others_acknowledged_positions() -> None:
    h = CoreHarness(
        sequence_source(splits=3), max_parallelism=1, session_timeout_ms=1_000, reader_departure_timeout_ms=2_000
    )
    r0 = h.register(0)
    r0.splits["seq-00000"]["position"] = 4
    r0.splits["seq-00001"]["position"] = 15
    h.ack(0)
    r0.splits["seq-00000"]["position"] = 9
    h.ack(0, changes_only=True)
    acknowledged = {"seq-00000": 9, "seq-00001": 15, "seq-00002": r0.splits["seq-00002"]["position"]}
    assert _positions(h, 0) == acknowledged
    assert h.counters["splits_missing_from_checkpoint"] == 0, "an ack of changes leaves the unmoved out"
    assert h.counters["checkpoint_acks_on_unknown_base"] == 0
    # the positions hold across a coordinator restart, and the enumerator gets them back
    h.restart_coordinator()
    assert _positions(h, 0) == acknowledged
    h.pass_time(5_000, alive=[])
    assert enumerator_positions(h) == acknowledged


def test_an_ack_of_changes_on_a_checkpoint_never_recorded_is_applied_counted_and_logged() -> None:
    h = CoreHarness(sequence_source(splits=2), max_parallelism=1)
    h.register(0)
    h.ack(0)
    last = h.core.slots[0].checkpoint_id
    assert last is not None
    moved = {"split_id": "seq-00000", "position": 12}
    h.send(0, CheckpointAck(checkpoint_id=last + 2, applied_seq=0, splits=[moved], base_checkpoint_id=last + 1))
    assert h.counters["checkpoint_acks_on_unknown_base"] == 1
    assert _positions(h, 0)["seq-00000"] == 12
    # a base older than the last recorded is a superset of the changes: nothing to report
    h.send(0, CheckpointAck(checkpoint_id=last + 3, applied_seq=0, splits=[], base_checkpoint_id=last))
    assert h.counters["checkpoint_acks_on_unknown_base"] == 1


# -- reader records in pieces (v6) --------------------------------------------------------


def _pieces_of(h: CoreHarness, body: Any) -> list[Any]:
    from sluicegate.protocol.pieces import body_in_pieces

    pieces = body_in_pieces(body, h.config.max_message_bytes)
    assert len(pieces) > 2, "the test needs a record in several pieces"
    return pieces


def test_a_checkpoint_ack_in_pieces_acts_at_its_last_piece_even_across_a_coordinator_restart() -> None:
    h = CoreHarness(sequence_source(splits=200), max_parallelism=1, max_message_bytes=1024)
    reader = h.register(0)
    assert len(reader.splits) == 200 and h.core.tracker.uncheckpointed_count(0) == 200
    moved = [{**split, "position": 3} for split in reader.splits.values()]
    pieces = _pieces_of(h, CheckpointAck(checkpoint_id=1, applied_seq=reader.applied_seq, splits=moved))
    for piece in pieces[:-1]:
        h.send(0, piece)
    assert h.core.tracker.uncheckpointed_count(0) == 200, "no piece but the last acts"
    assert h.core.slots[0].checkpoint_id is None
    h.restart_coordinator()  # what is held was committed with the slot
    h.send(0, pieces[-1])
    assert h.core.tracker.uncheckpointed_count(0) == 0
    assert h.core.slots[0].checkpoint_id == 1
    assert sorted(s["position"] for s in h.core.tracker.owned(0)) == [3] * 200
    assert not h.core.slots[0].pieces and "pieces" in h.persisted["slot/0"]["slot"]
    assert h.persisted["slot/0"]["slot"]["pieces"] == {}, "nothing is held once the record is whole"


def test_a_registration_and_its_answer_in_pieces_reach_both_sides_whole() -> None:
    h = CoreHarness(sequence_source(splits=200), max_parallelism=1, max_message_bytes=1024)
    h.register(0)
    h.ack(0)
    h.reader(0).failed = True
    reader = h.register(0, restore=True)  # 200 reported splits: a registration in pieces
    assert len(h.core.slots[0].reported_splits) == 200
    answers = h.to(0, ReaderRegistered)[1:]
    assert reader.attempt == 2 and all(e.attempt == 2 for e in answers)
    # the sequence source reassigns on recovery, so all 200 reported splits are dropped: a long answer
    dropped = [sid for e in answers for sid in e.body.dropped_split_ids]  # type: ignore[attr-defined]
    assert len(answers) > 1 and all(len(encode(e)) <= 1024 for e in answers)
    assert sorted(dropped) == sorted(s["split_id"] for s in reader.checkpoint.splits)  # type: ignore[union-attr]
    assert h.core.tracker.total_owned() + len(h.unassigned()) == 200


def test_a_leaving_in_pieces_hands_every_split_back_at_its_last_piece() -> None:
    h = CoreHarness(sequence_source(splits=200), max_parallelism=1, max_message_bytes=1024)
    reader = h.register(0)
    h.ack(0)
    from sluicegate.protocol import ReaderLeaving

    held = sorted(reader.splits)
    pieces = _pieces_of(h, ReaderLeaving(splits=[dict(s) for s in reader.splits.values()]))
    for piece in pieces[:-1]:
        h.send(0, piece)
    assert h.core.slots[0].live and h.core.tracker.owned_count(0) == 200
    h.send(0, pieces[-1])
    assert not h.core.slots[0].live and h.core.tracker.owned_count(0) == 0
    released = [sid for e in h.to(0, SplitsReleased) for sid in e.body.split_ids]
    assert sorted(released) == held


def test_an_ack_given_up_half_way_changes_nothing_and_is_counted() -> None:
    h = CoreHarness(sequence_source(splits=200), max_parallelism=1, max_message_bytes=1024)
    reader = h.register(0)
    pieces = _pieces_of(
        h, CheckpointAck(checkpoint_id=1, applied_seq=reader.applied_seq, splits=list(reader.splits.values()))
    )
    h.send(0, pieces[0])
    h.send(0, pieces[2])  # piece 1 never came
    h.send(0, pieces[-1])
    assert h.core.tracker.uncheckpointed_count(0) == 200
    assert h.counters["incomplete_records_dropped"] >= 1
    h.ack(0)  # the next ack, whole, acts
    assert h.core.tracker.uncheckpointed_count(0) == 0
