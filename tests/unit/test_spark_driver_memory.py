"""The Spark driver's protocol work without Kafka: a SparkReaderDriver on the in-memory
control channel, with the test playing the coordinator. Registration, assignment,
planning, acknowledgement and fencing, in well under a second."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from core_harness import body

from sluicegate.api.errors import SourceError
from sluicegate.api.reader import LowWatermarkListener
from sluicegate.protocol.codec import decode, encode, encode_key
from sluicegate.protocol.messages import (
    AddSplits,
    Body,
    CheckpointAck,
    Direction,
    Envelope,
    Heartbeat,
    ReaderRegistered,
    ReaderRegistration,
    RegistrationRefused,
    ReleaseRequest,
    RequestSplit,
    SplitsReleased,
    WatermarkAnnouncement,
    envelope,
)
from sluicegate.protocol.topics import ControlTopics
from sluicegate.reader.memory_channel import MemoryBroker, MemoryControlChannel
from sluicegate.spark.driver import DriverSettings, PlanningState, SparkReaderDriver
from sluicegate.spark.offsets import SourceOffset, plan_next, ranges_between
from sluicegate.spark.read_reports import ReadReport, SplitRead, report_url
from sluicegate_connectors.sequence import SequenceSource

SOURCE = "memdriver"
TOPICS = ControlTopics.for_source(SOURCE)


def eventually(check: Callable[[], Any], timeout_s: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"not within {timeout_s} s: {check}")


class Coordinator:
    """The test's stand-in: reads the inbox, writes to the readers topic on the driver's loop."""

    def __init__(self, broker: MemoryBroker, driver: SparkReaderDriver) -> None:
        self.broker = broker
        self.driver = driver

    def inbox(self, *types: type[Body]) -> list[Envelope]:
        envs = [decode(r.value or b"", Direction.TO_COORDINATOR) for r in self.broker.records(TOPICS.coordinator)]
        return [e for e in envs if not types or isinstance(e.body, types)]

    def send(self, subtask: int, body: Body, attempt: int | None, epoch: int = 1) -> None:
        value = encode(envelope(body, source=SOURCE, subtask=subtask, attempt=attempt, epoch=epoch, ts=1))
        loop = self.driver.loop
        assert loop is not None
        loop.call_soon_threadsafe(self.broker.append, TOPICS.readers, subtask, encode_key(subtask), value)


@contextlib.contextmanager
def two_subtasks(
    heartbeat_interval_ms: int = 50, session_timeout_ms: int = 2_000
) -> Iterator[tuple[SparkReaderDriver, Coordinator]]:
    """A started driver of two subtasks over the memory channel, and the test's coordinator."""
    broker = MemoryBroker()
    broker.create_control_topics(TOPICS, 2)
    source = SequenceSource.from_options({"splits": "4", "records_per_split": "100"})
    settings = DriverSettings(
        source=SOURCE,
        parallelism=2,
        bootstrap_servers="memory:0",
        heartbeat_interval_ms=heartbeat_interval_ms,
        session_timeout_ms=session_timeout_ms,
    )
    driver = SparkReaderDriver(settings, source, channel=MemoryControlChannel(broker, TOPICS))
    driver.start(None)
    try:
        yield driver, Coordinator(broker, driver)
    finally:
        driver.close()


@pytest.fixture
def running() -> Iterator[tuple[SparkReaderDriver, Coordinator]]:
    with two_subtasks() as pair:
        yield pair


def wire(k: int) -> dict[str, Any]:
    return {"split_id": f"seq-{k:05d}", "start": k * 100, "end": (k + 1) * 100, "position": k * 100}


def register_both(coordinator: Coordinator) -> None:
    registrations = eventually(
        lambda: coordinator.inbox(ReaderRegistration) if len(coordinator.inbox(ReaderRegistration)) == 2 else None
    )
    for env in registrations:
        assert isinstance(env.body, ReaderRegistration)
        coordinator.send(
            env.subtask, ReaderRegistered(incarnation=env.body.incarnation, attempt=1, dropped_split_ids=[]), None
        )


def test_assigned_splits_are_planned_read_and_acknowledged(running: tuple[SparkReaderDriver, Coordinator]) -> None:
    driver, coordinator = running
    register_both(coordinator)
    eventually(driver.all_active)
    coordinator.send(0, AddSplits(seq=1, splits=[wire(0), wire(1)]), attempt=1)
    coordinator.send(1, AddSplits(seq=1, splits=[wire(2)]), attempt=1)
    state = eventually(
        lambda: (s := driver.planning_state()) and sum(len(v.splits) for v in s.views.values()) == 3 and s
    )
    assert {o.split_id: o.seq for o in state.views[0].splits} == {"seq-00000": 1, "seq-00001": 1}

    start = SourceOffset(1)
    first = plan_next(start, state.views, None, lambda o, base: int(o.split["end"]))
    planned = ranges_between(start, first)
    assert {r.split["split_id"]: (r.start, r.end) for r in planned[0]} == {
        "seq-00000": (0, 100),
        "seq-00001": (100, 200),
    }
    assert {r.split["split_id"]: (r.start, r.end) for r in planned[1]} == {"seq-00002": (200, 300)}
    assert driver.acknowledge(first)
    acks = [e for e in coordinator.inbox(CheckpointAck) if e.subtask == 0]
    assert [body(a, CheckpointAck).checkpoint_id for a in acks] == [first.checkpoint_id]
    assert body(acks[-1], CheckpointAck).splits == []
    assert driver.status().splits_finished == 3


def test_a_subtask_that_registers_owning_nothing_asks_for_work_at_once() -> None:
    """Not at its next heartbeat (20 s here): a pull assigner (files) gives only to a
    requester, and a Trigger.Once batch planned before the request was answered read nothing."""
    with two_subtasks(heartbeat_interval_ms=20_000, session_timeout_ms=60_000) as (_, coordinator):
        assert not coordinator.inbox(RequestSplit)
        register_both(coordinator)
        requests = eventually(
            lambda: coordinator.inbox(RequestSplit) if len(coordinator.inbox(RequestSplit)) == 2 else None
        )
        assert sorted(env.subtask for env in requests) == [0, 1]
        assert all(env.attempt == 1 for env in requests)


class HeldChannel(MemoryControlChannel):
    """Holds every send while ``held`` is set (a slow broker) and counts the acks sent
    (heartbeats go through here too, at their own times)."""

    def __init__(self, broker: MemoryBroker, topics: ControlTopics) -> None:
        super().__init__(broker, topics)
        self.held = threading.Event()
        self.acks_started = 0

    async def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        wait: bool,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> bool:
        if isinstance(decode(value, Direction.TO_COORDINATOR).body, CheckpointAck):
            self.acks_started += 1
        while self.held.is_set():
            await asyncio.sleep(0.005)
        return await super()._send(topic, key, value, wait, headers)


def test_acknowledge_soon_does_not_wait_and_a_later_acknowledge_waits_for_it() -> None:
    """partitions() acknowledges while the executors read; the next batch's planning
    (acknowledge of its start) still waits for that ack, and acks stay in order."""
    broker = MemoryBroker()
    broker.create_control_topics(TOPICS, 2)
    source = SequenceSource.from_options({"splits": "4", "records_per_split": "100"})
    settings = DriverSettings(
        source=SOURCE, parallelism=2, bootstrap_servers="memory:0", heartbeat_interval_ms=50, session_timeout_ms=5_000
    )
    channel = HeldChannel(broker, TOPICS)
    driver = SparkReaderDriver(settings, source, channel=channel)
    driver.start(None)
    try:
        coordinator = Coordinator(broker, driver)
        register_both(coordinator)
        eventually(driver.all_active)
        coordinator.send(0, AddSplits(seq=1, splits=[wire(0)]), attempt=1)
        coordinator.send(1, AddSplits(seq=1, splits=[wire(1)]), attempt=1)
        state = eventually(lambda: (s := driver.planning_state()) and all(v.splits for v in s.views.values()) and s)
        first = plan_next(SourceOffset(1), state.views, None, lambda o, base: base + 10)
        second = plan_next(first, state.views, None, lambda o, base: base + 20)

        channel.held.set()
        began = time.monotonic()
        driver.acknowledge_soon(first)
        assert time.monotonic() - began < 0.5
        # both subtasks' acks are on their way at once, neither delivered
        eventually(lambda: channel.acks_started == 2)
        assert coordinator.inbox(CheckpointAck) == []

        threading.Timer(0.3, channel.held.clear).start()
        began = time.monotonic()
        assert driver.acknowledge(second)
        assert time.monotonic() - began >= 0.2  # it waited for the held ack of ``first``
        for subtask in (0, 1):
            acks = [
                body(e, CheckpointAck).checkpoint_id for e in coordinator.inbox(CheckpointAck) if e.subtask == subtask
            ]
            assert acks == [first.checkpoint_id, second.checkpoint_id]
    finally:
        channel.held.clear()
        driver.close()


def test_a_failed_attempt_registers_again_with_its_checkpoint(running: tuple[SparkReaderDriver, Coordinator]) -> None:
    driver, coordinator = running
    register_both(coordinator)
    eventually(driver.all_active)
    coordinator.send(1, SplitsReleased(reason="session-timeout", failed_attempt=1, split_ids=[]), attempt=1)
    again = eventually(lambda: [e for e in coordinator.inbox(ReaderRegistration) if e.subtask == 1][1:])
    first = body(coordinator.inbox(ReaderRegistration)[0], ReaderRegistration)
    assert body(again[0], ReaderRegistration).incarnation != first.incarnation
    assert driver.status().fenced == 1


def test_a_timed_out_query_reads_nothing_twice_that_spark_planned_before_the_coordinator_heard(
    running: tuple[SparkReaderDriver, Coordinator],
) -> None:
    """Spark wrote ``first`` to its offset log (its batch reads 10 of each split), but the
    driver paused past its session timeout before the ack arrived: the coordinator gives
    the splits back at the positions they were assigned with. The next offset must start
    them where ``first`` ended (Spark replays the batch up to there), not where they were
    assigned."""
    driver, coordinator = running
    register_both(coordinator)
    eventually(driver.all_active)
    for s in (0, 1):
        coordinator.send(s, AddSplits(seq=1, splits=[wire(2 * s), wire(2 * s + 1)]), attempt=1)
    views = eventually(lambda: (v := driver.planning_state().views) and all(len(v[s].splits) == 2 for s in v) and v)
    start = SourceOffset(1)
    first = plan_next(start, views, None, lambda o, base: base + 10)  # planned, never acknowledged
    read = {r.split["split_id"]: (r.start, r.end) for ranges in ranges_between(start, first).values() for r in ranges}
    assert read == {f"seq-0000{k}": (k * 100, k * 100 + 10) for k in range(4)}

    for s in (0, 1):
        coordinator.send(s, SplitsReleased(reason="session-timeout", failed_attempt=1, split_ids=[]), attempt=1)
    again = eventually(lambda: (r := coordinator.inbox(ReaderRegistration)[2:]) and len(r) == 2 and r)
    for env in again:
        coordinator.send(env.subtask, ReaderRegistered(body(env, ReaderRegistration).incarnation, 2, []), None)
    eventually(driver.all_active)
    # the enumerator assigns them again, to the other subtask, at their acknowledged positions
    for s in (0, 1):
        coordinator.send(s, AddSplits(seq=2, splits=[wire(2 * (1 - s)), wire(2 * (1 - s) + 1)]), attempt=2)
    views = eventually(
        lambda: (v := driver.planning_state().views) and all(len(v[s].splits) == 2 for s in v) and v, timeout_s=5
    )
    assert {o.split_id: o.assigned_pos for s in views for o in views[s].splits} == {
        f"seq-0000{k}": k * 100 for k in range(4)
    }
    second = plan_next(first, views, None, lambda o, base: base + 10)
    # the new identities start where ``first`` ended, not at the assigned positions
    read = {r.split["split_id"]: (r.start, r.end) for ranges in ranges_between(first, second).values() for r in ranges}
    assert read == {f"seq-0000{k}": (k * 100 + 10, k * 100 + 20) for k in range(4)}
    assert {sid: e.pos for sub in second.subtasks.values() for sid, e in sub.splits.items()} == {
        f"seq-0000{k}": k * 100 + 20 for k in range(4)
    }
    assert driver.acknowledge(second)
    third = plan_next(second, driver.planning_state().views, None, lambda o, base: base + 10)
    read = {r.split["split_id"]: (r.start, r.end) for ranges in ranges_between(second, third).values() for r in ranges}
    assert read == {f"seq-0000{k}": (k * 100 + 20, k * 100 + 30) for k in range(4)}


def test_registrations_are_exclusive_and_a_lasting_refusal_fails_the_query(
    running: tuple[SparkReaderDriver, Coordinator],
) -> None:
    driver, coordinator = running
    first = eventually(lambda: [e for e in coordinator.inbox(ReaderRegistration) if e.subtask == 0])
    registration = body(first[0], ReaderRegistration)
    assert registration.exclusive  # a second query must not fence the first one's readers
    refusal = RegistrationRefused(
        incarnation=registration.incarnation,
        reason="subtask 0 is held by a live reader",
        holder_incarnation="other-query",
        holder_location="host-9:1/spark",
    )
    coordinator.send(0, refusal, None)
    # refused: it retries (the holder may be this query's previous run, not yet timed out)
    retry = eventually(lambda: [e for e in coordinator.inbox(ReaderRegistration) if e.subtask == 0][1:])
    driver.planning_state()  # no error yet
    # refused for longer than a session timeout (2 s here): the query fails, naming the holder
    deadline = time.monotonic() + 4.0
    incarnation = body(retry[0], ReaderRegistration).incarnation
    while time.monotonic() < deadline:
        coordinator.send(0, dataclasses.replace(refusal, incarnation=incarnation), None)
        time.sleep(0.3)
        try:
            driver.planning_state()
        except SourceError as exc:
            assert "held by another live reader" in str(exc) and "host-9:1/spark" in str(exc)
            return
        incarnation = body(
            [e for e in coordinator.inbox(ReaderRegistration) if e.subtask == 0][-1], ReaderRegistration
        ).incarnation
    raise AssertionError("the query did not fail")


def test_a_refusal_by_an_attempt_of_this_very_process_is_waited_out(
    running: tuple[SparkReaderDriver, Coordinator],
) -> None:
    # a coordinator that restored the query's own earlier attempt keeps it until it times out
    driver, coordinator = running
    first = eventually(lambda: [e for e in coordinator.inbox(ReaderRegistration) if e.subtask == 0])
    incarnation = body(first[0], ReaderRegistration).incarnation
    deadline = time.monotonic() + 4.0  # twice the session timeout
    while time.monotonic() < deadline:
        own = RegistrationRefused(
            incarnation=incarnation,
            reason="subtask 0 is held by a live reader",
            holder_incarnation="this-query-before",
            holder_location=driver.settings.location,
        )
        coordinator.send(0, own, None)
        time.sleep(0.3)
        driver.planning_state()  # never fails: the holder is this process
        incarnation = body(
            [e for e in coordinator.inbox(ReaderRegistration) if e.subtask == 0][-1], ReaderRegistration
        ).incarnation


def test_a_subtask_taken_by_another_process_fails_the_query(running: tuple[SparkReaderDriver, Coordinator]) -> None:
    driver, coordinator = running
    register_both(coordinator)
    eventually(driver.all_active)
    fence = SplitsReleased(
        reason="fenced", failed_attempt=1, split_ids=[], successor_incarnation="x", successor_location="host-2:7"
    )
    coordinator.send(1, fence, attempt=1)

    def failed() -> str | None:
        try:
            driver.planning_state()
        except SourceError as exc:
            return str(exc)
        return None

    message = eventually(failed)
    assert "was taken by another reader" in message and "host-2:7" in message
    # it does not register again (which would fence the other process in turn)
    assert len([e for e in coordinator.inbox(ReaderRegistration) if e.subtask == 1]) == 1


def test_a_split_asked_back_is_planned_no_further_and_returned_with_the_next_offset_s_ack(
    running: tuple[SparkReaderDriver, Coordinator],
) -> None:
    driver, coordinator = running
    register_both(coordinator)
    eventually(driver.all_active)
    coordinator.send(0, AddSplits(seq=1, splits=[wire(0), wire(1)]), attempt=1)
    eventually(lambda: len(driver.planning_state().views[0].splits) == 2)

    def ten_more(o: Any, base: int) -> int:
        return base + 10

    start = SourceOffset(1)
    first = plan_next(start, driver.planning_state().views, None, ten_more)  # reads 10 of each
    assert {r.split["split_id"]: (r.start, r.end) for r in ranges_between(start, first)[0]} == {
        "seq-00000": (0, 10),
        "seq-00001": (100, 110),
    }
    assert driver.acknowledge(first)

    coordinator.send(0, ReleaseRequest(seq=2, split_ids=["seq-00000"]), attempt=1)
    views = eventually(lambda: (v := driver.planning_state().views) and v[0].applied_seq == 2 and v)
    assert {o.split_id: o.releasing for o in views[0].splits} == {"seq-00000": True, "seq-00001": False}
    second = plan_next(first, views, None, ten_more)
    # the batch after the request reads the other split only
    assert {r.split["split_id"]: (r.start, r.end) for r in ranges_between(first, second)[0]} == {
        "seq-00001": (110, 120)
    }
    assert driver.acknowledge(second)
    ack = body([e for e in coordinator.inbox(CheckpointAck) if e.subtask == 0][-1], CheckpointAck)
    assert ack.applied_seq == 2
    assert [(s["split_id"], s["position"]) for s in ack.returned] == [("seq-00000", 10)]
    assert [s["split_id"] for s in ack.splits] == ["seq-00001"]
    # it is no longer this query's: the next offset keeps its position aside (parked)
    views = driver.planning_state().views
    assert [o.split_id for o in views[0].splits] == ["seq-00001"]
    third = plan_next(second, views, None, ten_more)
    assert third.parked["seq-00000"].pos == 10 and "seq-00000" not in third.subtasks[0].splits


@contextlib.contextmanager
def two_splits_on_one_subtask(
    source: SequenceSource, **settings: Any
) -> Iterator[tuple[SparkReaderDriver, Coordinator, PlanningState]]:
    """A driver of one subtask (heartbeats every 50 ms, ``settings`` besides), registered
    and given splits 0 and 1 of ``source``, both at position 0."""
    broker = MemoryBroker()
    broker.create_control_topics(TOPICS, 1)
    driver_settings = DriverSettings(
        source=SOURCE,
        parallelism=1,
        bootstrap_servers="memory:0",
        heartbeat_interval_ms=50,
        session_timeout_ms=2_000,
        **settings,
    )
    driver = SparkReaderDriver(driver_settings, source, channel=MemoryControlChannel(broker, TOPICS))
    driver.start(None)
    coordinator = Coordinator(broker, driver)
    try:
        registration = eventually(lambda: coordinator.inbox(ReaderRegistration))[0]
        coordinator.send(0, ReaderRegistered(body(registration, ReaderRegistration).incarnation, 1, []), None)
        eventually(driver.all_active)
        coordinator.send(0, AddSplits(seq=1, splits=[wire(0), wire(1)]), attempt=1)
        state = eventually(lambda: (s := driver.planning_state()) and len(s.views[0].splits) == 2 and s)
        yield driver, coordinator, state
    finally:
        driver.close()


@pytest.fixture
def idle_driver() -> Iterator[tuple[SparkReaderDriver, Coordinator, PlanningState]]:
    """One subtask with splits 0 and 1 (split idle timeout 300 ms)."""
    source = SequenceSource.from_options({"splits": "2", "records_per_split": "100"})
    with two_splits_on_one_subtask(source, split_idle_timeout_ms=300) as started:
        yield started


START_MS = 1_700_000_000_000
"""The sequence connector's start_time_ms: value v of split k at START_MS + (v - k * 100) * 10."""


def heartbeats(coordinator: Coordinator) -> list[Heartbeat]:
    return [body(e, Heartbeat) for e in coordinator.inbox(Heartbeat)]


def read_both_to_10(driver: SparkReaderDriver, coordinator: Coordinator, state: PlanningState) -> SourceOffset:
    offset = plan_next(SourceOffset(1), state.views, None, lambda o, base: base)  # the splits join
    offset = plan_next(offset, state.views, None, lambda o, base: base + 10)
    assert driver.acknowledge(offset)
    assert eventually(lambda: (hb := heartbeats(coordinator)) and hb[-1].watermark == START_MS + 90)
    return offset


def test_split_idleness_a_split_whose_planned_position_stands_still_stops_holding_the_watermark(
    idle_driver: tuple[SparkReaderDriver, Coordinator, PlanningState],
) -> None:
    """splitIdleTimeoutMs: a split whose acknowledged position did not advance for that long
    stops counting in its subtask's heartbeat watermark; all of them still: idle."""
    driver, coordinator, state = idle_driver
    offset = read_both_to_10(driver, coordinator, state)

    def only_split_0(o: Any, base: int) -> int:
        return base + 1 if o.split_id == "seq-00000" else base

    def split_1_idle() -> bool:
        nonlocal offset
        offset = plan_next(offset, state.views, None, only_split_0)
        assert driver.acknowledge(offset)
        time.sleep(0.02)
        # split 1 stays at START_MS + 90: a watermark past it is split 0's alone (the
        # event times follow within a heartbeat interval, event_times.py)
        last = heartbeats(coordinator)[-1]
        return last.watermark is not None and last.watermark > START_MS + 90 and not last.idle

    assert eventually(split_1_idle)  # split 0 alone makes the watermark: split 1 is idle
    assert eventually(lambda: heartbeats(coordinator)[-1].idle)  # nothing advances: every split idle


def test_split_idleness_splits_held_back_by_the_alignment_bound_are_not_idle(
    idle_driver: tuple[SparkReaderDriver, Coordinator, PlanningState],
) -> None:
    """The planner does not advance a split past the announced bound: quiet because it is
    ahead, so it must not go idle (or every subtask could be idle with the bound stuck)."""
    driver, coordinator, state = idle_driver
    read_both_to_10(driver, coordinator, state)
    coordinator.send(0, WatermarkAnnouncement(START_MS, START_MS + 50), attempt=1)  # both past the bound
    eventually(lambda: driver.planning_state().views[0].max_allowed_watermark == START_MS + 50)
    seen = len(heartbeats(coordinator))
    time.sleep(0.8)  # well past the idle timeout (300 ms): nothing advances, nothing goes idle
    later = heartbeats(coordinator)[seen:]
    assert later and not any(hb.idle for hb in later)
    coordinator.send(0, WatermarkAnnouncement(START_MS + 90, None), attempt=1)  # resumed: idle after a timeout
    assert eventually(lambda: heartbeats(coordinator)[-1].idle)


class SlowEventTimes(SequenceSource):
    """A source whose event times take as long as the test says (the kafka connector reads
    them from the cluster)."""

    answer = threading.Event()

    def event_times_before(self, wanted: Any) -> list[int | None]:
        assert self.answer.wait(10)
        return list(super().event_times_before(wanted))


def test_an_acknowledgement_does_not_wait_for_its_event_times_and_the_watermark_follows_them() -> None:
    """The next micro-batch waits for the acknowledgement, so reading event times (a
    fetch round trip for Kafka) is not on its path: the ack is delivered while they are
    being read, and the heartbeats' watermark rises once they are known."""
    source = SlowEventTimes(SequenceSource.from_options({"splits": "2", "records_per_split": "100"}).options)
    try:
        with two_splits_on_one_subtask(source) as (driver, coordinator, state):
            offset = plan_next(SourceOffset(1), state.views, None, lambda o, base: base)
            offset = plan_next(offset, state.views, None, lambda o, base: base + 10)
            began = time.monotonic()
            assert driver.acknowledge(offset)  # the event times are not known yet
            assert time.monotonic() - began < 2
            assert coordinator.inbox(CheckpointAck)
            time.sleep(0.2)
            assert {hb.watermark for hb in heartbeats(coordinator)} == {None}
            SlowEventTimes.answer.set()
            assert eventually(lambda: heartbeats(coordinator)[-1].watermark == START_MS + 90)
    finally:
        SlowEventTimes.answer.set()  # never leave the driver's probe thread waiting


class ListeningSequence(SequenceSource, LowWatermarkListener):
    """A source that hears the low watermark on the Spark host (FLINK-4576's listener)."""

    heard: list[int]

    def notify_low_watermark(self, watermark: int) -> None:
        self.heard.append(watermark)


def test_the_source_hears_the_low_watermark_each_time_it_advances_on_the_spark_host() -> None:
    broker = MemoryBroker()
    broker.create_control_topics(TOPICS, 2)
    source = ListeningSequence(SequenceSource.from_options({"splits": "4", "records_per_split": "100"}).options)
    source.heard = []
    settings = DriverSettings(
        source=SOURCE, parallelism=2, bootstrap_servers="memory:0", heartbeat_interval_ms=50, session_timeout_ms=2_000
    )
    driver = SparkReaderDriver(settings, source, channel=MemoryControlChannel(broker, TOPICS))
    driver.start(None)
    try:
        coordinator = Coordinator(broker, driver)
        register_both(coordinator)
        eventually(driver.all_active)
        for low in (None, 1_000, 1_000, 2_000):
            for subtask in (0, 1):  # every subtask of the query gets the announcement
                coordinator.send(subtask, WatermarkAnnouncement(low_watermark=low, max_allowed_watermark=None), 1)
        eventually(lambda: source.heard == [1_000, 2_000])
    finally:
        driver.close()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
        return text


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def series(text: str, line_start: str) -> float | None:
    found = [line for line in text.splitlines() if line.startswith(line_start)]
    return float(found[0].rsplit(" ", 1)[1]) if found else None


def test_the_driver_serves_its_metrics_splits_owned_and_acknowledged_rows() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    broker = MemoryBroker()
    broker.create_control_topics(TOPICS, 2)
    source = SequenceSource.from_options({"splits": "4", "records_per_split": "100"})
    settings = DriverSettings(
        source=SOURCE, parallelism=2, bootstrap_servers="memory:0", heartbeat_interval_ms=50, metrics_port=port
    )
    driver = SparkReaderDriver(settings, source, channel=MemoryControlChannel(broker, TOPICS))
    driver.start(None)
    try:
        coordinator = Coordinator(broker, driver)
        register_both(coordinator)
        eventually(driver.all_active)
        coordinator.send(0, AddSplits(seq=1, splits=[wire(0), wire(1)]), attempt=1)
        coordinator.send(1, AddSplits(seq=1, splits=[wire(2)]), attempt=1)
        state = eventually(
            lambda: (s := driver.planning_state()) and sum(len(v.splits) for v in s.views.values()) == 3 and s
        )
        text = scrape(port)
        assert series(text, f'sluicegate_spark_splits_owned{{source="{SOURCE}",subtask="0"}}') == 2
        assert series(text, f'sluicegate_spark_splits_owned{{source="{SOURCE}",subtask="1"}}') == 1
        assert series(text, f'sluicegate_spark_registered{{source="{SOURCE}",subtask="1"}}') == 1
        assert series(text, "sluicegate_spark_records_acknowledged_total") == 0

        first = plan_next(SourceOffset(1), state.views, None, lambda o, base: int(o.split["end"]))
        second = plan_next(first, state.views, None, lambda o, base: int(o.split["end"]))
        assert driver.acknowledge(first) and driver.acknowledge(second)
        text = scrape(port)
        assert second.rows == 300  # the batch between the two offsets reads every split to its end
        assert series(text, "sluicegate_spark_records_acknowledged_total") == 300
        assert series(text, f'sluicegate_spark_checkpoint_ack_seconds_count{{source="{SOURCE}"}}') == 2
        assert series(text, "sluicegate_spark_splits_finished_total") == 3

        # executors' reports (spark/read_reports.py) arrive on the same endpoint
        report = ReadReport(SOURCE, 1, 0.5, (SplitRead(wire(2)["split_id"], 100, 4_000),))
        assert post(report_url("127.0.0.1", port), report.to_json()) == 204
        assert post(report_url("127.0.0.1", port), b"not a report") == 400
        text = scrape(port)
        labels = f'source="{SOURCE}",subtask="1"'
        assert series(text, f"sluicegate_spark_rows_read_total{{{labels}}}") == 100
        assert series(text, f"sluicegate_spark_bytes_read_total{{{labels}}}") == 4_000
        assert series(text, f"sluicegate_spark_read_tasks_total{{{labels}}}") == 1
        split = f'source="{SOURCE}",split="{wire(2)["split_id"]}",subtask="1"'  # served in name order
        assert series(text, f"sluicegate_spark_split_rows_read_total{{{split}}}") == 100
        assert series(text, "sluicegate_spark_read_reports_refused_total") == 1
    finally:
        driver.close()
    with pytest.raises(OSError):
        scrape(port)  # closed with the driver
