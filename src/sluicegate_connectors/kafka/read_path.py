"""The two ways an executor reads a partition range into Arrow, chosen in one place.

- ``native``: ``sluicegate._native.NativeRangeConsumer`` (native/, Rust): librdkafka's
  messages go into Arrow builders in native code with the GIL released, a whole
  ``pyarrow.RecordBatch`` per call;
- ``python``: confluent-kafka's ``consume()`` and Arrow columns built in Python.

Both are a *range consumer*: ``assign``, ``unassign``, ``watermarks`` and ``fill``, which
takes the assigned partition's records from a position up to an end into one batch and
stops early at an event (librdkafka's error code, text and offset). What an event means
(the end of a partition, data loss, a deleted topic) and how long to wait is decided once,
in ``ranges.RangeReader``, for both.

``read_path()``: native when ``sluicegate._native`` imports, else python; the environment
variable ``SLUICEGATE_KAFKA_READ_PATH=python|native`` forces one for a process, the
connector option ``read_path=python|native`` for a query (native forced but not built is
an error that says how to build it). Logged once per process.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import Any, Protocol

from confluent_kafka import Consumer, Message, TopicPartition

log = logging.getLogger("sluicegate.connectors.kafka")

ENV = "SLUICEGATE_KAFKA_READ_PATH"
PATHS = ("native", "python")
CONSUME_CHUNK = 1_000
"""Messages asked of librdkafka per call: it hands out a few hundred messages at a time
far faster than tens of thousands."""

Event = tuple[int, str, int]
"""librdkafka's error code (``KafkaError`` numbering: -191 is the partition's end), its
text, and the offset it is at (-1: unknown)."""


class RangeConsumer(Protocol):
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


NOT_BUILT = (
    "{what} but this install has no native Kafka reader (sluicegate._native): install a sluicegate wheel "
    "for this platform (docs/packaging.md), or build one from source with cargo (`make install` in a checkout)"
)

_chosen: str | None = None
_chosen_lock = threading.Lock()


def native_available() -> bool:
    try:
        from sluicegate._native import LIBRDKAFKA_VERSION  # noqa: F401
    except ImportError:
        return False
    return True


def read_path(requested: str = "auto") -> str:
    """``native`` or ``python``: ``requested`` (the connector's ``read_path`` option) when
    it names one, else this process's (see the module docstring)."""
    global _chosen
    if requested in PATHS:
        if requested == "native" and not native_available():
            raise RuntimeError(NOT_BUILT.format(what="read_path=native"))
        return requested
    with _chosen_lock:
        forced = os.environ.get(ENV, "").strip().lower()
        if _chosen is not None and (not forced or forced == _chosen):
            return _chosen
        if forced and forced not in PATHS:
            raise ValueError(f"{ENV}={forced!r}: must be one of {', '.join(PATHS)}")
        if forced == "native" and not native_available():
            raise RuntimeError(NOT_BUILT.format(what=f"{ENV}=native"))
        path = forced or ("native" if native_available() else "python")
        if path == "native":
            from sluicegate._native import LIBRDKAFKA_VERSION

            log.info("kafka ranges: native read path (librdkafka %s into Arrow)", LIBRDKAFKA_VERSION)
        else:
            log.info("kafka ranges: python read path (confluent-kafka)%s", " (forced)" if forced else "")
        _chosen = path
        return path


PYTHON_ONLY = frozenset({"logger", "error_cb", "throttle_cb", "stats_cb", "oauth_cb", "on_commit"})
"""confluent-kafka's settings that take Python objects: not librdkafka's."""


def native_config(config: dict[str, Any]) -> list[tuple[str, str]]:
    """librdkafka settings as strings; confluent-kafka's Python-object settings dropped."""
    out = []
    for key, value in sorted(config.items()):
        if key in PYTHON_ONLY or callable(value):
            continue
        out.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return out


def new_range_consumer(config: dict[str, Any], path: str, mode: str = "batch") -> RangeConsumer:
    if path == "native":
        from sluicegate._native import NativeRangeConsumer

        return NativeRangeConsumer(native_config(config), mode)
    return PythonRangeConsumer(config)


class PythonRangeConsumer:
    """A range consumer over confluent-kafka: ``consume()`` and Arrow built in Python."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._consumer = Consumer(config)
        self._pending: deque[Message] = deque()
        """Messages consumed and not used yet (an event ended the last fill)."""

    def assign(self, topic: str, partition: int, offset: int) -> None:
        self._pending.clear()
        self._consumer.assign([TopicPartition(topic, partition, offset)])

    def unassign(self) -> None:
        self._pending.clear()
        self._consumer.unassign()

    def watermarks(self, topic: str, partition: int, timeout_ms: int) -> tuple[int, int]:
        low, high = self._consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout_ms / 1000, cached=False
        )
        return int(low), int(high)

    def fill(
        self,
        topic: str,
        partition: int,
        position: int,
        end: int,
        max_rows: int,
        wait_ms: int = 500,
        headers: bool = True,
    ) -> tuple[Any | None, int, Event | None]:
        rows: list[Message] = []
        event: Event | None = None
        max_rows = max(1, max_rows)
        idle_since = time.monotonic()
        while len(rows) < max_rows and position < end:
            if not self._pending:
                left = wait_ms / 1000 - (time.monotonic() - idle_since)
                if left <= 0:
                    break
                wanted = min(CONSUME_CHUNK, max_rows - len(rows), end - position)
                messages = self._consumer.consume(num_messages=max(1, wanted), timeout=left)
                if messages:
                    idle_since = time.monotonic()
                    self._pending.extend(messages)
                continue
            message = self._pending.popleft()
            error = message.error()
            if error is not None:
                offset = message.offset()
                event = (int(error.code()), str(error.str()), -1 if offset is None else int(offset))
                break
            offset = message.offset()
            assert offset is not None
            if offset >= end:
                position = end
                self._pending.clear()
                break
            rows.append(message)
            position = offset + 1
        return (python_batch(rows, topic, partition, headers) if rows else None), position, event


def python_batch(rows: list[Message], topic: str | None, partition: int | None, headers: bool = True) -> Any:
    """Messages as a batch in Spark's Kafka schema; ``topic`` and ``partition`` None: each
    message's own (a batch of several partitions)."""
    import pyarrow as pa

    from .ranges import arrow_schema

    schema = arrow_schema(headers)
    n = len(rows)
    stamps = [m.timestamp() for m in rows]
    timestamps = pa.array([t[1] * 1000 for t in stamps], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    kinds = pa.array([1 if t[0] == 2 else 0 for t in stamps], pa.int32())
    columns = [
        pa.array([m.key() for m in rows], pa.binary()),
        pa.array([m.value() for m in rows], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n)
        if topic is not None
        else pa.array([m.topic() for m in rows], pa.string()),
        pa.repeat(pa.scalar(partition, pa.int32()), n)
        if partition is not None
        else pa.array([m.partition() for m in rows], pa.int32()),
        pa.array([m.offset() for m in rows], pa.int64()),
        timestamps,
        kinds,
    ]
    if headers:
        header_type = schema.field("headers").type
        values = [m.headers() for m in rows]
        columns.append(
            pa.array(values, header_type) if any(v is not None for v in values) else pa.nulls(n, header_type)
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)
