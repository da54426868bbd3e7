"""The Spark driver's side of the protocol: the reader subtasks of one Spark query.

``SparkReaderDriver`` runs in the long-lived Python process that Spark starts for
a streaming source on the driver (the one that calls ``latestOffset``,
``partitions`` and ``commit``). It owns a background thread with an asyncio
loop that drives one ``ReaderSession`` (reader/session.py: attempts, epochs,
``seq`` order, fencing) per reader subtask over Kafka (aiokafka):

- registration: per subtask, capture the read_committed end of its partition of
  ``NS.S.readers``, send ``ReaderRegistration`` (with the splits of the restored
  Spark offset, FLIP-537), consume from that offset; again after being fenced;
- coordinator records go to their subtask's session; the splits each applied
  ``AddSplits`` gives are remembered with its ``seq`` (their identity, offsets.py);
- a ``Heartbeat`` per subtask every ``heartbeat_interval_ms`` with the watermark of
  what is durably planned, a ``RequestSplit`` when a subtask has nothing;
- ``acknowledge(offset)``: ``SplitsFinished`` and ``CheckpointAck`` for an offset
  Spark has made durable, awaited until the broker has them.

No data passes through here: Spark's executors read the ranges the offsets name.
Every method that the Spark thread calls hands its work to the loop, so sessions
are only ever touched by the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from sluicegate.api.errors import ConfigError
from sluicegate.api.ranges import SupportsPositionRanges
from sluicegate.api.reader import Record
from sluicegate.api.source import Source
from sluicegate.api.split import WireSplit
from sluicegate.protocol.codec import DecodeError, decode, encode, encode_key
from sluicegate.protocol.dead_letter import DeadLetter
from sluicegate.protocol.messages import (
    AddSplits,
    Body,
    CheckpointAck,
    NoMoreSplits,
    ReaderLeaving,
    RequestSplit,
    SplitsFinished,
)
from sluicegate.protocol.messages import Direction as _Direction
from sluicegate.protocol.topics import ControlTopics
from sluicegate.reader.session import Disposition, Phase, ReaderSession
from sluicegate.reader.state import ReaderCheckpoint
from sluicegate.spark.offsets import OwnedSplit, SourceOffset, SubtaskView
from sluicegate.transport.topics import TopicApplyError, wait_for_topics

log = logging.getLogger("sluicegate.spark")

T = TypeVar("T")

REQUEST_SPLIT_INTERVAL_S = 1.0
REGISTRATION_NOTICE_INTERVAL_S = 15.0
CALL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DriverSettings:
    source: str
    parallelism: int
    bootstrap_servers: str
    namespace: str = "sluicegate"
    heartbeat_interval_ms: int = 1_000
    session_timeout_ms: int = 10_000
    topic_wait_timeout_s: float = 120.0
    location: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}/spark")

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise ConfigError("parallelism", f"must be >= 1, got {self.parallelism}")
        if not self.bootstrap_servers.strip():
            raise ConfigError("kafka.bootstrap.servers", "not set: pass the option or set KAFKA_BOOTSTRAP_SERVERS")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError("heartbeatIntervalMs", "must be below sessionTimeoutMs")


@dataclass(slots=True)
class _Assigned:
    wire: WireSplit
    seq: int


@dataclass(frozen=True)
class PlanningState:
    """What the next offset is planned from."""

    views: dict[int, SubtaskView]
    reported_finished: frozenset[str]


@dataclass
class DriverStatus:
    """What the driver knows, for progress reports and tests."""

    phases: dict[int, str]
    attempts: dict[int, int | None]
    owned: dict[int, int]
    no_more_splits: dict[int, bool]
    registrations: int
    fenced: int
    acks: int
    splits_finished: int
    dead_letters: int


class SparkReaderDriver:
    """The reader subtasks ``0..parallelism-1`` of one source, for one Spark query."""

    def __init__(self, settings: DriverSettings, source: Source[Any]) -> None:
        if not isinstance(source, SupportsPositionRanges):
            raise ConfigError(
                "connector", "this connector cannot be read by Spark: it does not support position ranges"
            )
        self.settings = settings
        self.source = source
        self.ranges: SupportsPositionRanges[Any] = source
        self.codec = source.split_codec
        self.topics = ControlTopics.for_source(settings.source, settings.namespace)
        self.sessions: dict[int, ReaderSession[Any]] = {}
        self._assigned: dict[int, dict[str, _Assigned]] = {s: {} for s in range(settings.parallelism)}
        self._acked: dict[int, tuple[int, int]] = {}
        """subtask -> (attempt, checkpoint id) of its last delivered CheckpointAck."""
        self._to_register: set[int] = set()
        self._registering_since: dict[int, float] = {}
        self._last_request: dict[int, float] = {}
        self._last_contact = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._stopping = False
        self._changed = threading.Condition()
        self._generation = 0
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stats = {"registrations": 0, "fenced": 0, "acks": 0, "splits_finished": 0, "dead_letters": 0}
        self._left = False
        self._reported_finished: set[str] = set()

    # -- life cycle (Spark thread) ---------------------------------------------------

    def start(self, restored: SourceOffset | None) -> None:
        """Start the loop thread and register every subtask (``restored``: the Spark
        offset the query resumes from; its splits are reported, FLIP-537)."""
        if self._thread is not None:
            return
        for s in range(self.settings.parallelism):
            self.sessions[s] = ReaderSession(
                self.settings.source,
                s,
                self.source,
                location=self.settings.location,
                restored=self._restored_checkpoint(restored, s),
            )
        self._thread = threading.Thread(target=self._run_loop, name="sluicegate-spark-driver", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            raise self._start_error

    def _restored_checkpoint(self, restored: SourceOffset | None, s: int) -> ReaderCheckpoint | None:
        if restored is None:
            return None
        sub = restored.subtasks.get(s)
        if sub is None:
            return None
        splits = [self._wire_at(e.split, e.pos) for _, e in sorted(sub.splits.items())]
        return ReaderCheckpoint(
            source=self.settings.source,
            subtask=s,
            checkpoint_id=restored.checkpoint_id,
            applied_seq=sub.applied_seq,
            splits=splits,
            epoch=sub.epoch,
            attempt=sub.attempt,
            no_more_splits=sub.no_more_splits,
        )

    def close(self) -> None:
        """Stop heartbeating and close the Kafka clients. Sends nothing: the coordinator
        times the attempts out (their checkpointed splits wait for the next attempt)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or self._stopping:
            return
        self._stopping = True
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

    def _run_loop(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._start())
        except BaseException as exc:
            self._start_error = exc
            self._ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(self._shutdown())
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _call(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout_s: float = CALL_TIMEOUT_S) -> T:
        loop = self._loop
        if loop is None or self._stopping:
            raise RuntimeError("the sluicegate driver is not running")
        return asyncio.run_coroutine_threadsafe(factory(), loop).result(timeout=timeout_s)

    # -- what the Spark thread asks --------------------------------------------------

    def planning_state(self) -> PlanningState:
        """Every subtask's attempt and owned splits, and the splits reported finished."""
        return self._call(self._planning_state)

    def acknowledge(self, offset: SourceOffset) -> bool:
        """Tell the coordinator that ``offset`` is durable (Spark wrote it to its offset
        log): for each subtask whose current attempt planned it, ``SplitsFinished``
        for its finished splits, then ``CheckpointAck``. True once every such subtask
        has its ack delivered (or had it before)."""
        return self._call(lambda: self._acknowledge(offset))

    def status(self) -> DriverStatus:
        return self._call(self._status)

    def all_finished(self) -> bool:
        """Bounded end: every subtask registered, told NoMoreSplits, and owning nothing
        (its finished splits reported)."""
        return self._call(self._all_finished)

    def all_active(self) -> bool:
        return self._call(self._all_active)

    def leave(self) -> None:
        """ReaderLeaving with no splits from every subtask (only once all are finished)."""
        self._call(self._leave)

    @property
    def generation(self) -> int:
        with self._changed:
            return self._generation

    def wait_for_change(self, since: int, timeout_s: float) -> int:
        """Block until something changed after generation ``since`` (an assignment, a
        registration, NoMoreSplits, a fence) or ``timeout_s``; returns the generation."""
        with self._changed:
            self._changed.wait_for(lambda: self._generation != since, timeout=timeout_s)
            return self._generation

    def _notify(self) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    # -- loop side -------------------------------------------------------------------

    async def _start(self) -> None:
        s = self.settings
        names = [self.topics.coordinator, self.topics.readers, self.topics.dead_letter]
        deadline = time.monotonic() + s.topic_wait_timeout_s
        while True:
            try:
                partitions = await wait_for_topics(s.bootstrap_servers, names, max(0.0, deadline - time.monotonic()))
                break
            except TopicApplyError as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("waiting for the topics of %s: %s", s.source, exc)
                await asyncio.sleep(2.0)
        count = partitions[self.topics.readers]
        if s.parallelism > count:
            raise ConfigError(
                "parallelism",
                f"{s.parallelism} reader subtasks, but {self.topics.readers} has {count} partitions "
                f"(the coordinator's --max-parallelism)",
            )
        if s.parallelism < count:
            log.warning(
                "%s has %d partitions but this query runs %d reader subtasks: subtasks %d..%d never register",
                self.topics.readers,
                count,
                s.parallelism,
                s.parallelism,
                count - 1,
            )
        client = f"{s.namespace}.{s.source}.spark-{os.getpid()}"
        self._producer = AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            client_id=client,
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
        )
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers,
            client_id=f"{client}.control",
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )
        await self._consumer.start()
        self._consumer.assign([self._tp(k) for k in range(s.parallelism)])
        self._to_register = set(range(s.parallelism))
        self._last_contact = time.monotonic()
        self._tasks = [
            asyncio.create_task(self._control_loop(), name="sluicegate-spark-control"),
            asyncio.create_task(self._heartbeat_loop(), name="sluicegate-spark-heartbeat"),
        ]

    async def _shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for session in self.sessions.values():
            if session.phase is not Phase.CLOSED:
                session.close()
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.stop()
        self._consumer = self._producer = None

    def _tp(self, subtask: int) -> TopicPartition:
        return TopicPartition(self.topics.readers, subtask)

    async def _control_loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            try:
                if self._to_register:
                    await self._register_pending()
                batches = await consumer.getmany(timeout_ms=100, max_records=1000)
            except KafkaError as exc:
                log.warning("reading %s failed: %s", self.topics.readers, exc)
                await asyncio.sleep(1.0)
                continue
            except Exception:  # never let the control loop die: registrations would stop
                log.exception("the control loop of %s failed; retrying", self.settings.source)
                await asyncio.sleep(1.0)
                continue
            for tp, records in batches.items():
                for record in records:
                    if not await self._on_record(tp.partition, record):
                        break  # fenced: the rest is addressed to the failed attempt
            self._registration_notices()

    async def _register_pending(self) -> None:
        consumer, producer = self._consumer, self._producer
        assert consumer is not None and producer is not None
        for s in sorted(self._to_register):
            session = self.sessions[s]
            if session.phase is Phase.ACTIVE:
                self._to_register.discard(s)
                continue
            tp = self._tp(s)
            end = (await consumer.end_offsets([tp]))[tp]
            consumer.seek(tp, end)
            registration = session.begin_registration()
            future = await producer.send(
                self.topics.coordinator, encode(session.envelope(registration, _now_ms())), key=encode_key(s)
            )
            await future
            self._last_contact = time.monotonic()
            self._to_register.discard(s)
            self._registering_since[s] = time.monotonic()
            log.info(
                "registering subtask %d of %s (incarnation %s, %d reported splits, checkpoint %s)",
                s,
                self.settings.source,
                registration.incarnation,
                len(registration.reported_splits),
                registration.restored_checkpoint_id,
            )

    def _registration_notices(self) -> None:
        now = time.monotonic()
        for s, since in list(self._registering_since.items()):
            if self.sessions[s].phase is not Phase.REGISTERING:
                del self._registering_since[s]
            elif now - since >= REGISTRATION_NOTICE_INTERVAL_S:
                self._registering_since[s] = now
                log.info("subtask %d still waits for the coordinator of %s to accept it", s, self.settings.source)

    async def _on_record(self, subtask: int, record: Any) -> bool:
        session = self.sessions[subtask]
        try:
            env = decode(record.value, _Direction.TO_READER)
        except DecodeError as exc:
            await self._dead_letter(record, exc.kind.value, exc.detail)
            return True
        body = env.body
        known = set(session.owned) if isinstance(body, AddSplits) else None
        try:
            outcome = session.on_message(env)
        except Exception as exc:  # e.g. the codec rejects a split
            log.exception("could not apply %s at offset %d", env.type, record.offset)
            await self._dead_letter(record, "rejected", f"{type(exc).__name__}: {exc}")
            return True
        if outcome is Disposition.REGISTERED:
            self._on_registered(subtask)
        elif outcome is Disposition.FENCED:
            self._on_fenced(subtask)
            return False
        elif outcome is Disposition.APPLIED and isinstance(body, AddSplits):
            assert known is not None
            mine = self._assigned[subtask]
            for split in body.splits:
                split_id = split["split_id"]
                if split_id not in known and split_id in session.owned:
                    mine[split_id] = _Assigned(dict(split), body.seq)
            self._notify()
        elif outcome is Disposition.APPLIED and isinstance(body, NoMoreSplits):
            self._notify()
        return True

    def _on_registered(self, subtask: int) -> None:
        session = self.sessions[subtask]
        self._stats["registrations"] += 1
        self._registering_since.pop(subtask, None)
        self._last_contact = time.monotonic()
        mine = self._assigned[subtask] = {}
        # Restored splits the session kept (sources without reassignment on recovery) are
        # read under a new identity (seq 0) from their restored positions.
        restored = {s["split_id"]: s for s in session.restored_splits}
        for split_id in session.owned:
            if split_id in restored:
                mine[split_id] = _Assigned(dict(restored[split_id]), 0)
        log.info("subtask %d registered as attempt %s", subtask, session.attempt)
        self._notify()

    def _on_fenced(self, subtask: int) -> None:
        session = self.sessions[subtask]
        self._stats["fenced"] += 1
        self._assigned[subtask] = {}
        self._acked.pop(subtask, None)
        self._to_register.add(subtask)
        last = session.last_checkpoint
        log.warning(
            "subtask %d fenced (%s): registering again with checkpoint %s (%d splits)",
            subtask,
            session.fenced_reason,
            last.checkpoint_id if last else None,
            len(last.splits) if last else 0,
        )
        self._notify()

    async def _dead_letter(self, record: Any, kind: str, reason: str) -> None:
        letter = DeadLetter(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value,
            kind=kind,
            reason=reason,
        )
        letter.log()
        self._stats["dead_letters"] += 1
        if self._producer is not None:
            try:
                await self._producer.send(
                    self.topics.dead_letter, letter.value, key=letter.key, headers=letter.headers()
                )
            except KafkaError as exc:
                log.warning("could not copy the record to %s: %s", self.topics.dead_letter, exc)

    async def _heartbeat_loop(self) -> None:
        interval = self.settings.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if self._left:
                return
            now = time.monotonic()
            sends: list[Awaitable[Any]] = []
            for s, session in self.sessions.items():
                if not session.active:
                    continue
                bodies: list[Body] = [session.heartbeat(), *session.take_outbox()]
                if (
                    not session.owned
                    and not session.no_more_splits
                    and now - self._last_request.get(s, 0.0) >= REQUEST_SPLIT_INTERVAL_S
                ):
                    self._last_request[s] = now
                    bodies.append(RequestSplit(hostname=socket.gethostname()))
                for body in bodies:
                    sends.append(self._send(s, body))
            if sends:
                results = await asyncio.gather(*sends, return_exceptions=True)
                if not any(isinstance(r, BaseException) for r in results):
                    self._last_contact = time.monotonic()
            self._check_contact()

    def _check_contact(self) -> None:
        silent = time.monotonic() - self._last_contact
        if silent * 1000 <= self.settings.session_timeout_ms:
            return
        reason = f"nothing could be sent to the coordinator for {silent:.1f} s"
        for s, session in self.sessions.items():
            if session.active or session.phase is Phase.REGISTERING:
                session.self_fence(reason)
                self._on_fenced(s)
        self._last_contact = time.monotonic()

    async def _send(self, subtask: int, body: Body) -> None:
        producer = self._producer
        assert producer is not None
        env = self.sessions[subtask].envelope(body, _now_ms())
        future = await producer.send(self.topics.coordinator, encode(env), key=encode_key(subtask))
        await future

    async def _planning_state(self) -> PlanningState:
        return PlanningState(self._views(), frozenset(self._reported_finished))

    def _views(self) -> dict[int, SubtaskView]:
        out: dict[int, SubtaskView] = {}
        for s, session in self.sessions.items():
            if not session.active:
                out[s] = SubtaskView(None, session.highest_epoch, session.applied_seq, False, ())
                continue
            splits = []
            for split_id, assigned in self._assigned[s].items():
                split = self.codec.from_wire(assigned.wire)
                splits.append(
                    OwnedSplit(
                        split_id=split_id,
                        split=assigned.wire,
                        seq=assigned.seq,
                        assigned_pos=self.ranges.split_position(split),
                        end=self.ranges.split_end(split),
                    )
                )
            out[s] = SubtaskView(
                session.attempt,
                session.highest_epoch,
                session.applied_seq,
                session.no_more_splits,
                tuple(splits),
                session.max_allowed_watermark,
            )
        return out

    async def _acknowledge(self, offset: SourceOffset) -> bool:
        ok = True
        for s, sub in sorted(offset.subtasks.items()):
            session = self.sessions.get(s)
            if session is None or not session.active or sub.attempt is None or sub.attempt != session.attempt:
                continue
            if self._acked.get(s, (0, -1)) >= (sub.attempt, offset.checkpoint_id):
                continue
            mine = self._assigned[s]
            finished = [sid for sid, e in sorted(sub.splits.items()) if e.finished and sid in mine]
            unfinished = {sid: e for sid, e in sub.splits.items() if not e.finished}
            wire = [self._wire_at(e.split, e.pos) for _, e in sorted(unfinished.items())]
            ack = CheckpointAck(checkpoint_id=offset.checkpoint_id, applied_seq=sub.applied_seq, splits=wire)
            try:
                if finished:
                    await self._send(s, SplitsFinished(split_ids=finished))
                await self._send(s, ack)
            except KafkaError as exc:
                log.warning("could not acknowledge checkpoint %d of subtask %d: %s", offset.checkpoint_id, s, exc)
                ok = False
                continue
            if session.attempt != sub.attempt:  # fenced while sending
                continue
            self._last_contact = time.monotonic()
            self._acked[s] = (sub.attempt, offset.checkpoint_id)
            self._stats["acks"] += 1
            self._stats["splits_finished"] += len(finished)
            session.last_checkpoint = ReaderCheckpoint(
                source=self.settings.source,
                subtask=s,
                checkpoint_id=offset.checkpoint_id,
                applied_seq=sub.applied_seq,
                splits=wire,
                epoch=session.highest_epoch,
                attempt=sub.attempt,
                no_more_splits=sub.no_more_splits,
            )
            session.checkpoints_committed += 1
            self._reported_finished.update(finished)
            for sid in finished:
                session.owned.pop(sid, None)
                mine.pop(sid, None)
                session.splits_finished_total += 1
            session.watermarks.remove(finished)
            session.watermarks.observe(
                Record(sid, None, self._event_time_before(e.split, e.pos)) for sid, e in unfinished.items()
            )
            if finished:
                log.info(
                    "subtask %d: checkpoint %d, %d splits finished, %d open",
                    s,
                    offset.checkpoint_id,
                    len(finished),
                    len(unfinished),
                )
                self._notify()
        return ok

    def _wire_at(self, wire: WireSplit, position: int) -> WireSplit:
        return self.codec.to_wire(self.ranges.with_position(self.codec.from_wire(wire), position))

    def _event_time_before(self, wire: WireSplit, position: int) -> int | None:
        return self.ranges.event_time_before(self.codec.from_wire(wire), position)

    async def _status(self) -> DriverStatus:
        return DriverStatus(
            phases={s: x.phase.value for s, x in self.sessions.items()},
            attempts={s: x.attempt for s, x in self.sessions.items()},
            owned={s: len(x.owned) for s, x in self.sessions.items()},
            no_more_splits={s: x.no_more_splits for s, x in self.sessions.items()},
            registrations=self._stats["registrations"],
            fenced=self._stats["fenced"],
            acks=self._stats["acks"],
            splits_finished=self._stats["splits_finished"],
            dead_letters=self._stats["dead_letters"],
        )

    async def _all_finished(self) -> bool:
        return all(x.active and x.no_more_splits and not x.owned for x in self.sessions.values())

    async def _all_active(self) -> bool:
        return all(x.active for x in self.sessions.values())

    async def _leave(self) -> None:
        if self._left or not await self._all_finished():
            return
        for s in sorted(self.sessions):
            try:
                await self._send(s, ReaderLeaving(splits=[]))
            except KafkaError as exc:
                log.warning("subtask %d could not leave: %s (the coordinator will time it out)", s, exc)
        self._left = True
        log.info("all %d subtasks finished and left %s", len(self.sessions), self.settings.source)


def _now_ms() -> int:
    return int(time.time() * 1000)


def offsets_rows(offset: Mapping[str, Any] | None) -> int:
    """Records planned up to a (JSON) offset of this source; 0 if it is not one."""
    if not isinstance(offset, Mapping):
        return 0
    rows = offset.get("rows")
    return rows if isinstance(rows, int) else 0
