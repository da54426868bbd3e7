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

import base64
import logging
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from sluicegate.api import InputStatus, ReadResult, Record, SourceError, SourceReader

from .enumerator import REMOVED_EVENT
from .options import KafkaOptions
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


class KafkaSourceReader(SourceReader[KafkaPartitionSplit]):
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
        self._finish_requested(result)
        if self._splits:
            messages = self._client().consume(num_messages=max(1, min(max_records, MAX_BATCH)), timeout=POLL_TIMEOUT_S)
            for message in messages:
                self._take(message, result)
        result.status = InputStatus.MORE_AVAILABLE if self._splits else InputStatus.NOTHING_AVAILABLE
        return result

    def _take(self, message: Message, result: ReadResult) -> None:
        key = (message.topic(), message.partition())
        split = self._splits.get(key)
        if split is None:
            return  # left over from a partition that was just removed
        error = message.error()
        if error is not None:
            self._on_error(split, error, message, result)
            return
        offset = message.offset()
        if split.stop is not None and offset >= split.stop:
            self._finish(split, result)
            return
        kind, timestamp = message.timestamp()
        result.records.append(
            Record(
                split.split_id, record_value(message, offset, kind, timestamp, self._options.include_headers), timestamp
            )
        )
        split.position = offset + 1
        if split.finished:
            self._finish(split, result)

    def _on_error(self, split: KafkaPartitionSplit, error: KafkaError, message: Message, result: ReadResult) -> None:
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            if split.stop is not None and message.offset() >= split.stop:
                split.position = max(split.position, split.stop)
                self._finish(split, result)
        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            self._on_offset_out_of_range(split)
        elif code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            log.warning("%s: %s; the split ends (partition deleted?)", split.split_id, error.str())
            self._finish(split, result)
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

    def _finish(self, split: KafkaPartitionSplit, result: ReadResult) -> None:
        key = (split.topic, split.partition)
        if self._splits.pop(key, None) is None:
            return
        result.finished_split_ids.append(split.split_id)
        self._client().incremental_unassign([TopicPartition(split.topic, split.partition)])

    def _finish_requested(self, result: ReadResult) -> None:
        requested, self._to_finish = self._to_finish, []
        by_id = {s.split_id: s for s in self._splits.values()}
        for split_id in requested:
            split = by_id.get(split_id)
            if split is not None:
                self._finish(split, result)

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
    _put_bytes(out, "key", message.key())
    _put_bytes(out, "value", message.value())
    if include_headers:
        headers = message.headers()
        out["headers"] = None if headers is None else [[k, _text_or_b64(v)] for k, v in headers]
    return out


def spark_timestamp_type(librdkafka_kind: int) -> int:
    """Kafka's own numbering, as Spark's Kafka source shows it: 0 CreateTime, 1 LogAppendTime."""
    return 1 if librdkafka_kind == 2 else 0


def _put_bytes(out: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        out[name] = None
        out[f"{name}_base64"] = base64.b64encode(data).decode("ascii")


def _text_or_b64(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


__all__ = ["DataLossError", "KafkaSourceReader", "record_value", "split_id_of"]
