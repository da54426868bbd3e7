"""The ``kafka`` reader for the standalone reader host: one librdkafka consumer, the
assigned partitions added and removed incrementally, no consumer group.

A record's value is a JSON-ready dict ``{topic, partition, offset, timestamp,
timestamp_type, key, value}`` and ``headers`` with ``include_headers``; key, value and header values are text
when they are UTF-8, otherwise ``null`` with the bytes in ``key_base64`` /
``value_base64`` (header values: ``{"base64": ...}``). Its event time is the
record's timestamp.

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

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from sluicegate.api import ColumnarReader, ColumnarResult, InputStatus, ReadResult, Record, SourceError, SourceReader
from sluicegate.api.bytes_json import header_value, put_bytes

from .enumerator import REMOVED_EVENT
from .options import KafkaOptions, headers_in_rows, headers_kept
from .read_path import python_batch
from .split import KafkaPartitionSplit, split_id_of

log = logging.getLogger("sluicegate.connectors.kafka")

POLL_TIMEOUT_S = 0.05
MAX_BATCH = 10_000


class DataLossError(SourceError):
    """Offsets a split still had to read were deleted by retention (fail_on_data_loss)."""

    def __init__(self, topic: str, partition: int, first_lost: int, first_left: int) -> None:
        super().__init__(
            f"data loss in {topic}-{partition}: offsets {first_lost}..{first_left - 1} were deleted before they "
            f"were read (retention?); set fail_on_data_loss=false to skip them"
        )
        self.topic = topic
        self.partition = partition
        self.first_lost = first_lost
        self.first_left = first_left


class KafkaSourceReader(SourceReader[KafkaPartitionSplit], ColumnarReader):
    def __init__(self, options: KafkaOptions) -> None:
        self._options = options
        self._consumer: Consumer | None = None
        self._splits: dict[tuple[str, int], KafkaPartitionSplit] = {}
        self._to_finish: list[str] = []
        self.records_lost = 0

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._options.consumer_config())
        return self._consumer

    def add_splits(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        new = []
        for split in splits:
            key = (split.topic, split.partition)
            self._splits[key] = split.copy()
            if split.finished:
                self._to_finish.append(split.split_id)
            else:
                new.append(TopicPartition(split.topic, split.partition, split.position))
        if new:
            self._client().incremental_assign(new)

    def next_batch(self, max_records: int) -> ReadResult:
        result = ReadResult()
        for split, message in self._read(max_records, result.finished_split_ids):
            offset = message.offset()
            kind, timestamp = message.timestamp()
            value = record_value(message, offset, kind, timestamp, headers_in_rows(self._options))
            result.records.append(Record(split.split_id, value, timestamp))
        result.status = self._status()
        return result

    def next_columns(self, max_records: int) -> ColumnarResult:
        """The records as one batch in Spark's Kafka schema (several partitions in it)."""
        result = ColumnarResult()
        taken = self._read(max_records, result.finished_split_ids)
        if taken:
            rows = [message for _, message in taken]
            result.batch = python_batch(rows, None, None, headers_kept(self._options))
            for split, message in taken:
                timestamp = message.timestamp()[1]
                latest = result.event_times.get(split.split_id)
                if latest is None or timestamp > latest:
                    result.event_times[split.split_id] = timestamp
        result.status = self._status()
        return result

    def _status(self) -> InputStatus:
        return InputStatus.MORE_AVAILABLE if self._splits else InputStatus.NOTHING_AVAILABLE

    def _read(self, max_records: int, finished: list[str]) -> list[tuple[KafkaPartitionSplit, Message]]:
        """The data messages of one consume, each with its split (positions moved on); the
        splits that ended go to ``finished``."""
        self._finish_requested(finished)
        taken: list[tuple[KafkaPartitionSplit, Message]] = []
        if self._splits:
            messages = self._client().consume(num_messages=max(1, min(max_records, MAX_BATCH)), timeout=POLL_TIMEOUT_S)
            for message in messages:
                split = self._accept(message, finished)
                if split is not None:
                    taken.append((split, message))
        return taken

    def _accept(self, message: Message, finished: list[str]) -> KafkaPartitionSplit | None:
        """The split of a data message inside its range, else None (an event handled here)."""
        key = (message.topic(), message.partition())
        split = self._splits.get(key)
        if split is None:
            return None  # left over from a partition that was just removed
        error = message.error()
        if error is not None:
            self._on_error(split, error, message, finished)
            return None
        offset = message.offset()
        if split.stop is not None and offset >= split.stop:
            self._finish(split, finished)
            return None
        split.position = offset + 1
        if split.finished:
            self._finish(split, finished)
        return split

    def _on_error(self, split: KafkaPartitionSplit, error: KafkaError, message: Message, finished: list[str]) -> None:
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            if split.stop is not None and message.offset() >= split.stop:
                split.position = max(split.position, split.stop)
                self._finish(split, finished)
        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            self._on_offset_out_of_range(split)
        elif code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            log.warning("%s: %s; the split ends (partition deleted?)", split.split_id, error.str())
            self._finish(split, finished)
        else:
            log.warning("%s: %s", split.split_id, error.str())

    def _on_offset_out_of_range(self, split: KafkaPartitionSplit) -> None:
        consumer = self._client()
        tp = TopicPartition(split.topic, split.partition)
        low, high = consumer.get_watermark_offsets(tp, timeout=10.0, cached=False)
        if split.position >= low:
            # past the end (a truncated log): nothing to skip; read on from where we are
            log.warning("%s: offset %d out of range [%d, %d)", split.split_id, split.position, low, high)
            consumer.seek(TopicPartition(split.topic, split.partition, min(split.position, high)))
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
        consumer.seek(TopicPartition(split.topic, split.partition, low))

    def _finish(self, split: KafkaPartitionSplit, finished: list[str]) -> None:
        key = (split.topic, split.partition)
        if self._splits.pop(key, None) is None:
            return
        finished.append(split.split_id)
        self._client().incremental_unassign([TopicPartition(split.topic, split.partition)])

    def _finish_requested(self, finished: list[str]) -> None:
        requested, self._to_finish = self._to_finish, []
        by_id = {s.split_id: s for s in self._splits.values()}
        for split_id in requested:
            split = by_id.get(split_id)
            if split is not None:
                self._finish(split, finished)

    def snapshot_state(self, checkpoint_id: int) -> list[KafkaPartitionSplit]:
        return [s.copy() for s in self._splits.values()]

    def remove_splits(self, split_ids: Sequence[str]) -> None:
        gone = set(split_ids)
        removed = [key for key, split in self._splits.items() if split.split_id in gone]
        for key in removed:
            del self._splits[key]
        self._to_finish = [sid for sid in self._to_finish if sid not in gone]
        if removed and self._consumer is not None:
            # messages of these partitions already fetched are dropped by _take (no split)
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in removed])

    def handle_source_event(self, event: Any) -> None:
        if isinstance(event, dict) and event.get("type") == REMOVED_EVENT:
            owned = {s.split_id for s in self._splits.values()}
            ended = [sid for sid in event.get("split_ids", []) if sid in owned]
            if ended:
                log.warning("partitions %s were deleted from the data cluster: their splits end", ended)
                self._to_finish.extend(ended)

    def pause_or_resume_splits(self, to_pause: Sequence[str], to_resume: Sequence[str]) -> None:
        by_id = {s.split_id: s for s in self._splits.values()}
        consumer = self._client()
        pause = [TopicPartition(by_id[i].topic, by_id[i].partition) for i in to_pause if i in by_id]
        resume = [TopicPartition(by_id[i].topic, by_id[i].partition) for i in to_resume if i in by_id]
        if pause:
            consumer.pause(pause)
        if resume:
            consumer.resume(resume)

    def records_to_end(self) -> dict[str, int]:
        """A bounded split: to its stop offset; an unbounded one: to the partition's high
        watermark as the last fetch response reported it (cached: no request), if one came."""
        out: dict[str, int] = {}
        for split in self._splits.values():
            if split.stop is not None:
                out[split.split_id] = max(0, split.stop - split.position)
            elif self._consumer is not None:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(split.topic, split.partition), cached=True
                )
                if high is not None and high >= 0:
                    out[split.split_id] = max(0, high - split.position)
        return out

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


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
