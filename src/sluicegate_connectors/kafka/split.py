"""A split of the ``kafka`` connector is one topic partition; its position is the
next offset to read, and a bounded split stops before ``stop``.

Offsets count records only roughly: transaction markers and compaction leave
gaps, so ``[a, b)`` holds at most ``b - a`` records (what the position-range API
asks) and a split is finished once its position reaches ``stop``, whether or not
a record sits at ``stop - 1``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluicegate.api.split import WireSplit


@dataclass(slots=True)
class KafkaPartitionSplit:
    topic: str
    partition: int
    position: int
    """The next offset to read."""
    stop: int | None = None
    """Exclusive end offset of a bounded split; None: unbounded."""

    @property
    def split_id(self) -> str:
        return split_id_of(self.topic, self.partition)

    @property
    def finished(self) -> bool:
        return self.stop is not None and self.position >= self.stop

    def copy(self, position: int | None = None) -> KafkaPartitionSplit:
        return KafkaPartitionSplit(
            self.topic, self.partition, self.position if position is None else position, self.stop
        )


def split_id_of(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class KafkaSplitCodec:
    def to_wire(self, split: KafkaPartitionSplit) -> WireSplit:
        return {
            "split_id": split.split_id,
            "topic": split.topic,
            "partition": split.partition,
            "position": split.position,
            "stop": split.stop,
        }

    def from_wire(self, data: Mapping[str, Any]) -> KafkaPartitionSplit:
        stop = data.get("stop")
        return KafkaPartitionSplit(str(data["topic"]), int(data["partition"]), int(data["position"]), stop)


def partition_owner_key(split: Any) -> int:
    """Flink's KafkaSourceEnumerator rule: the partitions of a topic go to consecutive
    subtasks from a start that depends on the topic, so several topics spread evenly.
    (CRC-32 and not ``hash()``: Python salts string hashes per process.)"""
    start = (zlib.crc32(split.topic.encode()) * 31) & 0x7FFFFFFF
    return int(start + split.partition)
