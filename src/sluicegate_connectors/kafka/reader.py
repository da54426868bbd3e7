"""The ``kafka`` reader for the standalone reader host: one consumer, the assigned
partitions added and removed incrementally, no consumer group.

Two ways to hand records over, one of them for a reader's whole life:

- ``next_columns``: one Arrow batch in Spark's Kafka schema, several partitions in it,
  read on the native path when it is built (partitions.py; the host's path when it
  writes records);
- ``next_batch``: a ``Record`` per message whose value is a JSON-ready dict ``{topic,
  partition, offset, timestamp, timestamp_type, key, value}`` and ``headers`` with
  ``include_headers`` (the JSON envelope); key, value and header values are text when
  they are UTF-8, otherwise ``null`` with the bytes in ``key_base64`` / ``value_base64``
  (header values: ``{"base64": ...}``). Its event time is the record's timestamp.

Ends of splits: a bounded split ends when a record at or past its stop offset
arrives, or the consumer reaches the end of the partition at or past it (the last
offsets before ``stop`` may be transaction markers). Retention that deleted
offsets not read yet is data loss: with ``fail_on_data_loss`` the reader raises
``DataLossError`` naming topic, partition and offsets; without, it warns, counts
and goes on from the earliest offset left. A partition deleted from the cluster
ends its split with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, Message

from sluicegate.api import ColumnarReader, ColumnarResult, InputStatus, ReadResult, Record, SourceError, SourceReader
from sluicegate.api.bytes_json import header_value, put_bytes
from sluicegate.api.errors import option_named

from .enumerator import REMOVED_EVENT
from .group_commits import GroupOffsetCommitter
from .options import KafkaOptions, headers_in_rows, headers_kept
from .partitions import PartitionsConsumer, PythonPartitionsConsumer, new_partitions_consumer
from .read_path import read_path
from .split import KafkaPartitionSplit, split_id_of

log = logging.getLogger("sluicegate.connectors.kafka")

POLL_WAIT_MS = 50
MAX_BATCH = 10_000
Partition = tuple[str, int]


class DataLossError(SourceError):
    """Offsets a split still had to read were deleted by retention (fail_on_data_loss)."""

    def __init__(self, topic: str, partition: int, first_lost: int, first_left: int) -> None:
        super().__init__(
            f"data loss in {topic}-{partition}: offsets {first_lost}..{first_left - 1} were deleted before they "
            f"were read (retention?); set {option_named('fail_on_data_loss', 'false')} to skip them"
        )
        self.topic = topic
        self.partition = partition
        self.first_lost = first_lost
        self.first_left = first_left


class KafkaSourceReader(SourceReader[KafkaPartitionSplit], ColumnarReader):
    def __init__(self, options: KafkaOptions) -> None:
        self._options = options
        self._consumer: PartitionsConsumer | None = None
        """Made at the first read, of the kind that read needs (``_client``)."""
        self._columns: bool | None = None
        self._splits: dict[Partition, KafkaPartitionSplit] = {}
        self._paused: set[Partition] = set()
        self._to_finish: list[str] = []
        self.records_lost = 0
        self._group = GroupOffsetCommitter(options) if options.commit_group is not None else None
        self._snapshots: dict[int, dict[Partition, int]] = {}
        """Positions of the checkpoints taken and not yet durable (``commit_offsets_to_group``)."""
        self._ended: dict[Partition, int] = {}
        """Last positions of the splits finished since, until a durable checkpoint held them:
        a finished split is in no snapshot (``commit_offsets_to_group``)."""

    def _client(self, columns: bool | None = None) -> PartitionsConsumer:
        """The consumer; the first read (``columns`` given) makes it and assigns the splits
        added so far, at their positions (and pauses the paused ones)."""
        if self._consumer is None:
            if columns is None:
                raise RuntimeError("the kafka reader's consumer is made by its first read")
            config = self._options.consumer_config()
            path = read_path(self._options.read_path) if columns else "python"
            self._consumer = new_partitions_consumer(config, path)
            if columns:
                log.info("kafka: reading records as Arrow batches on the %s read path", path)
            self._columns = columns
            open_splits = [s for s in self._splits.values() if not s.finished]
            if open_splits:
                self._consumer.assign([(s.topic, s.partition, s.position) for s in open_splits])
            if self._paused:
                self._consumer.pause(sorted(self._paused))
        elif columns is not None and columns != self._columns:
            raise RuntimeError("a kafka reader hands records over as columns or as records, not both")
        return self._consumer

    def add_splits(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        new = []
        for split in splits:
            key = (split.topic, split.partition)
            self._splits[key] = split.copy()
            if split.finished:
                self._to_finish.append(split.split_id)
            else:
                new.append((split.topic, split.partition, split.position))
        if new and self._consumer is not None:
            self._consumer.assign(new)

    def next_batch(self, max_records: int) -> ReadResult:
        result = ReadResult()
        self._finish_requested(result.finished_split_ids)
        if self._splits:
            consumer = self._client(columns=False)
            assert isinstance(consumer, PythonPartitionsConsumer)
            for message in consumer.messages(min(max_records, MAX_BATCH), POLL_WAIT_MS):
                split = self._accept(message, result.finished_split_ids)
                if split is not None:
                    offset = message.offset()
                    kind, timestamp = message.timestamp()
                    value = record_value(message, offset, kind, timestamp, headers_in_rows(self._options))
                    result.records.append(Record(split.split_id, value, timestamp))
        result.status = self._status()
        return result

    def split_ids_of(self, batch: pa.RecordBatch) -> list[str]:
        """Kafka rows name their topic and partition, which are the split."""
        topics, partitions = batch.column("topic").to_pylist(), batch.column("partition").to_pylist()
        return [split_id_of(t, p) for t, p in zip(topics, partitions, strict=True)]

    def next_columns(self, max_records: int) -> ColumnarResult:
        """The records as one batch in Spark's Kafka schema (several partitions in it)."""
        result = ColumnarResult()
        self._finish_requested(result.finished_split_ids)
        if self._splits:
            consumer = self._client(columns=True)
            batch, events = consumer.fill(min(max_records, MAX_BATCH), POLL_WAIT_MS, headers_kept(self._options))
            if batch is not None:
                result.batch = self._take_columns(batch, result)
            for topic, partition, code, text, offset in events:
                split = self._splits.get((topic, partition))
                if split is not None:
                    self._on_event(split, code, text, offset, result.finished_split_ids)
                elif not topic:
                    log.warning("the kafka consumer: %s", text)
        result.status = self._status()
        return result

    def _take_columns(self, batch: pa.RecordBatch, result: ColumnarResult) -> pa.RecordBatch | None:
        """Positions, event times and ends of the splits in ``batch``, done per partition
        (vectorised): rows at or past a split's stop offset, or of a partition no longer
        owned, are left out."""
        summary = _per_partition(batch)
        ended = [key for key, (_, last, _) in summary.items() if self._past_stop(key, last)]
        gone = [key for key in summary if key not in self._splits]
        if ended or gone:
            batch = batch.filter(self._keep_mask(batch, ended, gone))
            summary = _per_partition(batch)
        for key, (_, last, latest_us) in summary.items():
            taken = self._splits[key]
            taken.position = last + 1
            result.event_times[taken.split_id] = latest_us // 1000
        for key in [*ended, *summary]:
            split = self._splits.get(key)
            if split is not None and (key in ended or split.finished):
                self._finish(split, result.finished_split_ids)
        return batch if batch.num_rows else None

    def _past_stop(self, key: Partition, last_offset: int) -> bool:
        split = self._splits.get(key)
        return split is not None and split.stop is not None and last_offset >= split.stop

    def _keep_mask(self, batch: pa.RecordBatch, ended: list[Partition], gone: list[Partition]) -> pa.Array:
        keep = pa.array([True] * batch.num_rows)
        for topic, partition in [*ended, *gone]:
            here = pc.and_(pc.equal(batch.column("topic"), topic), pc.equal(batch.column("partition"), partition))
            split = self._splits.get((topic, partition))
            drop = (
                here
                if split is None or split.stop is None
                else pc.and_(here, pc.greater_equal(batch.column("offset"), split.stop))
            )
            keep = pc.and_(keep, pc.invert(drop))
        return keep

    def _status(self) -> InputStatus:
        return InputStatus.MORE_AVAILABLE if self._splits else InputStatus.NOTHING_AVAILABLE

    def _accept(self, message: Message, finished: list[str]) -> KafkaPartitionSplit | None:
        """The split of a data message inside its range, else None (an event handled here)."""
        key = (message.topic(), message.partition())
        split = self._splits.get(key)
        if split is None:
            return None  # left over from a partition that was just removed
        error = message.error()
        if error is not None:
            offset = message.offset()
            self._on_event(split, error.code(), error.str(), -1 if offset is None else offset, finished)
            return None
        offset = message.offset()
        if split.stop is not None and offset >= split.stop:
            self._finish(split, finished)
            return None
        split.position = offset + 1
        if split.finished:
            self._finish(split, finished)
        return split

    def _on_event(self, split: KafkaPartitionSplit, code: int, text: str, offset: int, finished: list[str]) -> None:
        if code == KafkaError._PARTITION_EOF:
            if split.stop is not None and offset >= split.stop:
                split.position = max(split.position, split.stop)
                self._finish(split, finished)
        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            self._on_offset_out_of_range(split)
        elif code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            log.warning("%s: %s; the split ends (partition deleted?)", split.split_id, text)
            self._finish(split, finished)
        else:
            log.warning("%s: %s", split.split_id, text)

    def _on_offset_out_of_range(self, split: KafkaPartitionSplit) -> None:
        consumer = self._client()
        low, high = consumer.watermarks(split.topic, split.partition, 10_000)
        if split.position >= low:
            # past the end (a truncated log): nothing to skip; read on from where we are
            log.warning("%s: offset %d out of range [%d, %d)", split.split_id, split.position, low, high)
            consumer.seek(split.topic, split.partition, min(split.position, high))
            return
        lost = low - split.position
        if self._options.fail_on_data_loss:
            raise DataLossError(split.topic, split.partition, split.position, low)
        self.records_lost += lost
        log.warning(
            "data loss in %s: offsets %d..%d were deleted before they were read; skipping to %d "
            "(fail_on_data_loss=false)",
            split.split_id,
            split.position,
            low - 1,
            low,
        )
        split.position = low
        consumer.seek(split.topic, split.partition, low)

    def _finish(self, split: KafkaPartitionSplit, finished: list[str]) -> None:
        key = (split.topic, split.partition)
        if self._splits.pop(key, None) is None:
            return
        if self._group is not None:
            self._ended[key] = split.position if split.stop is None else max(split.position, split.stop)
        finished.append(split.split_id)
        self._paused.discard(key)
        if self._consumer is not None:
            self._consumer.unassign([key])

    def _finish_requested(self, finished: list[str]) -> None:
        requested, self._to_finish = self._to_finish, []
        by_id = {s.split_id: s for s in self._splits.values()}
        for split_id in requested:
            split = by_id.get(split_id)
            if split is not None:
                self._finish(split, finished)

    def snapshot_state(self, checkpoint_id: int) -> list[KafkaPartitionSplit]:
        if self._group is not None:
            self._snapshots[checkpoint_id] = {**self._ended, **{key: s.position for key, s in self._splits.items()}}
        return [s.copy() for s in self._splits.values()]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The positions of ``checkpoint_id`` are durable: to the lag group, if any (the
        checkpoints before it are superseded)."""
        if self._group is None:
            return
        positions = self._snapshots.get(checkpoint_id)
        self._snapshots = {c: p for c, p in self._snapshots.items() if c > checkpoint_id}
        if positions is not None:
            self._group.commit(positions)
            self._ended = {k: p for k, p in self._ended.items() if positions.get(k) != p}

    def remove_splits(self, split_ids: Sequence[str]) -> None:
        gone = set(split_ids)
        removed = [key for key, split in self._splits.items() if split.split_id in gone]
        for key in removed:
            del self._splits[key]
            self._paused.discard(key)
        self._to_finish = [sid for sid in self._to_finish if sid not in gone]
        if removed and self._consumer is not None:
            # records of these partitions already fetched are left out (no split)
            self._consumer.unassign(removed)

    def handle_source_event(self, event: Any) -> None:
        if isinstance(event, dict) and event.get("type") == REMOVED_EVENT:
            owned = {s.split_id for s in self._splits.values()}
            ended = [sid for sid in event.get("split_ids", []) if sid in owned]
            if ended:
                log.warning("partitions %s were deleted from the data cluster: their splits end", ended)
                self._to_finish.extend(ended)

    def pause_or_resume_splits(self, to_pause: Sequence[str], to_resume: Sequence[str]) -> None:
        by_id = {s.split_id: (s.topic, s.partition) for s in self._splits.values()}
        pause = [by_id[i] for i in to_pause if i in by_id]
        resume = [by_id[i] for i in to_resume if i in by_id]
        self._paused |= set(pause)
        self._paused -= set(resume)
        if self._consumer is not None:
            if pause:
                self._consumer.pause(pause)
            if resume:
                self._consumer.resume(resume)

    def records_to_end(self) -> dict[str, int]:
        """A bounded split: to its stop offset; an unbounded one: to the partition's high
        watermark as the last fetch response reported it (cached: no request), if one came."""
        out: dict[str, int] = {}
        for split in self._splits.values():
            if split.stop is not None:
                out[split.split_id] = max(0, split.stop - split.position)
            elif self._consumer is not None:
                _, high = self._consumer.watermarks(split.topic, split.partition, cached=True)
                if high >= 0:
                    out[split.split_id] = max(0, high - split.position)
        return out

    def close(self) -> None:
        if self._group is not None:
            self._group.close()
        if isinstance(self._consumer, PythonPartitionsConsumer):
            self._consumer.close()
        self._consumer = None  # the native consumer closes when dropped


def _per_partition(batch: pa.RecordBatch) -> dict[Partition, tuple[int, int, int]]:
    """(topic, partition) -> (first offset, last offset, latest timestamp in µs) of its rows."""
    table = pa.table(
        {
            "topic": batch.column("topic"),
            "partition": batch.column("partition"),
            "offset": batch.column("offset"),
            "ts": batch.column("timestamp").cast(pa.int64()),
        }
    )
    groups = table.group_by(["topic", "partition"]).aggregate([("offset", "min"), ("offset", "max"), ("ts", "max")])
    return {
        (row["topic"], row["partition"]): (row["offset_min"], row["offset_max"], row["ts_max"])
        for row in groups.to_pylist()
    }


def record_value(
    message: Message, offset: int, kind: int, timestamp: int, include_headers: bool = True
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": offset,
        "timestamp": timestamp,
        "timestamp_type": spark_timestamp_type(kind),
    }
    put_bytes(out, "key", message.key())
    put_bytes(out, "value", message.value())
    if include_headers:
        headers = message.headers()
        out["headers"] = None if headers is None else [[k, header_value(v)] for k, v in headers]
    return out


def spark_timestamp_type(librdkafka_kind: int) -> int:
    """Kafka's own numbering, as Spark's Kafka source shows it: 0 CreateTime, 1 LogAppendTime."""
    return 1 if librdkafka_kind == 2 else 0


__all__ = ["DataLossError", "KafkaSourceReader", "record_value", "split_id_of"]
