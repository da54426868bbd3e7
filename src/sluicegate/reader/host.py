"""The standalone reader host: one subtask of one source, over Kafka (aiokafka).

It drives a ``ReaderSession`` (the protocol and the connector reader, free of
I/O) over a ``ControlChannel`` (reader/channel.py: topics, registration at the
captured end offset, intake, sends with contact tracking) and does the rest of
the I/O itself: the transactional checkpoints.

0. with ``--subtask auto``, gets a subtask from the coordinator (reader/slot_claim.py);
1. waits for the control topics (readers never create them);
2. starts its transactional producer (``transactional_id`` = ``NS.S.reader-K``),
   which fences a zombie process of the same subtask and aborts its open
   transaction;
3. restores the subtask's last checkpoint from ``NS.S.reader-state``
   (read_committed);
4. registers: captures the read_committed end offset of partition K of
   ``NS.S.readers``, sends ``ReaderRegistration``, consumes from that offset and
   waits for ``ReaderRegistered`` with its incarnation;
5. reads: connector batches to the output; coordinator messages to the session;
   a checkpoint every ``checkpoint_interval_ms`` as ONE transaction holding
   ``SplitsFinished``, the state record and ``CheckpointAck`` (and, for a Kafka
   output, the data); heartbeats from a second, plain producer;
6. ends: bounded sources after NoMoreSplits and every split finished (final
   checkpoint, ``ReaderLeaving([])``); on SIGTERM/SIGINT a final checkpoint and
   then, in one transaction, an empty state record and ``ReaderLeaving`` with
   the positions; with exit code 3 when another live process registered for the
   subtask after this one (a duplicate stops, it does not fight: docs/protocol.md
   "Slots and duplicates").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalOperation, KafkaError

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate.api.options import checked_int, checked_port
from sluicegate.api.source import Source
from sluicegate.connectors import load_source
from sluicegate.kafka.clients import control_consumer, transactional_producer
from sluicegate.kafka.compacted import read_latest
from sluicegate.kafka.topics import TopicsMissingError, wait_for_topics
from sluicegate.protocol.codec import encode, encode_key
from sluicegate.protocol.dead_letter import DeadLetter
from sluicegate.protocol.definition import DefinitionRefusedError, SourceDefinition
from sluicegate.protocol.event_time import event_time_text
from sluicegate.protocol.messages import Body, ReaderLeaving, ReaderRegistered
from sluicegate.protocol.names import reader_transactional_id, validate_namespace, validate_source
from sluicegate.protocol.pieces import body_in_pieces
from sluicegate.protocol.timing import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS
from sluicegate.protocol.topics import ControlTopics
from sluicegate.reader.channel import ControlChannel, Inbound
from sluicegate.reader.checkpoint_txn import CheckpointTxn, ReaderTakenOver, TxnRecord, TxnState
from sluicegate.reader.kafka_channel import FOREVER_S, KafkaControlChannel, KafkaNeverAnswered, SourceNotSetUp
from sluicegate.reader.kafka_split_state import KafkaSplitStateLog
from sluicegate.reader.metrics import ReaderMetrics, ReaderSnapshot
from sluicegate.reader.output import OUTPUT_SETTING, Output, OutputSpec, open_output
from sluicegate.reader.processing import (
    DEAD_LETTER_KIND,
    RETRIES_SETTING,
    BatchState,
    ErrorHandling,
    ErrorPolicy,
    Failure,
    check_output_takes_a_function,
    load_function,
    processor_for,
)
from sluicegate.reader.protocol import Fenced, Refused, Registered, Superseded
from sluicegate.reader.session import CheckpointPlan, Phase, ReaderSession
from sluicegate.reader.slot_claim import NoFreeSlot, claim_slot
from sluicegate.reader.split_state import SplitStates, StateWrite
from sluicegate.reader.state import ReaderCheckpoint, StateRecordError, StateRecords, piece_key, state_key
from sluicegate.reader.timing import CLI_NAMES, KAFKA_WAIT_S, TOPIC_WAIT_S, ReaderTiming
from sluicegate.reader.user_code import load_callable

log = logging.getLogger("sluicegate.reader")
SELF_SETUP = "let this reader set it up and coordinate it (--coordinator=auto, --max-parallelism=N)"

PROGRESS_INTERVAL_S = 5.0
REGISTRATION_NOTICE_INTERVAL_S = 10.0
IDLE_POLL_MS = 100
BUSY_BACKOFF_MS = 5
OUTPUT_TOPIC_ADVICE = "sluicegate never creates an output topic: create it with kafka-topics.sh or your tooling"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_DUPLICATE = 3
"""Another live reader process took this subtask (or every slot is taken): starting this
one again would not help, so a supervisor can tell it from a failure."""
MAX_PRODUCER_FENCES_PER_MINUTE = 5
"""Taking the transactional id back more often than this means a fight: give up."""
MIN_DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
"""By default at least a minute: an open checkpoint transaction survives a broker outage that
long (and a reader that died mid-checkpoint holds read_committed consumers of its outputs
back as long)."""
MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""The broker's default ``transaction.max.timeout.ms``: a longer one is refused by it."""
SUPERSEDED_WAIT_POLLS = 10
"""Control polls (of 2 x IDLE_POLL_MS) a fenced producer waits for the coordinator's word."""


@dataclass(frozen=True)
class ReaderSettings:
    """Everything a reader host needs; invalid values raise ConfigError naming the option."""

    source: str
    subtask: int | None
    """None: ask the coordinator for a free slot (``--subtask auto``)."""
    connector: str
    output: OutputSpec
    bootstrap_servers: str
    options: Mapping[str, str] = field(default_factory=dict)
    namespace: str = "sluicegate"
    checkpoint_interval_ms: int = 2_000
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    transaction_timeout_ms: int | None = None
    """The checkpoint transaction's ``transaction.timeout.ms``, at least three checkpoint
    intervals (a transaction spans one; a slow one must not be aborted under it). None:
    that or a minute, whichever is longer (``txn_timeout_ms``)."""
    max_batch: int = 10_000
    exit_when_finished: bool = True
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    """The coordinator's session timeout: with no heartbeat sent for longer, the reader
    fences itself."""
    topic_wait_timeout_s: float | None = TOPIC_WAIT_S
    """How long to wait at start for the control topics and the output topic (None: for
    ever; reader/timing.py says why the default is short)."""
    kafka_wait_s: float = KAFKA_WAIT_S
    """At start, how long to retry a Kafka that has not answered yet (a broker still
    starting) before the reader exits 2 naming --bootstrap-servers: a wrong address must
    not look like a reader that waits."""
    name: str | None = None
    """With ``subtask`` None: a stable member name that brings a restarted process back to
    its slot (as Kafka's group.instance.id)."""
    split_idle_timeout_ms: int = 0
    """A split with no record for this long stops holding the reader's watermark back until
    its next record (FLIP-182 split idleness); 0: off."""
    metrics_port: int = 0
    """Serve Prometheus metrics on this port (reader/metrics.py); 0: off."""
    metrics_split_labels: bool = False
    """Also one series per owned split (records left to its end): mind the cardinality."""
    process: str | None = None
    """``module:function``: the user's function between reading and writing
    (reader/processing.py); None: records written as read."""
    on_process_error: str = "fail"
    """fail, skip (dead-letter the record) or retry (``process_retries`` times, then fail)."""
    process_retries: int = 3

    @property
    def timing(self) -> ReaderTiming:
        """The contact settings and their rules (reader/timing.py), the same model as the
        other host's."""
        return ReaderTiming.of(self)

    def __post_init__(self) -> None:
        validate_source(self.source, "--source")
        validate_namespace(self.namespace, "--namespace")
        if not self.bootstrap_servers.strip():
            raise ConfigError(
                "--bootstrap-servers",
                "not set: pass --bootstrap-servers or set KAFKA_BOOTSTRAP_SERVERS",
            )
        if self.subtask is not None:
            checked_int("--subtask", self.subtask, 0)
        elif self.name is not None and not self.name.strip():
            raise ConfigError("--name", "must not be empty")
        checked_int("--checkpoint-interval-ms", self.checkpoint_interval_ms, 10)
        if self.transaction_timeout_ms is not None:
            checked_int(
                "--transaction-timeout-ms",
                self.transaction_timeout_ms,
                max(1_000, 3 * self.checkpoint_interval_ms),
                MAX_TRANSACTION_TIMEOUT_MS,
            )
        checked_int("--max-batch", self.max_batch, 1)
        checked_int("--split-idle-timeout-ms", self.split_idle_timeout_ms, 0)
        checked_port("--metrics-port", self.metrics_port)
        self.timing.check(CLI_NAMES)
        if not self.connector.strip():
            raise ConfigError("--connector", "must name a connector")
        ErrorPolicy.parse(self.on_process_error)
        checked_int(RETRIES_SETTING, self.process_retries, 0)
        if self.process is not None:
            check_output_takes_a_function(self.output)

    @property
    def txn_timeout_ms(self) -> int:
        """The checkpoint transaction's timeout, as given or by default."""
        if self.transaction_timeout_ms is not None:
            return self.transaction_timeout_ms
        return min(MAX_TRANSACTION_TIMEOUT_MS, max(MIN_DEFAULT_TRANSACTION_TIMEOUT_MS, 3 * self.checkpoint_interval_ms))

    @property
    def error_handling(self) -> ErrorHandling:
        return ErrorHandling(ErrorPolicy.parse(self.on_process_error), self.process_retries)

    @property
    def transactional_id(self) -> str:
        if self.subtask is None:
            raise RuntimeError("a reader with --subtask auto has no transactional id before it gets a slot")
        return reader_transactional_id(self.namespace, self.source, self.subtask)


class OutputTopicMissing(Exception):
    """The reader's output topic does not exist (exit 2): the message says what to do."""


class ReaderSuperseded(RuntimeError):
    """Another live process registered for this subtask: two readers were started for it."""


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Stats:
    channel: ControlChannel
    registrations: int = 0
    fenced: int = 0
    timed_out: int = 0
    """Attempts the coordinator failed for silence, fencing this subtask's producer first."""
    last_progress_s: float = field(default_factory=time.monotonic)
    records_at_last_progress: int = 0

    @property
    def dead_letters(self) -> int:
        return self.channel.dead_letters


class ReaderHost:
    def __init__(
        self,
        settings: ReaderSettings,
        source: Source[Any] | None = None,
        *,
        location: str | None = None,
        process: Callable[..., Any] | None = None,
        words: Callable[[str], str] = str,
    ) -> None:
        """``process``: the user's function (overrides ``settings.process``); ``words``: a
        message that names the command line's flags, as this host's user names the settings
        (``run_reader``: its keywords)."""
        self.settings = settings
        self._words = words
        if process is not None:
            check_output_takes_a_function(settings.output)
        if settings.output.kind == "sink":
            load_callable(settings.output.target, OUTPUT_SETTING, "sink factory")  # a bad name fails now
        function = process if process is not None else (load_function(settings.process) if settings.process else None)
        self.processor = processor_for(function, settings.error_handling)
        self.split_states = SplitStates() if self.processor.stateful else None
        """A stateful function's per-split states (reader/split_state.py); None: stateless."""
        self._split_state_log: KafkaSplitStateLog | None = None
        self._states_loaded_for: tuple[int | None, int] | None = None
        """The (attempt, applied seq) whose owned splits all have their state loaded."""
        self._failed_records: list[DeadLetter] = []
        """Records the user's function failed on (skip policy) since the last checkpoint:
        dead-lettered inside its transaction, so once each."""
        self.source: Source[Any] = source if source is not None else load_source(settings.connector, settings.options)
        self.topics = ControlTopics.for_source(settings.source, settings.namespace)
        self.location = location or f"{socket.gethostname()}:{os.getpid()}"
        self.session: ReaderSession[Any] | None = None
        self._stop_requested = asyncio.Event()
        self._txn: CheckpointTxn | None = None
        self._state_writer: StateRecords | None = None
        """How the subtask's checkpoints are written; made by the restore, which knows the subtask."""
        self.channel: ControlChannel = self._control_channel("claim" if settings.subtask is None else None)
        self.stats = _Stats(self.channel)
        self._output: Output | None = None
        self._registration_sent_s: float | None = None
        self._last_registration_notice_s = 0.0
        self._finished_idle = False
        self._tasks: list[asyncio.Task[None]] = []
        self._producer_fences: list[float] = []
        self.metrics = ReaderMetrics(self, split_labels=settings.metrics_split_labels)

    def _control_channel(self, purpose: str | None = None, answered: bool = False) -> ControlChannel:
        """``answered``: Kafka has answered this process before (the slot claim), so a broker
        that does not answer now is an outage to wait out, not a wrong address."""
        s = self.settings
        client_id = f"{s.namespace}.{s.source}.{purpose}-{os.getpid()}" if purpose else s.transactional_id
        never_answered_timeout_s = None if answered else s.kafka_wait_s
        return KafkaControlChannel(
            self.topics,
            s.bootstrap_servers,
            client_id,
            s.topic_wait_timeout_s,
            never_answered_timeout_s=never_answered_timeout_s,
        )

    # -- life cycle ---------------------------------------------------------------

    def request_stop(self) -> None:
        """Graceful stop (SIGTERM/SIGINT): final checkpoint, hand the splits back, exit 0."""
        if not self._stop_requested.is_set():
            log.debug("stop requested: leaving after a final checkpoint")
        self._stop_requested.set()

    async def run(self) -> int:
        """Run until the bounded end or a stop request; returns the process exit code."""
        try:
            if self.settings.metrics_port:
                await self.metrics.serve(self.settings.metrics_port)
            if not await self._unless_stopped(self._start()):
                log.info("stopped before the reader was ready")
                return EXIT_OK
            while True:
                try:
                    return await self._main_loop()
                except ReaderTakenOver as exc:
                    await self._after_producer_fenced(exc)
        except (ConfigError, DefinitionRefusedError) as exc:
            log.error("%s", exc)
            return EXIT_CONFIG
        except SourceNotSetUp as exc:
            s = self.settings
            advice = exc.advice(s.source, s.namespace, CLI_NAMES.topic_wait_timeout_s, SELF_SETUP)
            log.error("%s", self._words(advice))
            return EXIT_CONFIG
        except OutputTopicMissing as exc:
            log.error("%s", self._words(str(exc)))
            return EXIT_CONFIG
        except KafkaNeverAnswered as exc:
            log.error(
                "%s. Check --bootstrap-servers (or KAFKA_BOOTSTRAP_SERVERS) and, for a secured listener, "
                "--kafka-security-protocol; --kafka-wait-s waits longer for a broker that is still starting",
                exc,
            )
            return EXIT_CONFIG
        except NoFreeSlot as exc:
            log.error("%s", exc)
            return EXIT_DUPLICATE
        except ReaderSuperseded as exc:
            log.error("%s", exc)
            self._summary("stopped: superseded")
            return EXIT_DUPLICATE
        except (ReaderTakenOver, SourceError) as exc:
            log.error("%s", exc)
            return EXIT_FAILED
        except (KafkaError, OSError, TimeoutError) as exc:
            log.error("the reader of subtask %s stops: %s", self.settings.subtask, exc)
            return EXIT_FAILED
        finally:
            await self._shutdown()

    async def _unless_stopped(self, coro: Coroutine[Any, Any, None]) -> bool:
        """Run ``coro`` unless a stop is requested first (then cancel it and return False)."""
        work = asyncio.ensure_future(coro)
        stop = asyncio.ensure_future(self._stop_requested.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            stop.cancel()
        if work.done():
            work.result()
            return True
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return False

    async def _claim_slot(self) -> None:
        """--subtask auto: get a subtask from the coordinator, then go on as its reader."""
        claim = await claim_slot(self.channel, self.settings.source, location=self.location, name=self.settings.name)
        await self.channel.close()
        self.settings = dataclasses.replace(self.settings, subtask=claim.subtask)
        self.channel = self._control_channel(answered=True)
        self.stats.channel = self.channel
        log.info(
            "the coordinator of %s granted subtask %d%s (%.1f s)",
            self.settings.source,
            claim.subtask,
            f" to {self.settings.name}" if self.settings.name else "",
            claim.waited_s,
        )

    @property
    def subtask(self) -> int:
        subtask = self.settings.subtask
        assert subtask is not None, "the subtask is known once a slot was granted"
        return subtask

    async def _start(self) -> None:
        if self.settings.subtask is None:
            await self._claim_slot()
        s = self.settings
        state_topics = [self.topics.reader_state] + ([self.topics.split_state] if self.split_states else [])
        partitions = await self.channel.open([self.subtask], state_topics)
        if s.output.kind == "kafka":
            await self._wait_for_output_topic(s.output.target)
        count = partitions[self.topics.readers]
        subtask = self.subtask
        if subtask >= count:
            raise ConfigError(
                "--subtask",
                f"{subtask} has no partition in {self.topics.readers} ({count} partitions: subtasks 0..{count - 1})",
            )
        self._txn = CheckpointTxn(self._new_txn_producer, self._taken_over, _stop_producer)
        await self._txn.start()  # init_transactions: fences a zombie of this subtask
        if self.split_states is not None:
            # after the zombie's transaction is aborted: its states would hold the read back
            self._split_state_log = KafkaSplitStateLog(s.bootstrap_servers, self.topics.split_state, s.transactional_id)
        restored = await self._restore()
        self.session = ReaderSession(
            s.source,
            self.subtask,
            self.source,
            location=self.location,
            restored=restored,
            split_idle_timeout_ms=s.split_idle_timeout_ms,
            definition=SourceDefinition.of(s.connector, s.options, type(self.source)),
        )
        self._output = open_output(s.output, lambda: self._txn_.producer, self.subtask)
        await self._output.open()
        await self._output.recover(restored.output_files if restored is not None else ())
        self._tasks.append(asyncio.create_task(self._heartbeat_loop(), name="reader-heartbeat"))

    async def _wait_for_output_topic(self, topic: str) -> None:
        """The user's output topic: sluicegate never creates it, so its absence is a missing
        step (or a typo) with its own advice, not a control topic still on its way."""
        s = self.settings
        timeout = FOREVER_S if s.topic_wait_timeout_s is None else s.topic_wait_timeout_s
        try:
            await wait_for_topics(s.bootstrap_servers, [topic], timeout, hint=f"({OUTPUT_TOPIC_ADVICE})")
        except TopicsMissingError:
            raise OutputTopicMissing(
                f"the output topic {topic} (--output kafka:{topic}) does not exist on {s.bootstrap_servers} "
                f"(waited {timeout:.0f} s). {OUTPUT_TOPIC_ADVICE.capitalize()}; "
                f"{CLI_NAMES.topic_wait_timeout_s} waits longer for one created later"
            ) from None

    async def _shutdown(self) -> None:
        await self.metrics.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.session is not None and self.session.phase is not Phase.CLOSED:
            self.session.close()
        if self._output is not None:
            try:
                await self._output.close()
            except Exception:
                log.exception("closing the output failed")
        await self.channel.close()
        if self._split_state_log is not None:
            await self._split_state_log.close()
        if self._txn is not None:
            await self._txn.stop()

    # -- restore ------------------------------------------------------------------

    async def _restore(self) -> ReaderCheckpoint | None:
        s = self.settings
        tp = TopicPartition(self.topics.reader_state, self.subtask)
        self._state_writer = StateRecords(self.subtask)
        consumer = control_consumer(s.bootstrap_servers, f"{s.transactional_id}.restore")
        await consumer.start()
        try:
            if self.subtask not in (consumer.partitions_for_topic(self.topics.reader_state) or {self.subtask}):
                raise ConfigError("--subtask", f"{self.subtask} has no partition in {self.topics.reader_state}")
            checkpoint = await self._read_checkpoint(consumer, tp)
        except StateRecordError as exc:
            log.warning("the last checkpoint of subtask %d is unreadable (%s): starting empty", self.subtask, exc)
            return None
        finally:
            await consumer.stop()
        if checkpoint is None:
            log.info("no checkpoint of subtask %d in %s: starting empty", self.subtask, self.topics.reader_state)
            return None
        if checkpoint.source != s.source or checkpoint.subtask != self.subtask:
            log.warning(
                "the checkpoint in %s is for source %r subtask %d, not ours: starting empty",
                self.topics.reader_state,
                checkpoint.source,
                checkpoint.subtask,
            )
            return None
        log.info(
            "restored checkpoint %d of subtask %d: %d splits, applied seq %d, epoch %d",
            checkpoint.checkpoint_id,
            self.subtask,
            len(checkpoint.splits),
            checkpoint.applied_seq,
            checkpoint.epoch,
        )
        return checkpoint

    async def _read_checkpoint(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> ReaderCheckpoint | None:
        """The subtask's last committed checkpoint: its record, or its head and then its
        pieces, each the latest written before the head (reader/state.py)."""
        key = state_key(self.subtask)
        offset, raw = (await read_latest(consumer, tp, [key])).get(key, (0, None))
        if raw is None:
            return None
        checkpoint, pieces = ReaderCheckpoint.decode_head(raw)
        self._state_writer_.pieces_written = pieces  # so a smaller checkpoint tombstones the rest
        if not pieces:
            return checkpoint
        keys = [piece_key(self.subtask, i) for i in range(pieces)]
        found = await read_latest(consumer, tp, keys, before=offset)
        return checkpoint.joined([found[k][1] if k in found else None for k in keys])

    # -- the loop -----------------------------------------------------------------

    async def _main_loop(self) -> int:
        session = self._session
        s = self.settings
        last_checkpoint_s = time.monotonic()
        last_batch = 0
        while True:
            if self._stop_requested.is_set():
                await self._leave_gracefully()
                self._summary("stopped")
                return EXIT_OK
            if session.phase is Phase.UNREGISTERED:
                await self._register()
                last_checkpoint_s = time.monotonic()
            await self._poll_control(self._poll_timeout_ms(last_batch))
            last_batch = 0
            if self._finished_idle and not session.is_finished:
                self._finished_idle = False  # --no-exit-when-finished and new work came
            if session.active:
                await self._load_arrived_states()
                last_batch = await self._read_and_write(s.max_batch)
                interval_over = time.monotonic() - last_checkpoint_s >= s.checkpoint_interval_ms / 1000
                # Out of work with finished splits not yet reported: checkpoint now, so the
                # coordinator learns of them (and can hand out more, or end) without waiting.
                ran_dry = session.nothing_to_read and bool(session.finished_pending)
                if interval_over or ran_dry:
                    last_checkpoint_s = time.monotonic()
                    if session.checkpoint_due:
                        await self._checkpoint()
                await self._flush_outbox()
                if session.is_finished and not self._finished_idle and await self._checkpoint():
                    if s.exit_when_finished:
                        await self._send_plain(ReaderLeaving(splits=[]), wait=True)
                        log.info("all splits finished; left the source")
                        self._summary("finished")
                        return EXIT_OK
                    self._finished_idle = True
                    log.info("all splits finished; staying registered and idle (--no-exit-when-finished)")
                await self._check_contact()
            elif session.phase is Phase.REGISTERING:
                self._registration_notice()
            self._progress()
            await asyncio.sleep(0)

    async def _read_and_write(self, max_batch: int) -> int:
        """One batch read, processed and written; returns how many records were read."""
        session = self._session
        if not self.settings.output.records:
            records = session.read(max_batch).records
            if records:
                await self._write(lambda output: output.write(self.subtask, records))
            return len(records)
        batch = session.read_columns(max_batch)
        if batch is None:
            return 0
        state = await self._batch_state(batch) if self.split_states is not None else None
        processed = await asyncio.to_thread(self.processor.apply, batch, state)
        for failure in processed.failures:
            self._failed_records.append(self._failure_letter(failure))
        await self._write(lambda output: output.write_batch(processed.batch))
        return int(batch.num_rows)

    # -- a stateful function's split states ---------------------------------------------

    async def _load_arrived_states(self) -> None:
        """Load the state of every split that arrived since the last look (an assignment,
        a restored checkpoint), before any of its records is read: a split that moves
        without records reaching the function must still have its state saved anew."""
        session = self._session
        if self.split_states is None or self._states_loaded_for == (session.attempt, session.applied_seq):
            return
        await self._load_states([sid for sid in session.owned if not self.split_states.is_loaded(sid)])
        self._states_loaded_for = (session.attempt, session.applied_seq)

    async def _load_states(self, split_ids: list[str]) -> None:
        states, state_log = self.split_states, self._split_state_log
        assert states is not None and state_log is not None
        if not split_ids:
            return
        read = await state_log.catch_up(states)
        owned = self._session.owned
        for split_id in split_ids:
            states.load(split_id, owned[split_id].wire)
        log.debug("loaded the state of %d splits (%d records read from %s)", len(split_ids), read, state_log.topic)

    async def _batch_state(self, batch: Any) -> BatchState:
        states = self.split_states
        assert states is not None
        split_ids = self._session.split_ids_of(batch)
        missing = sorted({sid for sid in split_ids if not states.is_loaded(sid)})
        await self._load_states(missing)
        return BatchState(split_ids, states.views(set(split_ids)))

    def _split_state_record(self, write: StateWrite) -> TxnRecord:
        value = None if write.saved is None else write.saved.encode()
        return TxnRecord(self.topics.split_state, value, write.split_id.encode())

    def _failure_letter(self, failure: Failure) -> DeadLetter:
        record = failure.record
        letter = DeadLetter(
            topic=record.topic or failure.split_id or "",
            partition=-1 if record.partition is None else record.partition,
            offset=-1 if record.offset is None else record.offset,
            key=record.key,
            value=record.value,
            kind=DEAD_LETTER_KIND,
            reason=f"{self.processor.name}: {failure.reason}",
        )
        letter.log()
        return letter

    async def _write(self, write: Callable[[Output], Awaitable[None]]) -> None:
        output = self._output_
        try:
            if output.exactly_once:
                await self._txn_.open()
            await write(output)
        except (KafkaError, IllegalOperation) as exc:
            self._txn_.raise_if_fenced(exc)
            # The records read since the last checkpoint cannot be committed: start over
            # from that checkpoint, as after being fenced.
            reason = f"writing to {self.settings.output} failed ({exc})"
            log.warning("%s", reason)
            self._session.self_fence(reason)
            await self._recover_after_fence(reason)

    def _poll_timeout_ms(self, last_batch: int) -> int:
        """Do not wait for control records while there is data; back off a little when the
        connector has splits but gave nothing (e.g. rate-limited); wait longer when idle."""
        session = self._session
        if not session.active or self._finished_idle:
            return IDLE_POLL_MS
        if last_batch:
            return 0
        return IDLE_POLL_MS if session.nothing_to_read else BUSY_BACKOFF_MS

    async def _poll_control(self, timeout_ms: int) -> None:
        for record in await self.channel.poll(timeout_ms, self.subtask):
            if not await self._on_control_record(record):
                break  # fenced: the rest of the batch is for the failed attempt

    async def _on_control_record(self, record: Inbound) -> bool:
        session = self._session
        try:
            outcome = session.on_message(record.env)
        except Exception as exc:  # e.g. the connector's codec rejects a split
            log.exception("could not apply %s at offset %d", record.env.type, record.raw.offset)
            await self.channel.reject(record.raw, "rejected", f"{type(exc).__name__}: {exc}")
            return True
        if isinstance(outcome, Registered):
            self.stats.registrations += 1
            if isinstance(record.env.body, ReaderRegistered) and record.env.body.renew_producer:
                # The coordinator fenced this subtask's id around our start: nothing is written
                # yet in this attempt, so a new producer costs one round trip and no rewind.
                log.info("the coordinator fenced this subtask's transactional id as it started: new producer")
                await self._txn_.renew()
            self._registration_sent_s = None
            self.channel.contact()
            self._finished_idle = False
            await self._flush_outbox()
        elif isinstance(outcome, Fenced):
            if outcome.producer_fenced:
                await self._after_timed_out()
            await self._recover_after_fence(session.fenced_reason or "fenced")
            return False
        elif isinstance(outcome, Superseded):
            raise ReaderSuperseded(outcome.describe(self.settings.source, self.subtask))
        elif isinstance(outcome, Refused):
            if outcome.final:
                raise DefinitionRefusedError(outcome.reason)
            await asyncio.sleep(1.0)  # a holder that may be gone soon: retry
        return True

    async def _register(self) -> None:
        """Capture the end offset first, then register, then consume from that offset."""
        session = self._session
        await self.channel.capture([self.subtask])
        registration = session.begin_registration()
        log.info(
            "registering subtask %d of %s (incarnation %s, %d restored splits, checkpoint %s)",
            self.subtask,
            self.settings.source,
            registration.incarnation,
            len(registration.reported_splits),
            registration.restored_checkpoint_id,
        )
        while not await self._send_all(body_in_pieces(registration)):
            if self._stop_requested.is_set():
                return
            await asyncio.sleep(1.0)
        now = time.monotonic()
        self._registration_sent_s = now
        self._last_registration_notice_s = now

    def _registration_notice(self) -> None:
        now = time.monotonic()
        if (
            self._registration_sent_s is not None
            and now - self._last_registration_notice_s >= REGISTRATION_NOTICE_INTERVAL_S
        ):
            self._last_registration_notice_s = now
            log.info(
                "still waiting for the coordinator of %s to accept the registration (%.0f s)",
                self.settings.source,
                now - self._registration_sent_s,
            )

    async def _check_contact(self) -> None:
        silent_s = self.channel.silent_for_s()
        if self.settings.timing.lost_contact(silent_s):
            reason = (
                f"no heartbeat could be sent for {silent_s:.1f} s "
                f"(session timeout {self.settings.session_timeout_ms} ms)"
            )
            self._session.self_fence(reason)
            await self._recover_after_fence(reason)

    # -- checkpoints --------------------------------------------------------------

    async def _checkpoint(self) -> bool:
        """One checkpoint as one transaction; True once it is committed."""
        session = self._session
        output = self._output_
        if not session.active:
            return False
        started_s = time.monotonic()
        try:
            await output.flush()
            plan = session.prepare_checkpoint()
            state_writes = (
                self.split_states.plan([*plan.checkpoint.splits, *plan.returned], plan.finished_split_ids)
                if self.split_states is not None
                else []
            )
            await self._txn_.commit(
                [
                    *(self._control_record(finished) for finished in plan.splits_finished()),
                    *(self._dead_letter_record(letter) for letter in self._failed_records),
                    # the states before the ack: a reader's transaction holds the split-state
                    # topic back for as short a time as can be (reader/kafka_split_state.py)
                    *(self._split_state_record(write) for write in state_writes),
                    *self._state_records(dataclasses.replace(plan.checkpoint, output_files=output.staged())),
                    *(self._control_record(ack) for ack in plan.acks()),
                ]
            )
            self._state_writer_.committed()
        except (KafkaError, IllegalOperation, OSError) as exc:
            self._txn_.raise_if_fenced(exc)  # the output's flush may meet the fence first
            log.warning("checkpoint %d failed: %s", session.next_checkpoint_id, exc)
            await self._txn_.abort()  # a failed flush leaves it open
            self._discarded()
            if output.exactly_once:
                session.self_fence("a checkpoint failed, so the records read since the last one were not committed")
                await self._recover_after_fence("checkpoint failed")
            return False
        self.metrics.observe_checkpoint(self.settings.source, self.subtask, time.monotonic() - started_s)
        self._committed(plan)
        return True

    def _discarded(self) -> None:
        """What was written since the last checkpoint will not commit: the records are read
        again from there (and a failed one fails again)."""
        self._output_.discarded()
        self._failed_records.clear()

    def _committed(self, plan: CheckpointPlan) -> None:
        session = self._session
        output = self._output_
        session.checkpoint_committed(plan)
        output.committed()
        if self.split_states is not None:
            self.split_states.committed([*plan.finished_split_ids, *plan.returned_split_ids])
        self.channel.dead_letters += len(self._failed_records)
        self._failed_records.clear()
        self.channel.contact()
        log.info(
            "checkpoint %d: %d splits, %d records since the last, %d splits finished, applied seq %d",
            plan.checkpoint_id,
            len(plan.checkpoint.splits),
            plan.records_since_last,
            len(plan.finished_split_ids),
            plan.checkpoint.applied_seq,
        )

    async def _leave_gracefully(self) -> None:
        session = self._session
        if not session.active:
            log.info("stopping while not registered: the restored checkpoint stays as it was")
            return
        if not await self._checkpoint() or not session.active:
            log.warning(
                "the final checkpoint failed: leaving without handing splits back "
                "(the coordinator will time the attempt out)"
            )
            return
        last = session.last_checkpoint
        splits = list(last.splits) if last else []
        try:
            await self._txn_.commit(
                [
                    *self._state_records(session.leaving_checkpoint()),
                    *(self._control_record(piece) for piece in body_in_pieces(ReaderLeaving(splits=splits))),
                ]
            )
            self._state_writer_.committed()
        except KafkaError as exc:
            log.warning("could not send ReaderLeaving: %s (the coordinator will time the attempt out)", exc)
            return
        log.info("leaving: handed %d splits back to the coordinator", len(splits))

    async def _recover_after_fence(self, reason: str) -> None:
        """Fenced: drop what was not checkpointed, re-affirm the last checkpoint, register again."""
        session = self._session
        self.stats.fenced += 1
        txn = self._txn_
        await txn.abort()
        self._discarded()
        if self.split_states is not None:
            # the reader goes back to its last checkpoint: so do the states (an
            # at-least-once output that only lost a checkpoint keeps reading on, and
            # keeps its states with it)
            self.split_states.discard()
            self._states_loaded_for = None
        last = session.last_checkpoint
        if last is not None and txn.state is not TxnState.FENCED:
            # Writing the last checkpoint again in a transaction proves this process still
            # owns the subtask's transactional id: a zombie fails here and stops.
            try:
                await txn.commit(self._state_records(last))
                self._state_writer_.committed()
            except KafkaError as exc:
                log.warning("could not re-affirm checkpoint %d: %s", last.checkpoint_id, exc)
        log.warning(
            "fenced (%s): restoring checkpoint %s (%d splits, applied seq %d), registering again",
            reason,
            last.checkpoint_id if last else None,
            len(last.splits) if last else 0,
            last.applied_seq if last else 0,
        )

    async def _after_timed_out(self) -> None:
        """The coordinator heard nothing from this attempt for a session timeout, fenced the
        subtask's transactional id and gave the splits it had not checkpointed to others.
        Whatever this process wrote since its last checkpoint was aborted with the fence;
        it goes on with a new producer, from that checkpoint."""
        self.stats.timed_out += 1
        log.warning(
            "the coordinator timed this reader out (nothing it sent arrived within its session timeout: was the "
            "process paused or short of CPU?) and fenced its producer; going on from its last checkpoint with a "
            "new one"
        )
        await self._txn_.renew()

    async def _after_producer_fenced(self, exc: ReaderTakenOver) -> None:
        """Another process initialised this subtask's transactional id. If it also registered
        after us, the coordinator's fence names it and this process stops (ReaderSuperseded).
        Otherwise the two started together and this one registered last, so it is the one
        the coordinator keeps: it takes the transactional id back, restarts from its last
        checkpoint and registers again, which supersedes the other. Either way one stays."""
        now = time.monotonic()
        self._producer_fences = [t for t in self._producer_fences if now - t < 60.0] + [now]
        if len(self._producer_fences) > MAX_PRODUCER_FENCES_PER_MINUTE:
            raise exc
        # The broker also fences a producer whose transaction it aborted past its timeout
        # (the broker was down longer than that): its transaction is gone either way, and
        # a fence read below must not try to abort it or write with it.
        self._txn_.fenced()
        # What the coordinator says about our attempt: the twin registers right after it
        # initialised the id, and the coordinator answers within a step. Or the coordinator
        # fenced the id itself, having timed this attempt out: its SplitsReleased is waiting.
        timed_out = self.stats.timed_out
        for _ in range(SUPERSEDED_WAIT_POLLS):
            await self._poll_control(IDLE_POLL_MS * 2)
            if self.stats.timed_out > timed_out:
                return  # renewed and recovered (_after_timed_out)
        log.warning(
            "the transactional id %s was fenced and no other process registered for subtask %d after this one "
            "(a twin that started with it, or the coordinator ending a transaction of this reader that held its "
            "inbox): this one takes the subtask back from its last checkpoint",
            self.settings.transactional_id,
            self.subtask,
        )
        await self._txn_.renew()
        if self._session.phase is not Phase.CLOSED:
            self._session.self_fence("the transactional id was taken")
            await self._recover_after_fence("the transactional id was taken")

    def _taken_over(self) -> ReaderTakenOver:
        return ReaderTakenOver(
            f"another process took over subtask {self.subtask} of {self.settings.source} "
            f"(transactional id {self.settings.transactional_id}); this one stops"
        )

    # -- Kafka helpers ------------------------------------------------------------

    def _new_txn_producer(self) -> AIOKafkaProducer:
        s = self.settings
        return transactional_producer(
            s.bootstrap_servers,
            s.transactional_id,
            transaction_timeout_ms=s.txn_timeout_ms,
        )

    @property
    def _txn_(self) -> CheckpointTxn:
        assert self._txn is not None, "the transaction exists once the reader started"
        return self._txn

    def _control_record(self, body: Body) -> TxnRecord:
        env = self._session.envelope(body, _now_ms())
        return TxnRecord(self.topics.coordinator, encode(env), key=encode_key(self.subtask))

    def _dead_letter_record(self, letter: DeadLetter) -> TxnRecord:
        return TxnRecord(self.topics.dead_letter, letter.value or b"", letter.key, headers=tuple(letter.headers()))

    @property
    def _state_writer_(self) -> StateRecords:
        assert self._state_writer is not None, "the restore makes the state writer"
        return self._state_writer

    def _state_records(self, checkpoint: ReaderCheckpoint) -> list[TxnRecord]:
        """The checkpoint on the reader-state topic: one record, or its pieces and head."""
        return [
            TxnRecord(self.topics.reader_state, value, key, self.subtask)
            for key, value in self._state_writer_.encode(checkpoint)
        ]

    async def _send_plain(self, body: Body, wait: bool = False) -> bool:
        """Send outside the checkpoint transaction; with ``wait``, until the broker has it."""
        return await self.channel.send(self._session.envelope(body, _now_ms()), wait=wait)

    async def _send_all(self, pieces: list[Body]) -> bool:
        """A record's pieces outside the transaction, each until the broker has it. Sent
        again from the first piece if one fails: the coordinator starts over at piece 0."""
        for piece in pieces:
            if not await self._send_plain(piece, wait=True):
                return False
        return True

    async def _flush_outbox(self) -> None:
        session = self._session
        for body in session.take_outbox():
            await self._send_plain(body)
        for letter in session.take_dead_letters():
            await self.channel.dead_letter(letter)
        request = session.maybe_request_split(_now_ms())
        if request is not None:
            await self._send_plain(request)

    async def _heartbeat_loop(self) -> None:
        interval = self.settings.heartbeat_interval_ms / 1000
        timeout = self.settings.timing.delivery_timeout_s
        while True:
            await asyncio.sleep(interval)
            session = self._session
            if not session.active:
                continue
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancel that arrives once the send
            # is done but before this task resumes (the heartbeat and the final ReaderLeaving are
            # answered by one produce response), and _shutdown then waits for this loop for ever.
            try:
                async with asyncio.timeout(timeout):
                    await self._send_plain(session.heartbeat(), wait=True)
            except TimeoutError:
                log.warning("a heartbeat was not delivered within %.1f s", timeout)

    # -- reporting ----------------------------------------------------------------

    def _progress(self) -> None:
        now = time.monotonic()
        elapsed = now - self.stats.last_progress_s
        if elapsed < PROGRESS_INTERVAL_S:
            return
        session = self._session
        rate = (session.records_read - self.stats.records_at_last_progress) / elapsed
        self.stats.last_progress_s = now
        self.stats.records_at_last_progress = session.records_read
        heartbeat = session.heartbeat()  # the watermark as the coordinator sees it (idle splits left out)
        log.info(
            "progress: %.0f records/s, %d splits owned, watermark %s%s, %s",
            rate,
            len(session.owned),
            event_time_text(heartbeat.watermark),
            " (idle)" if heartbeat.idle else "",
            f"attempt {session.attempt}" if session.active else session.phase.value,
        )

    def metrics_snapshot(self) -> ReaderSnapshot | None:
        session = self.session
        if session is None or self._output is None:
            return None
        heartbeat = session.heartbeat()
        reader = session.reader
        return ReaderSnapshot(
            source=self.settings.source,
            subtask=session.subtask,
            registered=session.active,
            splits_owned=len(session.owned),
            records_read=session.records_read,
            records_written=self._output.records_written,
            watermark_ms=heartbeat.watermark,
            idle=heartbeat.idle,
            low_watermark_ms=session.low_watermark,
            records_to_end=dict(reader.records_to_end()) if reader is not None else {},
            splits_finished=session.splits_finished_total,
            checkpoints=session.checkpoints_committed,
            registrations=self.stats.registrations,
            fenced=self.stats.fenced,
            dead_letters=self.channel.dead_letters,
        )

    def _summary(self, how: str) -> None:
        session = self._session
        output = self._output_
        line = (
            f"subtask {self.subtask} of {self.settings.source} {how}: "
            f"{output.records_written} records written to {self.settings.output}, "
            f"{session.splits_finished_total} splits finished, "
            f"{session.checkpoints_committed} checkpoints"
        )
        if self.channel.dead_letters:
            line += f", {self.channel.dead_letters} dead-lettered records"
        if self.stats.fenced:
            line += f", fenced {self.stats.fenced} times"
        print(line, flush=True)

    @property
    def _session(self) -> ReaderSession[Any]:
        assert self.session is not None
        return self.session

    @property
    def _output_(self) -> Output:
        assert self._output is not None
        return self._output


async def _stop_producer(producer: AIOKafkaProducer) -> None:
    """Stop a transactional producer that may have been fenced (stopping one may raise)."""
    try:
        await producer.stop()
    except Exception as exc:
        log.debug("stopping a Kafka client: %s", exc)
    _retrieve_fatal_errors(producer)


def _retrieve_fatal_errors(producer: AIOKafkaProducer) -> None:
    """Mark aiokafka's internal futures of a fenced producer as retrieved.

    Otherwise their "exception was never retrieved" log runs from a finalizer at
    some later garbage collection, which on CPython 3.11 can even break an
    unrelated ``ast.parse`` running at that moment.
    """
    sender = getattr(producer, "_sender", None)
    txn_manager = getattr(producer, "_txn_manager", None)
    accumulator = getattr(producer, "_message_accumulator", None)
    batches = [
        *(b for queue in getattr(accumulator, "_batches", {}).values() for b in queue),
        *getattr(accumulator, "_pending_batches", ()),
    ]
    futures = [
        getattr(sender, "sender_task", None),
        getattr(txn_manager, "_transaction_waiter", None),
        *(getattr(b, "_drain_waiter", None) for b in batches),
        *(getattr(b, "future", None) for b in batches),
    ]
    for future in futures:
        if isinstance(future, asyncio.Future) and future.done() and not future.cancelled():
            future.exception()
