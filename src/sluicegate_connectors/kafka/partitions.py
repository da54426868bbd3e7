"""The standalone reader's consumer of several assigned partitions, on either read path.

- ``native``: ``sluicegate._native.NativePartitionsConsumer`` (native/src/partitions.rs):
  librdkafka's messages into one Arrow batch in native code, the GIL released;
- ``python``: confluent-kafka's ``consume()``, the batch built in Python. It also hands
  out the messages themselves (``messages``), which the JSON envelope needs.

Both take (topic, partition, offset) assignments incrementally and return, from
``fill``, one batch in Spark's Kafka schema with a topic and partition per row, plus the
messages that were errors as events (topic, partition, librdkafka's code and text,
offset). What an event means is decided once, in reader.py. The path is chosen as for
Spark's ranges (read_path.py: the ``read_path`` option, ``SLUICEGATE_KAFKA_READ_PATH``).
"""

from __future__ import annotations

from typing import Any, Protocol

from confluent_kafka import Consumer, Message, TopicPartition

from .read_path import native_config, python_batch

PartitionEvent = tuple[str, int, int, str, int]
"""A message that is an error: topic, partition, librdkafka's code (``KafkaError``
numbering: -191 is a partition's end), its text, and the offset (-1: unknown)."""


class PartitionsConsumer(Protocol):
    def assign(self, parts: list[tuple[str, int, int]]) -> None: ...

    def unassign(self, parts: list[tuple[str, int]]) -> None: ...

    def pause(self, parts: list[tuple[str, int]]) -> None: ...

    def resume(self, parts: list[tuple[str, int]]) -> None: ...

    def seek(self, topic: str, partition: int, offset: int) -> None: ...

    def watermarks(
        self, topic: str, partition: int, timeout_ms: int = 10_000, cached: bool = False
    ) -> tuple[int, int]: ...

    def fill(
        self, max_rows: int, wait_ms: int = 50, headers: bool = True
    ) -> tuple[Any | None, list[PartitionEvent]]: ...


class PythonPartitionsConsumer:
    """Over confluent-kafka."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.consumer = Consumer(config)

    def assign(self, parts: list[tuple[str, int, int]]) -> None:
        self.consumer.incremental_assign([TopicPartition(t, p, o) for t, p, o in parts])

    def unassign(self, parts: list[tuple[str, int]]) -> None:
        self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in parts])

    def pause(self, parts: list[tuple[str, int]]) -> None:
        self.consumer.pause([TopicPartition(t, p) for t, p in parts])

    def resume(self, parts: list[tuple[str, int]]) -> None:
        self.consumer.resume([TopicPartition(t, p) for t, p in parts])

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self.consumer.seek(TopicPartition(topic, partition, offset))

    def watermarks(self, topic: str, partition: int, timeout_ms: int = 10_000, cached: bool = False) -> tuple[int, int]:
        tp = TopicPartition(topic, partition)
        if cached:
            low, high = self.consumer.get_watermark_offsets(tp, cached=True)
        else:
            low, high = self.consumer.get_watermark_offsets(tp, timeout=timeout_ms / 1000, cached=False)
        return (-1 if low is None else int(low)), (-1 if high is None else int(high))

    def messages(self, max_rows: int, wait_ms: int = 50) -> list[Message]:
        return list(self.consumer.consume(num_messages=max(1, max_rows), timeout=wait_ms / 1000))

    def fill(self, max_rows: int, wait_ms: int = 50, headers: bool = True) -> tuple[Any | None, list[PartitionEvent]]:
        rows: list[Message] = []
        events: list[PartitionEvent] = []
        for message in self.messages(max_rows, wait_ms):
            error = message.error()
            if error is None:
                rows.append(message)
                continue
            offset = message.offset()
            events.append(
                (
                    message.topic() or "",
                    -1 if message.partition() is None else int(message.partition()),
                    int(error.code()),
                    str(error.str()),
                    -1 if offset is None else int(offset),
                )
            )
        return (python_batch(rows, None, None, headers) if rows else None), events

    def close(self) -> None:
        """(The native consumer closes when it is dropped.)"""
        self.consumer.close()


def new_partitions_consumer(config: dict[str, Any], path: str) -> PartitionsConsumer:
    if path == "native":
        from sluicegate._native import NativePartitionsConsumer

        native: PartitionsConsumer = NativePartitionsConsumer(native_config(config))
        return native
    return PythonPartitionsConsumer(config)
