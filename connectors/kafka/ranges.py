"""Reading offset ranges of partitions into Arrow, for hosts that plan what to read (Spark).

Executor side (``RangeReader``): a Spark executor reads ``[start, end)`` of one
partition. Connecting is the expensive part, so each executor process keeps one
consumer per data-cluster configuration and reuses it for every range it reads,
as Spark's own Kafka source caches its consumers; a range only re-assigns the
consumer to its partition and offset. Records go straight from librdkafka's
messages into Arrow columns with the schema of Spark's Kafka source.

Driver side (``PlanningView``): how far each partition can be read now (its last
stable offset, fetched once per planning round for all partitions in one
request) and the timestamp of the record before a position (the split's event
time there, for watermarks and alignment; fetched once and remembered).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from .cluster import DataCluster, TopicPartitionKey
from .options import KafkaOptions
from .reader import DataLossError
from .split import KafkaPartitionSplit

log = logging.getLogger("sluicegate.connectors.kafka")

_CONSUMERS: dict[tuple[tuple[str, Any], ...], Consumer] = {}
_CONSUMERS_LOCK = threading.Lock()
TIMESTAMP_CACHE = 100_000
CONSUME_CHUNK = 1_000
PROBE_FETCH_WAIT_MS = 10
"""The probe's fetch.wait.max.ms. A probe re-assigns its consumer for every read, and a
new partition's fetch waits for the fetch in flight, which the broker holds up to
fetch.wait.max.ms (librdkafka: 500 ms) once the previous partition has no more data
for it: with the default, every probe read after the first took ~0.5 s."""


def arrow_schema() -> Any:
    """Spark's Kafka source schema, in Arrow."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("timestampType", pa.int32()),
            pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ]
    )


def shared_consumer(options: KafkaOptions) -> Consumer:
    """This process's consumer for the options' data cluster (created once).

    A range only asks for records that exist, so the broker need not hold a fetch
    open for more: librdkafka's default ``fetch.wait.max.ms`` (500 ms) would be paid
    at every switch to another range (unless the user set it)."""
    config = {"fetch.wait.max.ms": 10, **options.consumer_config()}
    key = tuple(sorted((k, str(v)) for k, v in config.items() if k not in ("logger", "error_cb")))
    with _CONSUMERS_LOCK:
        consumer = _CONSUMERS.get(key)
        if consumer is None:
            consumer = Consumer(config)
            _CONSUMERS[key] = consumer
        return consumer


class RangeReader:
    """Reads ``[start, end)`` of a partition with this process's shared consumer."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self.records_lost = 0

    def read(self, split: KafkaPartitionSplit, start: int, end: int, max_rows: int) -> Iterator[Any]:
        """Arrow record batches of at most ``max_rows`` rows, in offset order."""
        import pyarrow as pa

        schema = arrow_schema()
        if end <= start:
            return
        consumer = shared_consumer(self.options)
        consumer.assign([TopicPartition(split.topic, split.partition, start)])
        try:
            position = start
            waited_since = time.monotonic()
            topic = pa.scalar(split.topic, pa.string())
            partition = pa.scalar(split.partition, pa.int32())
            rows: list[Message] = []
            while position < end:
                # Small consume calls, joined into batches of max_rows: librdkafka hands out
                # a few hundred messages at a time far faster than tens of thousands.
                wanted = min(CONSUME_CHUNK, max_rows - len(rows), end - position)
                messages = consumer.consume(num_messages=max(1, wanted), timeout=0.5)
                for message in messages:
                    error = message.error()
                    if error is not None:
                        position = self._on_error(consumer, split, error, message, position, end)
                        continue
                    offset = message.offset()
                    if offset >= end:
                        position = end
                        break
                    rows.append(message)
                    position = offset + 1
                if messages:
                    waited_since = time.monotonic()
                if len(rows) >= max_rows or (rows and position >= end):
                    yield _batch(rows, topic, partition, schema)
                    rows = []
                elif position < end and time.monotonic() - waited_since > self.options.poll_timeout_ms / 1000:
                    raise TimeoutError(
                        f"{split.split_id}: no records for {self.options.poll_timeout_ms} ms while reading offsets "
                        f"{position}..{end - 1} from {self.options.bootstrap_servers} (poll_timeout_ms)"
                    )
        finally:
            consumer.unassign()

    def _on_error(
        self,
        consumer: Consumer,
        split: KafkaPartitionSplit,
        error: KafkaError,
        message: Message,
        position: int,
        end: int,
    ) -> int:
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            # the end of the partition: a range ends at a last stable offset, so what is left
            # below ``end`` are transaction markers, never records
            return end if message.offset() >= end else position
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(split.topic, split.partition), timeout=10.0, cached=False
            )
            if low <= position:
                raise RuntimeError(f"{split.split_id}: offset {position} is out of range: {error.str()}")
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
                consumer.seek(TopicPartition(split.topic, split.partition, skipped_to))
            return skipped_to
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise RuntimeError(f"{split.split_id}: {error.str()} (was the topic deleted?)")
        log.warning("%s: %s", split.split_id, error.str())
        return position


def _batch(rows: list[Message], topic: Any, partition: Any, schema: Any) -> Any:
    import pyarrow as pa

    n = len(rows)
    stamps = [m.timestamp() for m in rows]
    timestamps = pa.array([t[1] * 1000 for t in stamps], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    kinds = pa.array([1 if t[0] == 2 else 0 for t in stamps], pa.int32())
    headers = [m.headers() for m in rows]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.key() for m in rows], pa.binary()),
            pa.array([m.value() for m in rows], pa.binary()),
            pa.repeat(topic, n),
            pa.repeat(partition, n),
            pa.array([m.offset() for m in rows], pa.int64()),
            timestamps,
            kinds,
            pa.array(headers, schema.field("headers").type)
            if any(headers)
            else pa.nulls(n, schema.field("headers").type),
        ],
        schema=schema,
    )


class PlanningView:
    """Driver-side knowledge for planning: end offsets and event times at positions."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._cluster = DataCluster(options)
        self._ends: dict[TopicPartitionKey, int] = {}
        self._timestamps: OrderedDict[tuple[TopicPartitionKey, int, str], list[int]] = OrderedDict()
        self._probe: Consumer | None = None

    def refresh(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        keys = sorted({(s.topic, s.partition) for s in splits})
        if keys:
            self._ends.update(self._cluster.offsets(keys, "latest"))

    def end_offset(self, split: KafkaPartitionSplit) -> int | None:
        return self._ends.get((split.topic, split.partition))

    def timestamp_before(self, split: KafkaPartitionSplit, position: int) -> int | None:
        """The timestamp of the last record before ``position`` (None: there is none).
        It looks back a little: the offsets just before a position may be transaction markers."""
        if position <= 0:
            return None
        records = self._cached(split, position, "before", lambda: self._records(split, max(0, position - 16), position))
        return records[-1] if records else None

    def timestamp_at(self, split: KafkaPartitionSplit, position: int) -> int | None:
        """The timestamp of the first record at or after ``position`` (None: none yet)."""
        end = self.end_offset(split)
        if end is not None and position >= end:
            return None
        records = self._cached(split, position, "at", lambda: self._records(split, position, None, limit=1))
        return records[0] if records else None

    def offset_after(self, split: KafkaPartitionSplit, event_time_ms: int) -> int | None:
        """The first offset whose record's timestamp is past ``event_time_ms`` (None: none yet)."""
        key = (split.topic, split.partition)
        return self._cluster.first_offsets_at([key], event_time_ms + 1)[key]

    def _cached(
        self, split: KafkaPartitionSplit, position: int, kind: str, fetch: Callable[[], list[int]]
    ) -> list[int]:
        key = ((split.topic, split.partition), position, kind)
        if key in self._timestamps:
            self._timestamps.move_to_end(key)
            return self._timestamps[key]
        value = fetch()
        self._timestamps[key] = value
        while len(self._timestamps) > TIMESTAMP_CACHE:
            self._timestamps.popitem(last=False)
        return value

    def _records(self, split: KafkaPartitionSplit, begin: int, until: int | None, limit: int = 16) -> list[int]:
        """Timestamps of the records from ``begin`` (before ``until``), at most ``limit``."""
        if self._probe is None:
            self._probe = Consumer({**self.options.consumer_config(), "fetch.wait.max.ms": PROBE_FETCH_WAIT_MS})
        probe = self._probe
        probe.assign([TopicPartition(split.topic, split.partition, begin)])
        found: list[int] = []
        try:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and len(found) < limit:
                for message in probe.consume(num_messages=limit, timeout=0.5):
                    error = message.error()
                    if error is not None:
                        if error.code() in (KafkaError._PARTITION_EOF, KafkaError._AUTO_OFFSET_RESET):
                            return found
                        continue
                    if until is not None and message.offset() >= until:
                        return found
                    found.append(message.timestamp()[1])
            return found[:limit]
        finally:
            probe.unassign()
