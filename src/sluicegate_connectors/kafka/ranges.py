"""Reading offset ranges of partitions into Arrow, for hosts that plan what to read (Spark).

Executor side (``RangeReader``): a Spark executor reads ``[start, end)`` of one
partition. Connecting is the expensive part, so each executor process keeps one
consumer per data-cluster configuration and reuses it for every range it reads,
as Spark's own Kafka source caches its consumers; a range only re-assigns the
consumer to its partition and offset. Records go from librdkafka's messages into
Arrow columns with the schema of Spark's Kafka source, in native code where
``sluicegate._native`` is built, else in Python (read_path.py chooses).

Driver side (``PlanningView``): how far each partition can be read now (its last
stable offset, fetched once per planning round for all partitions in one
request) and the timestamp of the record before a position (the split's event
time there, for watermarks and alignment; read for every partition asked in one
pass, and remembered).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from .cluster import DataCluster, DataClusterError, TopicPartitionKey
from .new_partitions import NewPartitions
from .options import KafkaOptions
from .read_path import PYTHON_ONLY, Event, RangeConsumer, new_range_consumer, read_path
from .reader import DataLossError
from .split import KafkaPartitionSplit

log = logging.getLogger("sluicegate.connectors.kafka")

_CONSUMERS: dict[tuple[str, tuple[tuple[str, str], ...]], RangeConsumer] = {}
_CONSUMERS_LOCK = threading.Lock()
TIMESTAMP_CACHE = 100_000
FILL_WAIT_MS = 500
"""How long one fill waits for a message before it hands back what it has (and the
reader checks ``poll_timeout_ms``)."""
RANGE_READ_DEFAULTS: dict[str, Any] = {"fetch.wait.max.ms": 10, "queued.min.messages": 5_000}
"""librdkafka settings of the executors' range consumers unless the user sets them
(shared_consumer says why)."""
LOOK_BACK = 16
"""How many offsets before a position a probe reads to find its last record (the
offsets just before a position may be transaction markers)."""
PROBE_DEADLINE_S = 10.0
PROBE_SETTINGS: dict[str, Any] = {"fetch.wait.max.ms": 10, "max.partition.fetch.bytes": 64 * 1024}
"""The probe consumer's fetches: it reads a few records a partition, then is assigned
elsewhere. ``fetch.wait.max.ms``: a new partition's fetch waits for the fetch in flight,
which the broker holds up to it (librdkafka: 500 ms) once the previous partition has no
more data: with the default, every probe read after the first took ~0.5 s. The fetch
size: at librdkafka's 1 MB a partition, the records of the partitions that came first had
to be passed over to reach the others (8 partitions of 110 B records: 50-110 ms and 80-150
ms of CPU a probe; at 64 KB, 2-7 ms and as much CPU). (A smaller ``queued.min.messages``
made it worse: 300,000 records passed over a probe.)"""


def arrow_schema(include_headers: bool = True) -> Any:
    """Spark's Kafka source schema, in Arrow: the ``headers`` column only with
    ``include_headers`` (Spark's ``includeHeaders``)."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    return pa.schema(fields)


def shared_consumer(options: KafkaOptions) -> RangeConsumer:
    """This process's range consumer for the options' data cluster (created once), on
    the options' read path (``read_path.read_path()``: native or python).

    Defaults for reading ranges (a ``kafka.*`` setting of the user's wins):
    ``fetch.wait.max.ms`` 10: a range only asks for records that exist, so the broker
    need not hold a fetch open for more; librdkafka's 500 ms would be paid at every
    switch to another range. ``queued.min.messages`` 5,000 (librdkafka: 100,000 per
    partition): librdkafka fetches ahead until that many records wait in its queue, and a
    deep queue is read long after it was parsed, out of the CPU's caches, and costs
    memory. Measured (benchmarks/README.md, "Prefetch depth"): reading ranges in one
    process 0.52-0.57 against 0.76-0.88 CPU s per M rows and a third less broker CPU;
    under Spark 45 MB less per executor worker and 0.73-0.76 against 0.81-0.84 µs a row
    in the workers. A network slower than librdkafka's drain of 5,000 records (a few ms)
    would stall on it: ``kafka.queued.min.messages`` sets it per query.

    ``max.partition.fetch.bytes`` stays librdkafka's 1 MiB, measured against 4 and 16 MiB
    (benchmarks/README.md, "Fetch size"): larger fetches save the broker ~0.1 µs a record
    but cost the worker as much (what is fetched past a range's end is dropped at the
    next assign) and 35-230 MB more per worker."""
    path = read_path(options.read_path)
    config = {**RANGE_READ_DEFAULTS, **options.consumer_config()}
    key = (path, tuple(sorted((k, str(v)) for k, v in config.items() if k not in PYTHON_ONLY and not callable(v))))
    with _CONSUMERS_LOCK:
        consumer = _CONSUMERS.get(key)
        if consumer is None:
            consumer = new_range_consumer(config, path)
            _CONSUMERS[key] = consumer
        return consumer


class RangeReader:
    """Reads ``[start, end)`` of a partition with this process's shared range consumer.

    The policy of both read paths: what an event means (the partition's end, data loss, a
    deleted topic) and how long to wait for records (``poll_timeout_ms``). ``headers=False``
    leaves the headers column out (Spark's ``includeHeaders=false``): no header is copied."""

    def __init__(self, options: KafkaOptions, headers: bool = True, consumer: RangeConsumer | None = None) -> None:
        self.options = options
        self.headers = headers
        self.records_lost = 0
        self._consumer = consumer
        """A range consumer of its own (tests, benchmarks); else the process's shared one."""

    def read(self, split: KafkaPartitionSplit, start: int, end: int, max_rows: int) -> Iterator[Any]:
        """Arrow record batches of at most ``max_rows`` rows, in offset order."""
        if end <= start:
            return
        consumer = self._consumer or shared_consumer(self.options)
        consumer.assign(split.topic, split.partition, start)
        try:
            position = start
            waited_since = time.monotonic()
            while position < end:
                batch, position, event = consumer.fill(
                    split.topic, split.partition, position, end, max_rows, FILL_WAIT_MS, self.headers
                )
                if batch is not None or event is not None:
                    waited_since = time.monotonic()
                if batch is not None:
                    yield batch
                if event is not None:
                    position = self._on_event(consumer, split, event, position, end)
                elif (
                    batch is None
                    and position < end
                    and time.monotonic() - waited_since > self.options.poll_timeout_ms / 1000
                ):
                    raise TimeoutError(
                        f"{split.split_id}: no records for {self.options.poll_timeout_ms} ms while reading offsets "
                        f"{position}..{end - 1} from {self.options.bootstrap_servers} (poll_timeout_ms)"
                    )
        finally:
            consumer.unassign()

    def _on_event(
        self, consumer: RangeConsumer, split: KafkaPartitionSplit, event: Event, position: int, end: int
    ) -> int:
        code, text, offset = event
        if code == KafkaError._PARTITION_EOF:
            # the end of the partition: a range ends at a last stable offset, so what is left
            # below ``end`` are transaction markers, never records
            return end if offset >= end else position
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            low, _high = consumer.watermarks(split.topic, split.partition, 10_000)
            if low <= position:
                raise RuntimeError(f"{split.split_id}: offset {position} is out of range: {text}")
            if self.options.fail_on_data_loss:
                raise DataLossError(split.topic, split.partition, position, low)
            skipped_to = int(min(low, end))
            self.records_lost += skipped_to - position
            log.warning(
                "data loss in %s: offsets %d..%d were deleted before they were read; skipped (fail_on_data_loss=false)",
                split.split_id,
                position,
                skipped_to - 1,
            )
            if skipped_to < end:
                consumer.assign(split.topic, split.partition, skipped_to)
            return skipped_to
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise RuntimeError(f"{split.split_id}: {text} (was the topic deleted?)")
        log.warning("%s: %s", split.split_id, text)
        return position


class PlanningView:
    """Driver-side knowledge for planning: end offsets and event times at positions."""

    def __init__(
        self, options: KafkaOptions, cluster: DataCluster | None = None, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.options = options
        self._cluster = cluster if cluster is not None else DataCluster(options)
        self._monotonic = monotonic
        self._ends: dict[TopicPartitionKey, int] = {}
        self._gone: set[TopicPartitionKey] = set()
        self._new: NewPartitions | None = None
        """Partitions listed and not assigned yet (new_partitions.py): only where
        discovery can find any, an unbounded source that subscribes to topics."""
        if not options.stopping.bounded and options.partition_discovery_interval_ms > 0 and options.assign is None:
            self._new = NewPartitions(options.partition_discovery_interval_ms)
        self._timestamps: OrderedDict[tuple[TopicPartitionKey, int, str], list[int]] = OrderedDict()
        self._probe: Consumer | None = None
        self._probe_lock = threading.Lock()
        """Held by every call that uses the probe or the remembered timestamps: planning
        (alignment) and the driver's watermarks ask from different threads."""

    def refresh(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        """Every partition's last stable offset, in one request; where it fails, the
        partitions the cluster no longer lists are ``gone`` and the others asked again.
        Where discovery can find partitions, the cluster's are listed too (``inputs_to_come``)."""
        keys = sorted({(s.topic, s.partition) for s in splits})
        if self._new is not None:
            partitions = self._cluster.partitions()
            listed = [(t, p) for t, n in partitions.items() for p in range(n) if self.options.selects(t, p)]
            self._new.seen(listed, keys, self._monotonic())
        if not keys:
            return
        try:
            self._ends.update(self._cluster.offsets(keys, "latest"))
            self._gone.difference_update(keys)
            return
        except DataClusterError:
            present = self._cluster.existing(keys)
            if len(present) == len(keys):
                raise
        gone = set(keys) - present
        self._gone = (self._gone - present) | gone
        for key in gone:
            self._ends.pop(key, None)
        self._ends.update(self._cluster.offsets(sorted(present), "latest"))

    def end_offset(self, split: KafkaPartitionSplit) -> int | None:
        return self._ends.get((split.topic, split.partition))

    def inputs_to_come(self) -> list[str]:
        """The partitions the last ``refresh`` listed that no split covers yet and are worth
        waiting for (new_partitions.py)."""
        return [] if self._new is None else self._new.awaited(self._monotonic())

    def gone(self, split: KafkaPartitionSplit) -> bool:
        """The last ``refresh`` found the split's partition missing from the cluster."""
        return (split.topic, split.partition) in self._gone

    def timestamp_before(self, split: KafkaPartitionSplit, position: int) -> int | None:
        """The timestamp of the last record before ``position`` (None: there is none)."""
        return self.timestamps_before([(split, position)])[0]

    def timestamps_before(self, wanted: Sequence[tuple[KafkaPartitionSplit, int]]) -> list[int | None]:
        """``timestamp_before`` of each (split, position), the ones not remembered read in
        one pass over all their partitions. It looks back a little: the offsets just before
        a position may be transaction markers."""
        with self._probe_lock:
            return self._timestamps_before(wanted)

    def _timestamps_before(self, wanted: Sequence[tuple[KafkaPartitionSplit, int]]) -> list[int | None]:
        keys = [((split.topic, split.partition), position) for split, position in wanted]
        missing = [
            (tp, position) for tp, position in keys if position > 0 and (tp, position, "before") not in self._timestamps
        ]
        while missing:  # a partition asked at two positions takes a second pass
            this_pass = dict(reversed(missing))
            found = self._read_before(this_pass)
            for tp, position in this_pass.items():
                if tp in found:  # (one the deadline cut short is asked again next time)
                    self._remember((tp, position, "before"), found[tp])
            missing = [(tp, position) for tp, position in missing if this_pass[tp] != position]
        out: list[int | None] = []
        for tp, position in keys:
            records = self._timestamps.get((tp, position, "before")) if position > 0 else None
            out.append(records[-1] if records else None)
        return out

    def timestamp_at(self, split: KafkaPartitionSplit, position: int) -> int | None:
        """The timestamp of the first record at or after ``position`` (None: none yet)."""
        end = self.end_offset(split)
        if end is not None and position >= end:
            return None
        with self._probe_lock:
            records = self._cached(split, position, "at", lambda: self._records(split, position, limit=1))
        return records[0] if records else None

    def offset_after(self, split: KafkaPartitionSplit, event_time_ms: int) -> int | None:
        """The first offset whose record's timestamp is past ``event_time_ms`` (None: none yet)."""
        key = (split.topic, split.partition)
        return self._cluster.first_offsets_at([key], event_time_ms + 1)[key]

    def _cached(
        self, split: KafkaPartitionSplit, position: int, kind: str, fetch: Callable[[], list[int] | None]
    ) -> list[int]:
        """``fetch`` once per key; a fetch that could not tell (None) is not remembered."""
        key = ((split.topic, split.partition), position, kind)
        if key in self._timestamps:
            self._timestamps.move_to_end(key)
            return self._timestamps[key]
        value = fetch()
        if value is None:
            return []
        self._remember(key, value)
        return value

    def _remember(self, key: tuple[TopicPartitionKey, int, str], timestamps: list[int]) -> None:
        self._timestamps[key] = timestamps
        self._timestamps.move_to_end(key)
        while len(self._timestamps) > TIMESTAMP_CACHE:
            self._timestamps.popitem(last=False)

    def _probe_consumer(self) -> Consumer:
        if self._probe is None:
            self._probe = Consumer({**self.options.consumer_config(), **PROBE_SETTINGS})
        return self._probe

    def _read_before(self, until: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, list[int]]:
        """The timestamps of the records in the last ``LOOK_BACK`` offsets before each
        partition's position, all partitions assigned at once: one fetch round trip for
        them all, where a partition at a time paid one each (8 partitions: ~50 ms). A
        partition not read to its position by the deadline is left out: not known, so not
        remembered as having no record."""
        found: dict[TopicPartitionKey, list[int]] = {tp: [] for tp in until}
        open_ = set(until)
        probe = self._probe_consumer()
        probe.assign([TopicPartition(t, p, max(0, until[(t, p)] - LOOK_BACK)) for t, p in until])
        try:
            deadline = time.monotonic() + PROBE_DEADLINE_S
            while open_ and time.monotonic() < deadline:
                # consume(n) returns once it has n records or at its timeout: a short one
                for message in probe.consume(num_messages=LOOK_BACK * len(until), timeout=0.01):
                    tp = (message.topic(), message.partition())
                    if tp not in open_:
                        continue
                    error = message.error()
                    if error is not None:
                        if error.code() in (KafkaError._PARTITION_EOF, KafkaError._AUTO_OFFSET_RESET):
                            open_.discard(tp)
                        continue
                    offset = message.offset()
                    if offset < until[tp] - LOOK_BACK:
                        continue  # fetched for an earlier assignment of the partition
                    if offset < until[tp]:
                        found[tp].append(message.timestamp()[1])
                    if offset >= until[tp] - 1:  # nothing before the position is left to read
                        open_.discard(tp)
        finally:
            probe.unassign()
        return {tp: timestamps for tp, timestamps in found.items() if tp not in open_}

    def _records(self, split: KafkaPartitionSplit, begin: int, limit: int) -> list[int] | None:
        """Timestamps of the records from ``begin`` on, at most ``limit`` (fewer: the
        partition ends there); None when the deadline passed first (not known)."""
        probe = self._probe_consumer()
        probe.assign([TopicPartition(split.topic, split.partition, begin)])
        found: list[int] = []
        try:
            deadline = time.monotonic() + PROBE_DEADLINE_S
            while time.monotonic() < deadline and len(found) < limit:
                for message in probe.consume(num_messages=limit, timeout=0.5):
                    # Only this partition from ``begin`` on: a record fetched for the probe's
                    # previous assignment (all partitions at once, _read_before) may still come,
                    # and its timestamp, remembered as this position's, would hold alignment.
                    if (message.topic(), message.partition()) != (split.topic, split.partition):
                        continue
                    error = message.error()
                    if error is not None:
                        if error.code() in (KafkaError._PARTITION_EOF, KafkaError._AUTO_OFFSET_RESET):
                            return found
                        continue
                    if message.offset() < begin:
                        continue
                    found.append(message.timestamp()[1])
            return found[:limit] if len(found) >= limit else None
        finally:
            probe.unassign()
