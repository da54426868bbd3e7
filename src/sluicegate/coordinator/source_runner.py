"""The active coordinator of one source: the exactly-once loop around the core.

    fence  -> a transactional producer with the source's transactional id; Kafka
              fences the previous incarnation's producer and aborts its open
              transaction (PROTOCOL semantics 4)
    restore-> the last committed state parts, read_committed; epoch = stored + 1
    loop   -> read inbox records (read_committed) from the stored inbox offset,
              feed the core, and commit in ONE transaction: the outgoing records,
              dead letters, the changed state parts and the new inbox offset

Nothing leaves this process outside a transaction, so a coordinator killed at any
instant leaves either all of a step's effects visible or none, and its successor
resumes from exactly there. Readers are never reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import gc
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from sluicegate.connectors import load_source
from sluicegate.coordinator.core import AsyncCall, CoordinatorCore, Effects, StepFailedError
from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.state_store import (
    READ_RECORD_MAX_BYTES,
    StateTooLargeError,
    StateWriter,
    read_state,
)
from sluicegate.coordinator.tick_gate import TickGate
from sluicegate.kafka.clients import security_settings
from sluicegate.kafka.startup_noise import quiet_fencing_leftovers
from sluicegate.protocol.codec import DecodeError, decode, encode, encode_key
from sluicegate.protocol.dead_letter import DeadLetter
from sluicegate.protocol.definition import DefinitionMismatchError, SourceDefinition
from sluicegate.protocol.messages import Direction
from sluicegate.protocol.names import coordinator_transactional_id
from sluicegate.protocol.topics import ControlTopics

log = logging.getLogger("sluicegate.coordinator")

INBOX_BATCH = 500
COMMIT_BYTES = 8 * 1024 * 1024
"""Commit within a batch of inbox records once this much is waiting to go out: 64
registrations that hand out 1,000,000 splits were one transaction of 160 MB, and
the loop did not yield long enough for the Faust group to drop this worker."""


def now_ms() -> int:
    return int(time.time() * 1000)


def commit_due(
    changed: bool, offset_moved: bool, since_ms: float, commit_interval_ms: int, liveness_interval_ms: int | None
) -> bool:
    """Whether to commit now, ``since_ms`` after the last commit: at once for records to
    send or changed state, within commit_interval_ms for offset-only progress, and within
    liveness_interval_ms for nothing at all (the heartbeat commit standbys watch for)."""
    if changed or (offset_moved and since_ms >= commit_interval_ms):
        return True
    return liveness_interval_ms is not None and since_ms >= liveness_interval_ms


def check_definition(source: str, parts: Mapping[str, Any] | None, given: SourceDefinition, who: str) -> None:
    """Raise DefinitionMismatchError if the committed state defines ``source`` otherwise."""
    stored = parts.get("definition") if parts else None
    if stored is None:
        return  # a new source (or one from before definitions): this one defines it
    committed = SourceDefinition.from_json(stored)
    if committed.fingerprint != given.fingerprint:
        raise DefinitionMismatchError(source, who, committed, given)


def _retrieve(futures: list[asyncio.Future[Any]]) -> None:
    """Mark the exceptions of failed sends as seen (asyncio logs the others at ERROR)."""
    for future in futures:
        if future.done() and not future.cancelled():
            future.exception()


class CommitFailedError(RuntimeError):
    """A transaction of the coordinator failed; its message says why."""


class RunnerState(enum.Enum):
    STARTING = "starting"
    ACTIVE = "active"
    FENCED = "fenced"  # a newer incarnation took over; this one stepped down
    STOPPED = "stopped"
    FAILED = "failed"
    REFUSED = "refused"  # brought another definition than the source's: never restarted


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


@dataclass
class RunnerStats:
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    commits: int = 0
    last_commit_ms: float = 0.0
    """Duration of the last transaction, ms."""
    inbox_lag: int = 0
    started_at: float = field(default_factory=time.monotonic)


class SourceRunner:
    def __init__(
        self,
        settings: SourceSettings,
        bootstrap: str,
        namespace: str,
        tick_interval_ms: int = 200,
        commit_interval_ms: int = 1_000,
        on_stop: Callable[[SourceRunner], None] | None = None,
        liveness_interval_ms: int | None = None,
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.topics = ControlTopics.for_source(settings.source, namespace)
        self.transactional_id = coordinator_transactional_id(namespace, settings.source)
        self.tick_interval_ms = tick_interval_ms
        self.commit_interval_ms = commit_interval_ms
        self.liveness_interval_ms = liveness_interval_ms
        """Commit at least this often, with nothing to commit too (a heartbeat commit of
        ``meta``): standbys take a source whose state topic stands still for
        takeover_silence_ms for dead (silence.py). None: no heartbeat commits."""
        self.state = RunnerState.STARTING
        self.stats = RunnerStats()
        self.core: CoordinatorCore[Any] | None = None
        self._on_stop = on_stop
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._inbox = TopicPartition(self.topics.coordinator, 0)
        self._pending: list[OutgoingRecord] = []
        self._pending_bytes = 0
        self._async_results: asyncio.Queue[tuple[int, Any, BaseException | None]] = asyncio.Queue()
        self._async_tasks: dict[int, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._committed_offset: int | None = None
        self._state_writer = StateWriter(settings.source, {})
        self.failure: str | None = None
        """Why the runner failed (state FAILED), in one sentence for the operator."""
        self.active_since: float | None = None
        """time.monotonic() when it started serving."""
        self._last_commit = 0.0
        self._next_tick = 0.0
        self._tick_gate = TickGate()

    @property
    def source(self) -> str:
        return self.settings.source

    @property
    def committed_offset(self) -> int | None:
        """The last inbox offset whose effects are committed."""
        return self._committed_offset

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        quiet_fencing_leftovers()  # a fenced runner steps down and says so; aiokafka's leftovers need not
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"coordinator {self.source}")

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.state in (RunnerState.STARTING, RunnerState.ACTIVE):
            self.state = RunnerState.STOPPED

    async def _run(self) -> None:
        try:
            await self._start_up()
            await self._loop()
        except ProducerFenced:
            self.state = RunnerState.FENCED
            log.warning(
                "source %s: a newer coordinator took over (this producer is fenced); stepping down", self.source
            )
        except asyncio.CancelledError:
            raise
        except DefinitionMismatchError as exc:
            self.state = RunnerState.REFUSED
            self.failure = exc.problem
        except CommitFailedError as exc:
            self.state = RunnerState.FAILED
            self.failure = str(exc)  # the host logs it once, with its restart delay
        except StepFailedError as exc:
            # Nothing since the last commit is kept (the open records are dropped with this
            # runner); the host restarts the source from that commit, as after a crash.
            self.state = RunnerState.FAILED
            self.failure = f"{exc.detail}; nothing of that step was committed"
            log.debug("source %s: the failed step", self.source, exc_info=exc.__cause__)
        except Exception as exc:
            self.state = RunnerState.FAILED
            self.failure = f"the coordinator loop failed: {exc!r}"
            log.exception("source %s: the coordinator loop failed", self.source)
        finally:
            await self._close()
            if self._on_stop is not None:
                self._on_stop(self)

    async def _start_up(self) -> None:
        source = load_source(self.settings.connector, self.settings.options)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            transactional_id=self.transactional_id,
            enable_idempotence=True,
            # The client does not refuse large records itself: the broker's limits decide
            # (state records are at most STATE_RECORD_MAX_BYTES; AddSplits max_message_bytes).
            max_request_size=READ_RECORD_MAX_BYTES,
            # No compression: aiokafka's gzip runs at level 9, ~60 ms per 500 KB AddSplits,
            # which was most of the registration-to-assignment latency.
            compression_type=None,
            linger_ms=0,
            **security_settings(),
        )
        await self._producer.start()  # init_transactions: fences the previous incarnation
        stored = await read_state(self.bootstrap, self.topics.coordinator_state, self.source)
        parts = stored.parts if stored is not None else None
        # Before anything is committed: a coordinator of another definition (a standby
        # started with other options) must not serve this source's state, even once.
        check_definition(self.source, parts, self.settings.definition(), "this coordinator")
        self._state_writer = StateWriter.restored(self.source, stored)
        epoch = parts["meta"]["epoch"] + 1 if parts else 1
        core: CoordinatorCore[Any] = CoordinatorCore(source, self.settings.core_config(), epoch, snapshot=parts)
        self.core = core
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=50,
            **security_settings(),
        )
        await self._consumer.start()
        self._consumer.assign([self._inbox])
        if core.inbox_offset is None:
            await self._consumer.seek_to_beginning(self._inbox)
        else:
            self._consumer.seek(self._inbox, core.inbox_offset + 1)
        self._committed_offset = core.inbox_offset
        self._queue(core.start(now_ms()))
        await self._commit(force=True)  # the new epoch is durable before anything else happens
        gc.freeze()  # the restored state is long-lived: keep the collector from rescanning it
        self.state = RunnerState.ACTIVE
        self.active_since = time.monotonic()
        log.info(
            "coordinator for source %s (connector %s, %d subtasks, epoch %d) is serving %s from %s",
            self.source,
            self.settings.connector,
            self.settings.max_parallelism,
            epoch,
            self.topics.coordinator,
            "its beginning" if core.inbox_offset is None else f"offset {core.inbox_offset + 1}",
        )

    async def _close(self) -> None:
        if self.core is not None:
            self.core.close()  # periodic calls stop with the enumerator
        for task in list(self._async_tasks.values()):
            task.cancel()
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()

    # -- the loop -------------------------------------------------------------

    async def _loop(self) -> None:
        assert self._consumer is not None and self.core is not None
        core = self.core
        while True:
            batch = await self._consumer.getmany(self._inbox, timeout_ms=self.tick_interval_ms, max_records=INBOX_BATCH)
            for record in batch.get(self._inbox, []):
                self._on_record(record.partition, record.offset, record.key, record.value)
                if self._pending_bytes >= COMMIT_BYTES:
                    await self._commit()
            while not self._async_results.empty():
                call_id, result, error = self._async_results.get_nowait()
                self._queue(core.on_async_result(call_id, result, error, now_ms()))
            if time.monotonic() >= self._next_tick:
                self._next_tick = time.monotonic() + self.tick_interval_ms / 1000
                if await self._may_tick():
                    self._queue(core.tick(now_ms()))
            await self._commit()

    async def _may_tick(self) -> bool:
        """Whether to let time pass in the core now (tick_gate.py says when not)."""
        assert self._consumer is not None
        consumer = self._consumer
        position = await consumer.position(self._inbox)
        stable, high = consumer.last_stable_offset(self._inbox), consumer.highwater(self._inbox)
        return self._tick_gate.may_tick(position, stable, high, time.monotonic())

    def _on_record(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        assert self.core is not None
        self.stats.records_in += 1
        topic = self.topics.coordinator
        try:
            env = decode(value, Direction.TO_COORDINATOR)
        except DecodeError as exc:
            self.core.inbox_offset = offset
            self._dead_letter(DeadLetter(topic, partition, offset, key, value, exc.kind.value, exc.detail))
            return
        try:
            effects = self.core.on_message(env, offset, now_ms())
        except StepFailedError:
            raise  # the record is good; the step is retried from the last commit
        except Exception as exc:  # a bug must cost one record, not the coordinator
            log.exception("internal error on %s[%d]@%d", topic, partition, offset)
            self.core.metrics.counter("internal_errors")
            self.core.inbox_offset = offset
            self._dead_letter(DeadLetter(topic, partition, offset, key, value, "internal-error", repr(exc)))
            return
        if effects.rejection is not None:
            self._dead_letter(DeadLetter(topic, partition, offset, key, value, "rejected", effects.rejection))
        self._queue(effects)

    def _dead_letter(self, letter: DeadLetter) -> None:
        letter.log()
        self.stats.dead_letters += 1
        assert self.core is not None
        self.core.metrics.counter("dead_letters")
        self._pending.append(OutgoingRecord(self.topics.dead_letter, 0, letter.key, letter.value, letter.headers()))

    def _queue(self, effects: Effects) -> None:
        for env in effects.messages:
            value = encode(env)
            self._pending_bytes += len(value)
            self._pending.append(OutgoingRecord(self.topics.readers, env.subtask, encode_key(env.subtask), value))
        for call in effects.async_calls:
            task = asyncio.get_running_loop().create_task(self._run_async_call(call))
            self._async_tasks[call.call_id] = task
            task.add_done_callback(functools.partial(self._forget_async_task, call.call_id))
        for call_id in effects.cancelled_calls:
            cancelled = self._async_tasks.pop(call_id, None)
            if cancelled is not None:
                cancelled.cancel()

    def _forget_async_task(self, call_id: int, task: asyncio.Task[None]) -> None:
        if self._async_tasks.get(call_id) is task:
            del self._async_tasks[call_id]

    async def _commit(self, force: bool = False) -> None:
        """One transaction: pending records + changed state parts + inbox offset (in meta).
        Offset-only progress (heartbeats) waits up to commit_interval_ms; with nothing
        to commit, ``meta`` alone is committed every liveness_interval_ms."""
        assert self._producer is not None and self.core is not None
        core = self.core
        offset_moved = core.inbox_offset != self._committed_offset
        since_ms = (time.monotonic() - self._last_commit) * 1000
        changed = bool(self._pending) or core.has_state_changes
        if not (
            force or commit_due(changed, offset_moved, since_ms, self.commit_interval_ms, self.liveness_interval_ms)
        ):
            return
        records, self._pending = self._pending, []
        self._pending_bytes = 0
        try:
            parts = self._state_writer.encode(core.state_parts(only_changed=True))
        except StateTooLargeError as exc:
            raise CommitFailedError(f"cannot commit: {exc}") from exc
        started = time.perf_counter()
        await self._know_partitions(records)
        futures: list[asyncio.Future[Any]] = []
        try:
            async with self._producer.transaction():
                for r in records:
                    futures.append(
                        await self._producer.send(r.topic, r.value, key=r.key, partition=r.partition, headers=r.headers)
                    )
                for key, value in parts:
                    state = self.topics.coordinator_state
                    futures.append(await self._producer.send(state, value, key=key, partition=0))
            await asyncio.gather(*futures)
        except KafkaError as exc:
            _retrieve(futures)  # the transaction's failure says it all: no "exception never retrieved" later
            if isinstance(exc, ProducerFenced):
                raise
            # The transaction was aborted; nothing of it is visible. Failing the runner makes
            # the host restart it from the last commit, which is exactly where readers are.
            size = sum(len(r.value or b"") for r in records) + sum(len(v or b"") for _, v in parts)
            raise CommitFailedError(
                f"the commit of {len(records)} records and {len(parts)} state records ({size:,} bytes) failed: {exc!r}"
            ) from exc
        self._committed_offset = core.inbox_offset
        self._last_commit = time.monotonic()
        self.stats.commits += 1
        self.stats.records_out += len(records)
        self.stats.last_commit_ms = (time.perf_counter() - started) * 1000

    async def _know_partitions(self, records: list[OutgoingRecord]) -> None:
        """After ``sluicegate topics scale`` the producer's metadata lags the new partitions of
        the readers topic (aiokafka refuses a partition it does not know): refresh it. A topic
        the producer never sent to is left to ``send``, which fetches its metadata."""
        assert self._producer is not None
        cluster = self._producer.client.cluster

        def unknown() -> set[int]:
            return {
                r.partition
                for r in records
                if (known := cluster.partitions_for_topic(r.topic)) is not None and r.partition not in known
            }

        missing = unknown()
        for _ in range(50):
            if not missing:
                return
            await self._producer.client.force_metadata_update()
            missing = unknown()
            if missing:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.topics.readers} has no partitions {sorted(missing)[:5]}; did the topics shrink?")

    async def _run_async_call(self, call: AsyncCall) -> None:
        """call_async: the callable runs in a worker thread, its handler on the loop."""
        delay_ms = call.initial_delay_ms
        while True:
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
            result: Any = None
            error: BaseException | None = None
            try:
                result = await asyncio.get_running_loop().run_in_executor(None, call.fn)
            except Exception as exc:  # handed to the enumerator's handler, as in Flink
                error = exc
            await self._async_results.put((call.call_id, result, error))
            if call.period_ms <= 0:
                return
            delay_ms = call.period_ms

    # -- for humans -----------------------------------------------------------

    def describe(self) -> str:
        core = self.core
        if core is None:
            return f"source {self.source}: {self.state.value}"
        counters = core.metrics.counters
        return (
            f"source {self.source} epoch {core.epoch}: {len(core.live_subtasks())}/{core.config.max_parallelism} "
            f"readers live, {core.tracker.total_owned()} splits owned, {counters['splits_assigned']} assigned in all, "
            f"{self.stats.records_in} control messages in, {self.stats.records_out} out, {self.stats.commits} commits, "
            f"{counters['fenced_messages']} fenced, {self.stats.dead_letters} dead-lettered"
            + (", finished" if core.is_finished() else "")
        )
