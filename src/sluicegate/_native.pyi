"""sluicegate's native Kafka parts: the range reader (native/src/lib.rs), partitions (partitions.rs), partitioner."""

from typing import Any

LIBRDKAFKA_VERSION: str

Event = tuple[int, str, int]
"""librdkafka's error code (-191: partition EOF), its text, the message's offset (-1: unknown)."""

class NativeRangeConsumer:
    def __init__(self, config: list[tuple[str, str]], mode: str = "batch") -> None: ...
    def assign(self, topic: str, partition: int, offset: int) -> None: ...
    def unassign(self) -> None: ...
    def watermarks(self, topic: str, partition: int, timeout_ms: int) -> tuple[int, int]: ...
    def fill(
        self,
        topic: str,
        partition: int,
        position: int,
        end: int,
        max_rows: int,
        wait_ms: int = 500,
        headers: bool = True,
    ) -> tuple[Any | None, int, Event | None]: ...

def key_partitions(keys: Any, partitions: int) -> Any:
    """Kafka's default partitioner (murmur2) for each key of a ``pyarrow.BinaryArray``:
    an ``Int32Array``, null for a null key."""

PartitionEvent = tuple[str, int, int, str, int]
"""topic, partition, librdkafka's error code, its text, the offset (-1: unknown)."""

class NativePartitionsConsumer:
    def __init__(self, config: list[tuple[str, str]]) -> None: ...
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
