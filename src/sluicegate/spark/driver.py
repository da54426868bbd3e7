"""The Spark driver's side of the protocol: the reader subtasks of one Spark query.

``SparkReaderDriver`` runs in the long-lived Python process that Spark starts for
a streaming source on the driver (the one that calls ``latestOffset``,
``partitions`` and ``commit``). It owns a background thread with an asyncio
loop that drives one ``ReaderProtocol`` (reader/protocol.py: attempts, epochs,
``seq`` order, fencing, ownership, checkpoint acceptance) per reader subtask over
a ``ControlChannel`` (reader/channel.py; Kafka unless a test gives an in-memory
one); no connector reader is created here:

- registration: per subtask, capture the read_committed end of its partition of
  ``NS.S.readers``, send ``ReaderRegistration`` (with the splits of the restored
  Spark offset, FLIP-537), consume from that offset; again after being fenced.
  Registrations are exclusive: a live attempt of another incarnation (another
  query on the same source) is not fenced but refuses them; refused for longer
  than a session timeout (so not just the previous run of this query, not yet
  timed out), the query fails with a ``SourceError`` naming the holder. A query
  whose subtask another process took over fails the same way;
- coordinator records go to their subtask's protocol, which owns each split with
  the ``seq`` of the ``AddSplits`` that gave it (its identity, offsets.py);
- a ``Heartbeat`` per subtask every ``heartbeat_interval_ms`` with the watermark of
  what is durably planned, a ``RequestSplit`` when a subtask has nothing;
- ``acknowledge(offset)``: ``SplitsFinished`` and ``CheckpointAck`` for an offset
  Spark has made durable, awaited until the broker has them;
- cooperative rebalancing: a split a ``ReleaseRequest`` asks for is planned no
  further from the next batch on, so the first offset planned after the request
  holds it where the batches before it stopped reading; the ack of that offset
  (``partitions``, once Spark's offset log has it: the batches that read it are
  Spark's to replay) returns it with that position, and it leaves the views.

No data passes through here: Spark's executors read the ranges the offsets name.
Every method that the Spark thread calls hands its work to the loop, so the
protocols are only ever touched by the loop's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate.api.ranges import SkippedInput, SupportsPositionRanges
from sluicegate.api.reader import LowWatermarkListener
from sluicegate.api.source import Source, SupportsSplitReassignmentOnRecovery
from sluicegate.api.split import WireSplit
from sluicegate.kafka.security import KafkaSecurity
from sluicegate.loop_thread import LoopThread
from sluicegate.protocol.dead_letter import DeadLetter
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.messages import Body, Heartbeat, ReaderLeaving
from sluicegate.protocol.pieces import body_in_pieces
from sluicegate.protocol.timing import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS
from sluicegate.protocol.topics import ControlTopics
from sluicegate.reader.channel import ControlChannel, Inbound
from sluicegate.reader.kafka_channel import KafkaControlChannel, KafkaNeverAnswered, SourceNotSetUp
from sluicegate.reader.protocol import (
    AlignmentBound,
    Fenced,
    NoMoreSplitsApplied,
    Phase,
    ReaderProtocol,
    Refused,
    Registered,
    ReleaseRequested,
    SplitsAdded,
    Superseded,
)
from sluicegate.reader.state import ReaderCheckpoint
from sluicegate.reader.timing import KAFKA_WAIT_S, SPARK_NAMES, TOPIC_WAIT_S, ReaderTiming
from sluicegate.reader.watermark import SplitWatermarks
from sluicegate.spark.acknowledgement import PlannedPositions, acknowledged_splits
from sluicegate.spark.event_times import EventTimeProbe
from sluicegate.spark.metrics import DriverMetrics, DriverSnapshot, SubtaskFigures
from sluicegate.spark.offsets import OwnedSplit, SourceOffset, SubtaskOffset, SubtaskView

log = logging.getLogger("sluicegate.spark")

T = TypeVar("T")

TOPIC_WAIT_TIMEOUT_S = TOPIC_WAIT_S
"""A Spark query does not wait for ever for its source's topics: it fails, naming them
(reader/timing.py says why the default is short)."""
REGISTRATION_NOTICE_INTERVAL_S = 15.0
SELF_SETUP = "let the query set it up and coordinate it (option coordinator=auto, the default)"
CALL_TIMEOUT_S = 60.0
ACK_WAIT_S = 10.0
"""How long a Spark call waits for an acknowledgement to be delivered. The broker may be
down for minutes: the call then says "not yet" and the send goes on in the background."""


@dataclass(frozen=True)
class DriverSettings:
    source: str
    parallelism: int
    bootstrap_servers: str
    namespace: str = "sluicegate"
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    topic_wait_timeout_s: float = TOPIC_WAIT_TIMEOUT_S
    kafka_wait_s: float = KAFKA_WAIT_S
    """At start, how long to retry a control cluster that has not answered yet; then the
    query fails naming kafka.bootstrap.servers (``kafkaWaitS``)."""
    split_idle_timeout_ms: int = 0
    """A split whose planned position did not advance for this long stops holding its
    subtask's watermark back (split idleness, reader/watermark.py); 0: off."""
    location: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}/spark")
    security: KafkaSecurity | None = None
    """The control-plane client settings (None: the process's, from SLUICEGATE_KAFKA_*)."""
    metrics_port: int = 0
    """Serve Prometheus metrics from the driver on this port (spark/metrics.py); 0: off."""
    definition: SourceDefinition | None = None
    """What this query says the source is (connector and options); the coordinator refuses
    the query's registrations if the source was defined otherwise."""

    @property
    def timing(self) -> ReaderTiming:
        """The contact settings and their rules (reader/timing.py), the same model as the
        other host's."""
        return ReaderTiming.of(self)

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise ConfigError("parallelism", f"must be >= 1, got {self.parallelism}")
        if not self.bootstrap_servers.strip():
            raise ConfigError("kafka.bootstrap.servers", "not set: pass the option or set KAFKA_BOOTSTRAP_SERVERS")
        self.timing.check(SPARK_NAMES)


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

    def __init__(self, settings: DriverSettings, source: Source[Any], channel: ControlChannel | None = None) -> None:
        if not isinstance(source, SupportsPositionRanges):
            raise ConfigError(
                "connector", "this connector cannot be read by Spark: it does not support position ranges"
            )
        self.settings = settings
        self.source = source
        self.ranges: SupportsPositionRanges[Any] = source
        self.codec = source.split_codec
        self.topics = ControlTopics.for_source(settings.source, settings.namespace)
        self.protocols: dict[int, ReaderProtocol] = {}
        self._watermarks: dict[int, SplitWatermarks] = {s: self._new_watermarks() for s in range(settings.parallelism)}
        """Per subtask: each owned split's event time up to its durably planned position."""
        self._event_times = EventTimeProbe(
            self.ranges, self.codec, self._watermarks_of, _monotonic_ms, settings.heartbeat_interval_ms / 1000
        )
        """Each acknowledged split's event time, read off the acknowledgement's path."""
        self._planned = PlannedPositions()
        """Each split's last acknowledged position: a split counts as active when it advances."""
        self._acked: dict[int, tuple[int, int]] = {}
        """subtask -> (attempt, checkpoint id) of its last delivered CheckpointAck."""
        self._to_register: set[int] = set()
        self._registering_since: dict[int, float] = {}
        self.channel: ControlChannel = channel or KafkaControlChannel(
            self.topics,
            settings.bootstrap_servers,
            f"{settings.namespace}.{settings.source}.spark-{os.getpid()}",
            settings.topic_wait_timeout_s,
            settings.security,
            never_answered_timeout_s=settings.kafka_wait_s,
        )
        self._bridge = LoopThread("sluicegate-spark-driver")
        """The loop the protocols live on; Spark's threads hand it their work."""
        self._changed = threading.Condition()
        self._generation = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._stats = {"registrations": 0, "fenced": 0, "acks": 0, "splits_finished": 0}
        self._left = False
        self._reported_finished: set[str] = set()
        self._refused_since: dict[int, float] = {}
        """subtask -> when its exclusive registration was first refused (monotonic s)."""
        self._retry_at: dict[int, float] = {}
        self._last_low_watermark: int | None = None
        self._fatal: SourceError | None = None
        """Set on the loop when the query cannot go on; raised to Spark by the next call."""
        self.metrics = DriverMetrics(self, settings.source)
        self.split_lag: dict[str, tuple[int, int]] = {}
        """Split id -> (subtask, records available and not planned), replaced whole by each
        planning (on Spark's thread; a scrape on the loop reads one whole dict or the next)."""
        self.available_ends: dict[str, int] = {}
        """Split id -> its available end at the last planning (Spark's offsets behind latest)."""
        self._rows_acknowledged = 0
        self._ack_turn = asyncio.Lock()

    # -- life cycle (Spark thread) ---------------------------------------------------

    def start(self, restored: SourceOffset | None) -> None:
        """Start the loop thread and register every subtask (``restored``: the Spark
        offset the query resumes from; its splits are reported, FLIP-537)."""
        if self._bridge.started:
            return
        for s in range(self.settings.parallelism):
            self.protocols[s] = ReaderProtocol(
                self.settings.source,
                s,
                location=self.settings.location,
                reassign_on_recovery=isinstance(self.source, SupportsSplitReassignmentOnRecovery),
                restored=self._restored_checkpoint(restored, s),
                definition=self.settings.definition,
            )
        self._bridge.start(self._start, on_failure=self._shutdown)

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
        """Leave, stop heartbeating and close the Kafka clients. Every active subtask sends
        ``ReaderLeaving`` once the acknowledgements under way are delivered, so that the
        coordinator frees the subtasks at once: a restart of the query registers them
        without waiting for a session timeout, and reads from its checkpoint (its offsets
        are the restored splits, FLIP-537). A broker that does not answer within
        ACK_WAIT_S leaves the attempts to the coordinator's timeout."""
        if self._bridge.started and self._fatal is None:
            try:
                self._call_or(self._depart, ACK_WAIT_S, None)
            except Exception as exc:  # stopping: what could not be sent is the timeout's
                log.warning("the subtasks of %s could not leave: %s", self.settings.source, exc)
        self._bridge.stop(self._shutdown)

    async def _depart(self) -> None:
        async with self._ack_turn:
            if not self._left:
                await self._send_leaving([s for s, protocol in sorted(self.protocols.items()) if protocol.active])

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The driver's loop (tests hand it work that must run there)."""
        return self._bridge.loop

    def _call(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout_s: float = CALL_TIMEOUT_S) -> T:
        if self._fatal is not None:  # what stopped the driver, if anything did
            raise self._fatal
        return self._bridge.call(factory, timeout_s)

    def _call_or(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout_s: float, pending: T) -> T:
        """As _call for work that waits on the broker: ``pending`` if it is not done within
        ``timeout_s``. The work is not cancelled (a send cannot be taken back): it finishes
        on the loop, and the next call of the same kind queues behind it."""
        try:
            return self._call(factory, timeout_s)
        except concurrent.futures.TimeoutError:
            return pending

    # -- what the Spark thread asks --------------------------------------------------

    def dead_letter(self, skipped: list[SkippedInput]) -> None:
        """Copy bad input the connector skipped while planning to the dead-letter topic,
        once: a restarted query plans the uncommitted batches again and finds it again."""
        self._call(lambda: self._dead_letter(skipped))

    async def _dead_letter(self, skipped: list[SkippedInput]) -> None:
        for item in skipped:
            letter = DeadLetter(
                item.origin, -1, item.position, item.origin.encode(), item.reason.encode(), item.kind, item.reason
            )
            await self.channel.dead_letter_once(letter)

    def planning_state(self) -> PlanningState:
        """Every subtask's attempt and owned splits, and the splits reported finished."""
        return self._call(self._planning_state)

    def acknowledge(self, offset: SourceOffset) -> bool:
        """Tell the coordinator that ``offset`` is durable (Spark wrote it to its offset
        log): for each subtask whose current attempt planned it, ``SplitsFinished``
        for its finished splits, then ``CheckpointAck``. True once every such subtask
        has its ack delivered (or had it before); False also while the broker does not
        answer (within ACK_WAIT_S): the caller tries again later."""
        return self._call_or(lambda: self._acknowledge_in_turn(offset), ACK_WAIT_S, False)

    def acknowledge_soon(self, offset: SourceOffset) -> None:
        """``acknowledge`` without waiting: queued behind earlier acknowledgements, and a
        later ``acknowledge`` waits for it. One that fails is logged; the next
        ``acknowledge`` sends it again."""
        if self._fatal is not None:
            raise self._fatal
        future = self._bridge.submit(lambda: self._acknowledge_in_turn(offset))
        future.add_done_callback(lambda done: self._on_background_ack(offset, done))

    def _on_background_ack(self, offset: SourceOffset, done: concurrent.futures.Future[bool]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            log.warning("checkpoint %d: acknowledging failed: %s; retried next batch", offset.checkpoint_id, error)
        elif not done.result():
            log.warning("checkpoint %d could not be acknowledged now; retried next batch", offset.checkpoint_id)

    def status(self) -> DriverStatus:
        return self._call(self._status)

    def all_finished(self) -> bool:
        """Bounded end: every subtask registered, told NoMoreSplits, and owning nothing
        (its finished splits reported)."""
        return self._call(self._all_finished)

    def all_active(self) -> bool:
        return self._call(self._all_active)

    def leave(self) -> None:
        """ReaderLeaving with no splits from every subtask (only once all are finished);
        a broker that does not answer leaves it to the coordinator's timeout."""
        self._call_or(self._leave, ACK_WAIT_S, None)

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
        try:
            partitions = await self.channel.open(range(s.parallelism))
        except KafkaNeverAnswered as exc:
            raise ConfigError(
                "kafka.bootstrap.servers",
                f"{exc}. It names sluicegate's control cluster (default: KAFKA_BOOTSTRAP_SERVERS); "
                "kafkaWaitS waits longer for a broker that is still starting",
            ) from None
        except SourceNotSetUp as exc:
            advice = exc.advice(s.source, s.namespace, SPARK_NAMES.topic_wait_timeout_s, SELF_SETUP)
            raise ConfigError("source", advice) from None
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
        self._to_register = set(range(s.parallelism))
        if s.metrics_port:
            await self.metrics.serve(s.metrics_port)
        self._tasks = [
            asyncio.create_task(self._control_loop(), name="sluicegate-spark-control"),
            asyncio.create_task(self._heartbeat_loop(), name="sluicegate-spark-heartbeat"),
        ]

    async def _shutdown(self) -> None:
        await self._event_times.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for protocol in self.protocols.values():
            if protocol.phase is not Phase.CLOSED:
                protocol.close()
        with contextlib.suppress(Exception):
            await self.channel.close()
        await self.metrics.close()

    async def _control_loop(self) -> None:
        while True:
            try:
                if self._to_register:
                    await self._register_pending()
                inbound = await self.channel.poll(timeout_ms=100)
            except Exception:  # never let the control loop die: registrations would stop
                log.exception("the control loop of %s failed; retrying", self.settings.source)
                await asyncio.sleep(1.0)
                continue
            fenced: set[int] = set()
            for record in inbound:
                if record.subtask in fenced:
                    continue  # the rest is addressed to the failed attempt
                if not await self._on_inbound(record):
                    fenced.add(record.subtask)
            self._registration_notices()

    async def _register_pending(self) -> None:
        now = time.monotonic()
        for s in sorted(self._to_register):
            protocol = self.protocols[s]
            if protocol.phase is Phase.ACTIVE:
                self._to_register.discard(s)
                continue
            if self._retry_at.get(s, 0.0) > now:
                continue
            await self.channel.capture([s])
            registration = protocol.begin_registration(exclusive=True)
            if not await self._send_all(s, body_in_pieces(registration)):
                await asyncio.sleep(1.0)
                return  # retried on the next round of the control loop, from the first piece
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
            if self.protocols[s].phase is not Phase.REGISTERING:
                del self._registering_since[s]
            elif now - since >= REGISTRATION_NOTICE_INTERVAL_S:
                self._registering_since[s] = now
                log.info("subtask %d still waits for the coordinator of %s to accept it", s, self.settings.source)

    async def _on_inbound(self, record: Inbound) -> bool:
        subtask = record.subtask
        protocol = self.protocols[subtask]
        try:
            outcome = protocol.on_message(record.env)
        except Exception as exc:
            log.exception("could not apply %s at offset %d", record.env.type, record.raw.offset)
            await self.channel.reject(record.raw, "rejected", f"{type(exc).__name__}: {exc}")
            return True
        if isinstance(outcome, Registered):
            self._refused_since.pop(subtask, None)
            self._on_registered(subtask, outcome)
            await self._ask_for_work(subtask)
        elif isinstance(outcome, Refused):
            self._on_refused(subtask, outcome)
        elif isinstance(outcome, Superseded):
            self._fail(outcome.describe(self.settings.source, subtask))
            return False
        elif isinstance(outcome, Fenced):
            self._on_fenced(subtask)
            return False  # the rest is addressed to the failed attempt
        elif isinstance(outcome, SplitsAdded):
            self._watermarks[subtask].add((s["split_id"] for s in outcome.splits), _monotonic_ms())
            self._notify()
        elif isinstance(outcome, AlignmentBound):
            self._notify_low_watermark(outcome.low_watermark)
        elif isinstance(outcome, NoMoreSplitsApplied | ReleaseRequested):
            self._notify()  # a batch plans them no further: the next offset may return them
        return True

    def _notify_low_watermark(self, low_watermark: int | None) -> None:
        """FLINK-4576's listener on the Spark host: no connector reader lives on the driver,
        so the source itself hears the announced low watermark each time it advances (every
        subtask of the query gets the same announcements, partition by partition)."""
        last = self._last_low_watermark
        if low_watermark is None or (last is not None and low_watermark <= last):
            return
        self._last_low_watermark = low_watermark
        if isinstance(self.source, LowWatermarkListener):
            self.source.notify_low_watermark(low_watermark)

    def _on_registered(self, subtask: int, outcome: Registered) -> None:
        self._stats["registrations"] += 1
        self._registering_since.pop(subtask, None)
        self.channel.contact()
        # Restored splits the protocol kept (sources without reassignment on recovery) are
        # read under a new identity (seq 0) from their restored positions.
        self._watermarks[subtask] = self._new_watermarks()
        self._watermarks[subtask].add((s["split_id"] for s in outcome.kept), _monotonic_ms())
        log.info("subtask %d registered as attempt %s", subtask, outcome.attempt)
        self._notify()

    async def _ask_for_work(self, subtask: int) -> None:
        """A subtask that registered owning nothing asks for splits now, as Flink's reader
        does at its start, not at the next heartbeat: a pull assigner (files) gives only
        to a requester, and the first batch (a ``Trigger.Once`` run's only one) is planned
        once the assignment has gone quiet for QUIET_S (planner._settle), which a heartbeat
        a second later misses."""
        protocol = self.protocols[subtask]
        request = protocol.maybe_request_split(_now_ms(), nothing_to_read=not protocol.owned)
        if request is not None:  # on its way, not awaited: the inbound loop goes on meanwhile
            await self.channel.send(protocol.envelope(request, _now_ms()), wait=False)

    def _on_refused(self, subtask: int, outcome: Refused) -> None:
        """Retry each second while the holder may be this query's own previous run (not yet
        timed out); past a session timeout, it is another live query or reader, unless the
        holder is this very process (an attempt of its own that a coordinator restored and
        keeps until it times out: after a coordinator failover that can take longer than one
        session timeout from the first refusal). Another definition of the source is final:
        the query stops now, naming the options."""
        if outcome.final:
            self._fail(outcome.reason)
            return
        now = time.monotonic()
        since = self._refused_since.setdefault(subtask, now)
        if now - since > self.settings.timing.refusal_patience_s and outcome.holder_location != self.settings.location:
            self._fail(
                f"subtask {subtask} of source {self.settings.source} is held by another live reader "
                f"(incarnation {outcome.holder_incarnation} at {outcome.holder_location or '?'}) for "
                f"{now - since:.0f} s: another query or reader runs this source; this query stops"
            )
            return
        self._retry_at[subtask] = now + 1.0
        self._to_register.add(subtask)

    def _fail(self, message: str) -> None:
        if self._fatal is None:
            log.error("%s", message)
            self._fatal = SourceError(message)
        self._notify()

    def _on_fenced(self, subtask: int) -> None:
        protocol = self.protocols[subtask]
        self._stats["fenced"] += 1
        self._watermarks[subtask].clear()
        self._acked.pop(subtask, None)
        self._to_register.add(subtask)
        last = protocol.last_checkpoint
        log.warning(
            "subtask %d fenced (%s): registering again with checkpoint %s (%d splits)",
            subtask,
            protocol.fenced_reason,
            last.checkpoint_id if last else None,
            len(last.splits) if last else 0,
        )
        self._notify()

    async def _heartbeat_loop(self) -> None:
        interval = self.settings.heartbeat_interval_ms / 1000
        delivery_timeout = self.settings.timing.delivery_timeout_s
        while True:
            await asyncio.sleep(interval)
            if self._left:
                return
            now_ms = _now_ms()
            clock_ms = _monotonic_ms()
            sends: list[Awaitable[Any]] = []
            for s, protocol in self.protocols.items():
                if not protocol.active:
                    continue
                wm = self._watermarks[s]
                # the planner holds splits past the bound back: quiet because ahead is not idle
                wm.align(protocol.max_allowed_watermark, clock_ms)
                idle = not protocol.owned or wm.all_idle(clock_ms)
                bodies: list[Body] = [Heartbeat(watermark=wm.current(clock_ms), idle=idle)]
                request = protocol.maybe_request_split(now_ms, nothing_to_read=not protocol.owned)
                if request is not None:
                    bodies.append(request)
                for body in bodies:
                    sends.append(self._send(s, body))
            if sends:
                # Bounded, as the standalone host's: while the broker is down a send waits
                # for ever, and the contact check below must still run to fence in time.
                try:
                    async with asyncio.timeout(delivery_timeout):
                        await asyncio.gather(*sends)
                except TimeoutError:
                    log.warning("heartbeats were not delivered within %.1f s", delivery_timeout)
            self._check_contact()

    def _check_contact(self) -> None:
        silent = self.channel.silent_for_s()
        if not self.settings.timing.lost_contact(silent):
            return
        reason = f"nothing could be sent to the coordinator for {silent:.1f} s"
        for s, protocol in self.protocols.items():
            if protocol.self_fence(reason) is not None:
                self._on_fenced(s)
        self.channel.contact()

    async def _send(self, subtask: int, body: Body) -> bool:
        return await self.channel.send(self.protocols[subtask].envelope(body, _now_ms()))

    async def _send_all(self, subtask: int, pieces: list[Body]) -> bool:
        """A record's pieces, in order; False at the first that fails (the coordinator
        starts over when the record is sent again from piece 0)."""
        for piece in pieces:
            if not await self._send(subtask, piece):
                return False
        return True

    async def _planning_state(self) -> PlanningState:
        return PlanningState(self._views(), frozenset(self._reported_finished))

    def _views(self) -> dict[int, SubtaskView]:
        out: dict[int, SubtaskView] = {}
        for s, protocol in self.protocols.items():
            if not protocol.active:
                out[s] = SubtaskView(None, protocol.highest_epoch, protocol.applied_seq, False, ())
                continue
            splits = []
            for split_id, owned in protocol.owned.items():
                split = self.codec.from_wire(owned.wire)
                splits.append(
                    OwnedSplit(
                        split_id=split_id,
                        split=owned.wire,
                        seq=owned.seq,
                        assigned_pos=self.ranges.split_position(split),
                        end=self.ranges.split_end(split),
                        releasing=split_id in protocol.releasing,
                    )
                )
            out[s] = SubtaskView(
                protocol.attempt,
                protocol.highest_epoch,
                protocol.applied_seq,
                protocol.no_more_splits,
                tuple(splits),
                protocol.max_allowed_watermark,
            )
        return out

    async def _acknowledge_in_turn(self, offset: SourceOffset) -> bool:
        """One acknowledgement at a time: a later one waits for a call that gave up waiting."""
        async with self._ack_turn:
            return await self._acknowledge(offset)

    async def _acknowledge(self, offset: SourceOffset) -> bool:
        started_s = time.monotonic()
        ok = await self._acknowledge_subtasks(offset)
        if ok:
            self._rows_acknowledged = max(self._rows_acknowledged, offset.rows)
            self.metrics.ack_seconds.labels(self.settings.source).observe(time.monotonic() - started_s)
        return ok

    def metrics_snapshot(self) -> DriverSnapshot:
        """The driver's figures for a scrape (on the loop: protocols are the loop's)."""
        clock_ms = _monotonic_ms()
        return DriverSnapshot(
            source=self.settings.source,
            subtasks={
                s: SubtaskFigures(p.active, len(p.owned), self._watermarks[s].current(clock_ms))
                for s, p in self.protocols.items()
            },
            records_acknowledged=self._rows_acknowledged,
            low_watermark_ms=self._last_low_watermark,
            registrations=self._stats["registrations"],
            fenced=self._stats["fenced"],
            acks=self._stats["acks"],
            splits_finished=self._stats["splits_finished"],
            dead_letters=self.channel.dead_letters,
            split_lag=self.split_lag,
        )

    async def _acknowledge_subtasks(self, offset: SourceOffset) -> bool:
        """Each subtask's messages in order; the subtasks at once (each has its own
        partition of the inbox, so one's round trips need not wait for another's)."""
        done = await asyncio.gather(
            *(self._acknowledge_subtask(s, sub, offset) for s, sub in sorted(offset.subtasks.items()))
        )
        return all(done)

    async def _acknowledge_subtask(self, s: int, sub: SubtaskOffset, offset: SourceOffset) -> bool:
        protocol = self.protocols.get(s)
        if protocol is None or not protocol.active or sub.attempt is None or sub.attempt != protocol.attempt:
            return True
        if self._acked.get(s, (0, -1)) >= (sub.attempt, offset.checkpoint_id):
            return True
        splits = acknowledged_splits(sub, protocol.owned)
        finished, unfinished = splits.finished, splits.unfinished
        plan = protocol.plan_checkpoint(
            [self._wire_at(e.split, e.pos) for _, e in sorted(unfinished.items())],
            checkpoint_id=offset.checkpoint_id,
            applied_seq=sub.applied_seq,
            no_more_splits=sub.no_more_splits,
            finished=finished,
        )
        delivered = await self._send_all(s, plan.messages())
        if not delivered:
            log.warning("could not acknowledge checkpoint %d of subtask %d now", offset.checkpoint_id, s)
            return False
        if protocol.attempt != sub.attempt:  # fenced while sending
            return True
        self._acked[s] = (sub.attempt, offset.checkpoint_id)
        self._stats["acks"] += 1
        self._stats["splits_finished"] += len(finished)
        protocol.checkpoint_committed(plan)
        self._reported_finished.update(finished)
        watermarks = self._watermarks[s]
        watermarks.remove(finished)
        watermarks.remove(plan.returned_split_ids)
        # only a split whose planned position advanced is active (split idleness); its
        # event time there comes later (event_times.py)
        clock_ms = _monotonic_ms()
        for sid, e in unfinished.items():
            watermarks.advance(sid, None, clock_ms, active=self._planned.moved(sid, e.pos))
            self._event_times.want(s, sid, e.split, e.pos)
        self._planned.forget([*finished, *plan.returned_split_ids])
        if finished or plan.returned:
            log.info(
                "subtask %d: checkpoint %d, %d splits finished, %d given back, %d open",
                s,
                offset.checkpoint_id,
                len(finished),
                len(plan.returned),
                len(unfinished) - len(plan.returned),
            )
            self._notify()
        return True

    def _new_watermarks(self) -> SplitWatermarks:
        return SplitWatermarks(self.settings.split_idle_timeout_ms)

    def _wire_at(self, wire: WireSplit, position: int) -> WireSplit:
        return self.codec.to_wire(self.ranges.with_position(self.codec.from_wire(wire), position))

    def _watermarks_of(self, subtask: int) -> SplitWatermarks:
        return self._watermarks[subtask]

    async def _status(self) -> DriverStatus:
        return DriverStatus(
            phases={s: x.phase.value for s, x in self.protocols.items()},
            attempts={s: x.attempt for s, x in self.protocols.items()},
            owned={s: len(x.owned) for s, x in self.protocols.items()},
            no_more_splits={s: x.no_more_splits for s, x in self.protocols.items()},
            registrations=self._stats["registrations"],
            fenced=self._stats["fenced"],
            acks=self._stats["acks"],
            splits_finished=self._stats["splits_finished"],
            dead_letters=self.channel.dead_letters,
        )

    async def _all_finished(self) -> bool:
        return all(x.is_finished for x in self.protocols.values())

    async def _all_active(self) -> bool:
        return all(x.active for x in self.protocols.values())

    async def _leave(self) -> None:
        if self._left or not await self._all_finished():
            return
        await self._send_leaving(sorted(self.protocols))
        log.info("all %d subtasks finished and left %s", len(self.protocols), self.settings.source)

    async def _send_leaving(self, subtasks: list[int]) -> None:
        """``ReaderLeaving`` from each of ``subtasks``; the heartbeats stop."""
        self._left = True
        for s in subtasks:
            if not await self._send(s, ReaderLeaving(splits=[])):
                log.warning("subtask %d could not leave (the coordinator will time it out)", s)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _monotonic_ms() -> int:
    """Split idleness only: a clock that does not jump."""
    return int(time.monotonic() * 1000)


def offsets_rows(offset: Mapping[str, Any] | None) -> int:
    """Records planned up to a (JSON) offset of this source; 0 if it is not one."""
    if not isinstance(offset, Mapping):
        return 0
    rows = offset.get("rows")
    return rows if isinstance(rows, int) else 0
