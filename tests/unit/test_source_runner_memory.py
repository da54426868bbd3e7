"""The coordinator's exactly-once loop (SourceRunner) over the in-memory log: what it
commits, and its recovery paths (a failed commit, a fenced incarnation, a broker abort
of a reader's transaction, a source defined otherwise), in milliseconds. The same loop
runs over Kafka in the integration and e2e tests (kafka_log.py)."""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sluicegate.coordinator import metrics, silence
from sluicegate.coordinator.embedded import nobody_serves
from sluicegate.coordinator.host_process import this_process
from sluicegate.coordinator.metrics import exposition, source_snapshot
from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.source_runner import RunnerState, SourceRunner
from sluicegate.coordinator.state_store import merge_records
from sluicegate.protocol.codec import decode, encode, encode_key
from sluicegate.protocol.messages import (
    AddSplits,
    CheckpointAck,
    Direction,
    Envelope,
    ReaderRegistered,
    ReaderRegistration,
    SplitsReleased,
    envelope,
)
from sluicegate.protocol.names import reader_transactional_id
from sluicegate.protocol.state_records import host_of_last, released_by_last
from sluicegate.protocol.topics import ControlTopics
from sluicegate.testing.memory_log import FencedTransactionError, MemoryCoordinatorLog, MemoryLogBroker

SOURCE = "orders"
TOPICS = ControlTopics.for_source(SOURCE, "sluicegate")


def settings(splits: int = 4) -> SourceSettings:
    return SourceSettings(SOURCE, "sequence", 2, {"splits": str(splits), "records_per_split": "10"})


def start(broker: MemoryLogBroker, splits: int = 4, source: SourceSettings | None = None) -> SourceRunner:
    runner = SourceRunner(
        source or settings(splits), "memory", "sluicegate", tick_interval_ms=20, log=MemoryCoordinatorLog(broker)
    )
    runner.start()
    return runner


def register(broker: MemoryLogBroker, subtask: int, incarnation: str, transactional: bool = False) -> int:
    body = ReaderRegistration(incarnation=incarnation, location="test", reported_splits=[], restored_checkpoint_id=None)
    env = envelope(body, source=SOURCE, subtask=subtask, attempt=None, epoch=0, ts=int(time.time() * 1000))
    return broker.write(encode_key(subtask), encode(env), transactional)


def to_readers(broker: MemoryLogBroker) -> list[Envelope]:
    return [decode(r.value, Direction.TO_READER) for r in broker.records_to(TOPICS.readers)]


def of_type(envs: list[Envelope], body: type, subtask: int | None = None) -> list[Envelope]:
    return [e for e in envs if isinstance(e.body, body) and (subtask is None or e.subtask == subtask)]


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.01)


def assigned(broker: MemoryLogBroker) -> list[str]:
    return sorted(s["split_id"] for e in of_type(to_readers(broker), AddSplits) for s in e.body.splits)  # type: ignore[attr-defined]


async def test_a_registration_is_answered_and_the_splits_handed_out_in_committed_steps() -> None:
    broker = MemoryLogBroker()
    runner = start(broker)
    try:
        register(broker, 0, "a")
        register(broker, 1, "b")
        await until(lambda: len(assigned(broker)) == 4)
        assert runner.state is RunnerState.ACTIVE and runner.core is not None and runner.core.epoch == 1
        registered = of_type(to_readers(broker), ReaderRegistered)
        assert sorted(e.subtask for e in registered) == [0, 1]
        assert all(e.epoch == 1 for e in to_readers(broker))
        assert {r.partition for r in broker.records_to(TOPICS.readers)} == {0, 1}, "each subtask's own partition"
    finally:
        await runner.stop()


async def test_a_failed_commit_fails_the_runner_and_its_successor_answers_once_from_the_last_commit() -> None:
    broker = MemoryLogBroker()
    first = start(broker)
    await until(lambda: first.state is RunnerState.ACTIVE)
    broker.fail_next_commits(1)
    register(broker, 0, "a")
    await until(lambda: first.state is RunnerState.FAILED)
    assert first.failure is not None and "the broker aborted the transaction" in first.failure
    assert to_readers(broker) == [], "nothing of the failed step is visible"
    second = start(broker)
    try:
        await until(lambda: len(assigned(broker)) == 2)  # subtask 0's share of the four
        assert second.core is not None and second.core.epoch == 2, "the successor restored the committed epoch"
        assert len(of_type(to_readers(broker), ReaderRegistered)) == 1, "the registration answered once"
        assert all(e.epoch == 2 for e in to_readers(broker))
    finally:
        await second.stop()


async def test_a_fenced_incarnation_steps_down_and_the_new_one_serves_from_the_last_commit() -> None:
    broker = MemoryLogBroker()
    first = start(broker)
    register(broker, 0, "a")
    await until(lambda: len(assigned(broker)) > 0)
    second = start(broker)  # a standby takes over: it fences the first
    try:
        await until(lambda: second.state is RunnerState.ACTIVE)
        register(broker, 1, "b")
        await until(lambda: first.state is RunnerState.FENCED)
        await until(lambda: len(assigned(broker)) == 4)
        assert assigned(broker) == sorted(set(assigned(broker))), "no split handed out twice"
        assert [e.epoch for e in of_type(to_readers(broker), ReaderRegistered)] == [1, 2]
    finally:
        await first.stop()
        await second.stop()


async def test_a_readers_aborted_transaction_is_never_read_and_what_follows_is() -> None:
    broker = MemoryLogBroker()
    runner = start(broker)
    try:
        register(broker, 0, "killed", transactional=True)  # a reader killed inside its transaction
        register(broker, 0, "restarted")
        await asyncio.sleep(0.1)
        assert of_type(to_readers(broker), ReaderRegistered) == [], "nothing past the open transaction is read"
        broker.end_transaction(commit=False)
        await until(lambda: len(of_type(to_readers(broker), ReaderRegistered)) == 1)
        assert of_type(to_readers(broker), ReaderRegistered)[0].body.incarnation == "restarted"  # type: ignore[attr-defined]
    finally:
        await runner.stop()


READER_0 = reader_transactional_id("sluicegate", SOURCE, 0)


def checkpoint_all(broker: MemoryLogBroker, transactional: bool = False) -> None:
    """Subtask 0's attempt 1 acknowledges a checkpoint of every split it was given."""
    adds = of_type(to_readers(broker), AddSplits, 0)
    splits = [s for e in adds for s in e.body.splits]  # type: ignore[attr-defined]
    body = CheckpointAck(checkpoint_id=1, applied_seq=adds[-1].body.seq, splits=splits)  # type: ignore[attr-defined]
    env = envelope(body, source=SOURCE, subtask=0, attempt=1, epoch=1, ts=int(time.time() * 1000))
    broker.write(encode_key(0), encode(env), transactional, READER_0 if transactional else None)


def released(broker: MemoryLogBroker) -> list[SplitsReleased]:
    return [e.body for e in of_type(to_readers(broker), SplitsReleased, 0)]  # type: ignore[misc]


def silent_reader_source() -> SourceSettings:
    return SourceSettings(SOURCE, "sequence", 1, {"splits": "3", "records_per_split": "10"}, session_timeout_ms=300)


async def test_a_silent_readers_checkpoint_committed_just_before_its_fence_is_applied_before_it_fails() -> None:
    """The reader was starved, not dead: it commits its checkpoint at the last moment. The
    coordinator reads the inbox to the stable end after the fence, so that checkpoint
    counts and no split it covers moves to another reader."""
    broker = MemoryLogBroker()
    broker.before_reader_fence = lambda _: checkpoint_all(broker)
    runner = start(broker, source=silent_reader_source())
    try:
        register(broker, 0, "starved")
        await until(lambda: len(assigned(broker)) == 3)
        broker.fetch_lag_s = 0.2  # the ack reaches the coordinator's consumer after the fence
        await until(lambda: released(broker) != [])
        assert broker.reader_fences == [READER_0]
        assert released(broker) == [SplitsReleased(reason="session-timeout", failed_attempt=1, split_ids=[])]
        assert runner.core is not None and runner.core.tracker.uncheckpointed_count(0) == 0
    finally:
        await runner.stop()


async def test_a_silent_readers_open_checkpoint_is_aborted_by_the_fence_and_can_never_commit() -> None:
    broker = MemoryLogBroker()
    runner = start(broker, source=silent_reader_source())
    try:
        register(broker, 0, "starved")
        await until(lambda: len(assigned(broker)) == 3)
        broker.begin_transaction(READER_0)  # it writes output, then gets no CPU before its ack
        await until(lambda: released(broker) != [])
        assert released(broker) == [
            SplitsReleased(reason="session-timeout", failed_attempt=1, split_ids=assigned(broker))
        ]
        assert broker.reader_fences == [READER_0]
        with pytest.raises(FencedTransactionError):  # it gets the CPU back and sends its ack
            checkpoint_all(broker, transactional=True)
        assert broker.end_transaction() is False, "the zombie's commit fails: its producer was fenced"
        await asyncio.sleep(0.1)
        assert runner.core is not None and runner.core.tracker.owner_of(assigned(broker)[0]) != 0
    finally:
        await runner.stop()


async def test_a_refused_fence_is_counted_and_the_silent_reader_fails_all_the_same() -> None:
    broker = MemoryLogBroker()
    broker.refuse_reader_fences = True
    runner = start(broker, source=silent_reader_source())
    try:
        register(broker, 0, "starved")
        await until(lambda: len(assigned(broker)) == 3)
        await until(lambda: released(broker) != [])
        assert released(broker)[0].split_ids == assigned(broker)
        assert runner.core is not None and runner.core.metrics.counters["reader_fences_refused"] == 1
    finally:
        await runner.stop()


async def test_a_transaction_holding_the_inbox_is_ended_and_a_registration_after_it_renews_its_producer() -> None:
    """Subtask 0's reader is killed between its ack and its commit; the coordinator ends the
    transaction (open_transaction.py) and tells the core, so a reader of subtask 0 that
    registers now starts a new producer first (the fence may have come after it started one)."""
    broker = MemoryLogBroker()
    runner = start(broker, source=silent_reader_source())
    try:
        register(broker, 0, "killed-mid-commit")
        await until(lambda: len(assigned(broker)) == 3)
        broker.begin_transaction(READER_0)
        checkpoint_all(broker, transactional=True)
        await until(lambda: broker.reader_fences[:1] == [READER_0])
        assert broker.stable == len(broker.inbox), "the transaction was aborted"
        await until(lambda: runner.core is not None and runner.core.metrics.counters["open_transactions_ended"] == 1)
        register(broker, 0, "restarted")
        await until(lambda: len(of_type(to_readers(broker), ReaderRegistered, 0)) == 2)
        assert of_type(to_readers(broker), ReaderRegistered, 0)[-1].body.renew_producer  # type: ignore[attr-defined]
    finally:
        await runner.stop()


async def test_a_coordinator_of_another_definition_is_refused_before_it_commits_anything() -> None:
    broker = MemoryLogBroker()
    first = start(broker, splits=4)
    await until(lambda: first.state is RunnerState.ACTIVE)
    await first.stop()
    commits = broker.commits
    other = start(broker, splits=5)
    await until(lambda: other.state is RunnerState.REFUSED)
    assert other.failure is not None and "splits" in other.failure
    assert broker.commits == commits


# -- a step longer than the silence (coordinator/step_thread.py, silence.py) ----------------

META = f"{SOURCE}/meta".encode()
LIVENESS_MS = 100


def start_slow(broker: MemoryLogBroker, add_reader_s: float) -> SourceRunner:
    """A runner whose every registration is a step of ``add_reader_s`` s of CPU, watched by
    standbys (it commits at least every LIVENESS_MS)."""
    options = {"splits": "4", "records_per_split": "10", "add_reader_s": str(add_reader_s)}
    settings = SourceSettings(SOURCE, "slow_steps:SlowRegistrationSource", 2, options)
    runner = SourceRunner(
        settings,
        "memory",
        "sluicegate",
        tick_interval_ms=20,
        log=MemoryCoordinatorLog(broker),
        liveness_interval_ms=LIVENESS_MS,
    )
    runner.start()
    return runner


def metas(broker: MemoryLogBroker) -> list[bytes | None]:
    return [value for key, value in broker.state if key == META]


async def test_a_long_step_leaves_the_loop_free_and_recommits_the_last_state_for_the_standbys() -> None:
    broker = MemoryLogBroker()
    runner = start_slow(broker, add_reader_s=1.5)
    try:
        await until(lambda: runner.state is RunnerState.ACTIVE)
        await asyncio.sleep(0.3)  # the liveness commits of an idle source
        before = len(metas(broker))
        last_committed = metas(broker)[-1]
        register(broker, 0, "a")
        await until(lambda: runner.step_running_s() > 0)
        assert runner.core_at_rest is None, "nothing on the loop reads the core while a step changes it"
        assert "a step running for" in runner.describe()
        # the event loop is not held by the step: short sleeps still take about their time
        started = time.monotonic()
        for _ in range(10):
            await asyncio.sleep(0.02)
        assert time.monotonic() - started < 1.0, "the loop was blocked by the step"
        await until(lambda: len(assigned(broker)) == 2)  # subtask 0's share: the step ended
        during = metas(broker)[before:-1]  # the last one is the step's own commit
        assert len(during) >= 5, f"{len(during)} commits in a 1.5 s step with a {LIVENESS_MS} ms liveness interval"
        assert set(during) == {last_committed}, "what is committed during the step is the last commit, unchanged"
        assert runner.stats.reaffirmed >= len(during) - 1
        assert runner.core_at_rest is runner.core
    finally:
        await runner.stop()


async def registration_step_running(broker: MemoryLogBroker, runner: SourceRunner) -> None:
    """Once ``runner`` serves, subtask 0 registers; until the step of that registration runs."""
    await until(lambda: runner.state is RunnerState.ACTIVE)
    register(broker, 0, "a")
    await until(lambda: runner.step_running_s() > 0)


async def test_a_step_longer_than_the_longest_is_a_stall_and_no_longer_recommitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(silence, "LONGEST_STEP_S", 0.5)
    broker = MemoryLogBroker()
    runner = start_slow(broker, add_reader_s=2.0)
    try:
        await registration_step_running(broker, runner)
        await until(lambda: runner.step_running_s() > 0.8)
        recommitted = runner.stats.reaffirmed
        assert recommitted >= 2, "recommitted while the step was young"
        await until(lambda: runner.step_running_s() > 1.6)
        assert runner.stats.reaffirmed == recommitted, "a step past the longest is taken for a stall: silence"
        await until(lambda: len(assigned(broker)) == 2)
    finally:
        await runner.stop()


ALIVE = f"{SOURCE}/alive".encode()


def scraped(runner: SourceRunner) -> Any:
    """What the endpoints read (metrics.SourceRunners): one worker serving ``runner``."""
    return SimpleNamespace(settings=SimpleNamespace(sources=[runner.settings]), runners={SOURCE: runner})


async def test_a_scrape_during_a_step_is_answered_after_it_with_the_core_and_never_half_way() -> None:
    broker = MemoryLogBroker()
    runner = start_slow(broker, add_reader_s=0.3)
    try:
        await registration_step_running(broker, runner)
        page = (await exposition(scraped(runner))).decode()
        # a scrape that came mid-step used to get none of the core's series: a busy
        # coordinator's dashboard showed nothing. It waits, and sees the step's outcome.
        assert f'sluicegate_registered_readers{{source="{SOURCE}"}} 1.0' in page, page
        assert f'sluicegate_coordinator_epoch{{source="{SOURCE}"}}' in page
        register(broker, 1, "b")
        await until(lambda: runner.step_running_s() > 0)
        snapshot = await source_snapshot(runner)  # /sources/{S}, the same way
        assert snapshot["subtasks"][0]["state"] == "live", snapshot
    finally:
        await runner.stop()


async def test_a_scrape_during_a_step_longer_than_its_wait_says_a_step_runs_and_leaves_the_core_out() -> None:
    broker = MemoryLogBroker()
    runner = start_slow(broker, add_reader_s=metrics.READ_WAIT_S + 1.0)
    try:
        await registration_step_running(broker, runner)
        page = (await exposition(scraped(runner))).decode()
        assert "sluicegate_registered_readers{" not in page, page
        (running,) = [line for line in page.splitlines() if line.startswith("sluicegate_step_running_seconds{")]
        assert float(running.split()[-1]) >= metrics.READ_WAIT_S
        assert f'sluicegate_active_source{{source="{SOURCE}"}} 1.0' in page
        assert "subtasks" not in await source_snapshot(runner)
    finally:
        await runner.stop()


async def test_a_commit_the_broker_keeps_waiting_marks_the_coordinator_alive_outside_it() -> None:
    broker = MemoryLogBroker()
    runner = start_slow(broker, add_reader_s=0.0)
    try:
        await until(lambda: runner.state is RunnerState.ACTIVE)
        await asyncio.sleep(0.3)
        assert broker.marks == 0, "commits that the broker takes at once need no mark"
        state_before = merge_records(SOURCE, broker.state).parts
        broker.delay_next_commits(1, 1.5)
        await until(lambda: broker.marks > 0)
        await until(lambda: broker.marks >= 5, timeout_s=3.0)
        assert merge_records(SOURCE, broker.state).parts == state_before, "a mark changes no state"
        register(broker, 0, "a")  # behind the waiting commit
        await until(lambda: len(assigned(broker)) == 2)
        marks = broker.marks
        assert 5 <= marks <= 1.5 / (LIVENESS_MS / 1000) + 1, f"{marks} marks in a commit of 1.5 s"
        assert runner.stats.marked_alive == marks
        assert [k for k, v in broker.state if v is None] == [ALIVE] * marks, "marks are tombstones of 'alive'"
        await asyncio.sleep(0.5)
        assert broker.marks == marks, "no mark once the transaction is taken"
    finally:
        await runner.stop()


class SlowRestoreLog(MemoryCoordinatorLog):
    """A log whose state takes ``restore_s`` to read, as a million splits' state does over Kafka."""

    def __init__(self, broker: MemoryLogBroker, restore_s: float) -> None:
        super().__init__(broker)
        self.restore_s = restore_s

    async def restore(self) -> list[tuple[bytes | None, bytes | None]]:
        await asyncio.sleep(self.restore_s)
        return await super().restore()


async def test_a_successor_reading_its_state_for_seconds_marks_itself_alive_from_its_fence_on() -> None:
    """A standby that took over was silent while it read a million splits' state (3 s in a CI
    run): the worker it had fenced, now a standby itself, took the source back after the
    silence, and the two fenced each other in turn."""
    broker = MemoryLogBroker()
    restore_s = 1.0
    runner = SourceRunner(
        settings(),
        "memory",
        "sluicegate",
        tick_interval_ms=20,
        log=SlowRestoreLog(broker, restore_s),
        liveness_interval_ms=LIVENESS_MS,
    )
    runner.start()
    try:
        await until(lambda: broker.marks > 0, timeout_s=restore_s / 2)
        assert runner.state is RunnerState.STARTING and not metas(broker), "marked before its first commit"
        await until(lambda: runner.state is RunnerState.ACTIVE)
        marks = broker.marks
        interval_s = LIVENESS_MS / 1000
        # about one an interval (a loaded machine's loop wakes later, never sooner)
        assert restore_s / interval_s / 2 <= marks <= restore_s / interval_s + 2, f"{marks} marks in {restore_s} s"
        await asyncio.sleep(0.5)
        assert broker.marks == marks, "none once it serves: its commits move the state topic"
    finally:
        await runner.stop()


async def test_a_commit_waiting_longer_than_the_longest_is_a_stall_and_no_longer_marked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(silence, "LONGEST_COMMIT_S", 0.5)
    broker = MemoryLogBroker()
    runner = start_slow(broker, add_reader_s=0.0)
    try:
        await until(lambda: runner.state is RunnerState.ACTIVE)
        broker.delay_next_commits(1, 2.0)
        await until(lambda: broker.marks > 0)
        await asyncio.sleep(0.8)
        marks = broker.marks
        assert marks >= 2, "marked while the transaction was young"
        await asyncio.sleep(0.8)
        assert broker.marks == marks, "a transaction past the longest is taken for a stall: silence"
    finally:
        await runner.stop()


async def test_a_runner_keeps_the_collector_off_its_restored_state_only_while_it_runs() -> None:
    """``gc.freeze`` after the start-up; a runner that ends unfreezes, or the cycles of its
    core and enumerator would never be freed (a source restarted after failures, in a
    coordinator that runs for weeks)."""
    gc.unfreeze()
    broker = MemoryLogBroker()
    runner = start(broker)
    try:
        await until(lambda: runner.state is RunnerState.ACTIVE)
        assert gc.get_freeze_count() > 0
    finally:
        await runner.stop()
    assert gc.get_freeze_count() == 0


async def test_a_runner_fenced_during_a_long_step_steps_down_when_the_step_ends() -> None:
    """Its re-affirming commit finds the fence while the step runs: it takes no further step
    (the records behind the slow one are the successor's to handle), instead of stepping
    on until its next commit fails."""
    broker = MemoryLogBroker()
    runner = start_slow(broker, add_reader_s=1.0)
    try:
        await until(lambda: runner.state is RunnerState.ACTIVE)
        register(broker, 0, "a")
        for i in range(20):
            register(broker, 1, f"b{i}")  # registrations behind the slow one, each another slow step
        await until(lambda: runner.step_running_s() > 0)
        standby = MemoryCoordinatorLog(broker)
        await standby.fence()  # a successor took over
        await until(lambda: runner.state is RunnerState.FENCED, timeout_s=3.0)
        assert runner.stats.records_in == 1, "it stepped on after the fenced step"
        assert to_readers(broker) == [], "nothing of the fenced runner is visible"
    finally:
        await runner.stop()


async def test_a_discovery_that_finds_nothing_new_commits_nothing_and_a_found_file_at_once(tmp_path: Path) -> None:
    """The files enumerator's discovery returns every 50 ms and flags its state changed;
    a state part that encodes as it was written is not a change, so an idle source does
    not commit at each discovery (it did: a transaction per discovery, ~3 a second idle
    with 2 readers, each a few requests and log appends for the broker)."""
    broker = MemoryLogBroker()
    options = {"path": str(tmp_path), "format": "jsonl", "discovery_interval_ms": "50"}
    runner = start(broker, source=SourceSettings(SOURCE, "files", 2, options))
    try:
        await until(lambda: runner.state is RunnerState.ACTIVE)
        await asyncio.sleep(0.3)  # the first discoveries may still record the empty listing
        before = runner.stats.commits
        await asyncio.sleep(1.0)  # ~20 discoveries, all finding the same empty directory
        assert runner.stats.commits - before == 0
        (tmp_path / "a.jsonl").write_text('{"n": 1}\n')
        await until(lambda: runner.stats.commits > before, timeout_s=2.0)  # within a discovery or two, not 1 s
        assert "a.jsonl" in str(merge_records(SOURCE, broker.state).parts["enumerator"])
    finally:
        await runner.stop()


async def test_finish_reads_and_commits_what_was_in_the_inbox_before_it_stops() -> None:
    """A host that ends (a bounded query done) stops its embedded coordinator last: the
    readers' last records are in the inbox, and finishing answers them and commits that,
    where ``stop`` would leave them to whichever coordinator serves the source next."""
    broker = MemoryLogBroker()
    runner = start(broker)
    await until(lambda: runner.state is RunnerState.ACTIVE)
    register(broker, 0, "a")
    register(broker, 1, "b")
    await runner.finish()
    assert runner.state is RunnerState.STOPPED
    assert sorted(e.subtask for e in of_type(to_readers(broker), ReaderRegistered)) == [0, 1]
    assert len(assigned(broker)) == 4
    meta = merge_records(SOURCE, broker.state).parts["meta"]
    assert meta["inbox_offset"] == broker.stable - 1, "the state says both registrations were read"


async def test_a_serving_coordinator_names_its_process_for_its_epoch() -> None:
    """Once it serves, the state names the process hosting the coordinator of that epoch
    (a host that starts here once it is gone takes over at once, embedded.py); a successor
    names its own epoch."""
    broker = MemoryLogBroker()
    for epoch in (1, 2):
        runner = start(broker)
        await until(functools.partial(lambda r: r.state is RunnerState.ACTIVE, runner))
        await runner.stop()
        parts = merge_records(SOURCE, broker.state).parts
        assert parts["host"]["epoch"] == epoch
        assert host_of_last(parts) == this_process().to_json()
        assert nobody_serves(parts) is None, "this process runs: whoever served may be alive"


async def test_a_finished_coordinator_releases_its_source_and_a_stopped_or_succeeded_one_does_not() -> None:
    """A host that ends says so in the state (released, naming its epoch): its next host
    serves the source at once. A coordinator stopped otherwise leaves no such word, and a
    successor's epoch makes an old one stale."""
    broker = MemoryLogBroker()
    runner = start(broker)
    await until(lambda: runner.state is RunnerState.ACTIVE)
    await runner.stop()
    assert not released_by_last(merge_records(SOURCE, broker.state).parts)
    runner = start(broker)
    await until(lambda: runner.state is RunnerState.ACTIVE)
    await runner.finish()
    parts = merge_records(SOURCE, broker.state).parts
    assert released_by_last(parts) and parts["released"] == {"epoch": 2}
    runner = start(broker)
    await until(lambda: runner.state is RunnerState.ACTIVE)
    try:
        assert not released_by_last(merge_records(SOURCE, broker.state).parts), "epoch 3 serves it"
    finally:
        await runner.stop()
