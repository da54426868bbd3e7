"""The records a reader hands to the user's function and writes out, and the Arrow
batches that carry them.

- An *input batch* holds the connector's rows. For ``kafka`` these are the columns of
  Spark's Kafka source (key, value, topic, partition, offset, timestamp, timestampType
  and, with ``include_headers``, headers). A connector that reads records one at a time
  (``sequence``, ``files``) gives ``split_id``, ``key`` (null), ``value`` (the record as
  JSON bytes, or its bytes/text as they are) and ``timestamp`` (its event time):
  ``records_batch``.
- An *output batch* holds what is written: ``key``, ``value``, ``headers`` and
  ``timestamp`` (``OUTPUT_SCHEMA``). ``output_batch`` brings a user's batch to it: only
  ``value`` is required, text columns become bytes.
- ``Message`` is one record for a per-record function, read (with topic, partition and
  offset) or made by the function.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from sluicegate.api.reader import Record

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
OUTPUT_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
        pa.field("timestamp", TIMESTAMP_TYPE),
    ]
)
RECORDS_SCHEMA = pa.schema(
    [
        pa.field("split_id", pa.string()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", TIMESTAMP_TYPE),
    ]
)

Header = tuple[str, bytes | None]


_SAME: Any = object()


@dataclass(slots=True)
class Message:
    """One record. A function returns a read one changed (``message.replace(value=...)``)
    or a new one (``Message(value=..., key=...)``); topic, partition and offset say where
    a read one came from (None for one the function made: they are not written)."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None
    """None: the broker stamps it when written."""
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None

    def json(self) -> Any:
        """The value parsed as JSON."""
        if self.value is None:
            return None
        return orjson.loads(self.value)

    def replace(
        self, *, value: Any = _SAME, key: Any = _SAME, headers: Any = _SAME, timestamp_ms: Any = _SAME
    ) -> Message:
        """A copy with some fields changed; a ``value`` or ``key`` given as text or a JSON-ready
        object (not bytes) is encoded (text as UTF-8, anything else as JSON). Written out
        (not ``dataclasses.replace``): this runs once per record."""
        return Message(
            self.value if value is _SAME else to_bytes(value),
            self.key if key is _SAME else to_bytes(key),
            self.headers if headers is _SAME else tuple(headers),
            self.timestamp_ms if timestamp_ms is _SAME else timestamp_ms,
            self.topic,
            self.partition,
            self.offset,
        )

    def where(self) -> str:
        """Where the record was read, for messages about it."""
        if self.topic is None:
            return "a record"
        return f"{self.topic}[{self.partition}]@{self.offset}"


def to_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return orjson.dumps(value, default=str)


def messages(batch: pa.RecordBatch) -> list[Message]:
    """The rows of an input batch (kafka's schema or ``RECORDS_SCHEMA``) as messages."""
    n = batch.num_rows
    names = set(batch.schema.names)

    def column(name: str) -> list[Any]:
        return batch.column(name).to_pylist() if name in names else [None] * n

    stamps = batch.column("timestamp").cast(pa.int64()).to_pylist() if "timestamp" in names else [None] * n
    return [
        Message(value, key, headers, None if stamp is None else stamp // 1000, topic, partition, offset)
        for value, key, headers, stamp, topic, partition, offset in zip(
            column("value"),
            column("key"),
            header_pairs(batch, n),
            stamps,
            column("topic"),
            column("partition"),
            column("offset"),
            strict=True,
        )
    ]


def header_pairs(batch: pa.RecordBatch, n: int) -> list[tuple[Header, ...]]:
    """Each row's headers as (name, value) pairs, from the flattened column (dicts per
    header would cost more than the rest of the row)."""
    if "headers" not in batch.schema.names:
        return [()] * n
    column = batch.column("headers")
    if column.null_count == n:
        return [()] * n
    offsets = column.offsets.to_pylist()
    flat = column.values
    names, values = flat.field("key").to_pylist(), flat.field("value").to_pylist()
    valid = column.is_valid().to_pylist()
    return [
        tuple(zip(names[offsets[i] : offsets[i + 1]], values[offsets[i] : offsets[i + 1]], strict=True))
        if valid[i]
        else ()
        for i in range(n)
    ]


def messages_batch(out: Sequence[Message]) -> pa.RecordBatch:
    """Messages as an output batch."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.key for m in out], pa.binary()),
            pa.array([m.value for m in out], pa.binary()),
            _header_column(out),
            pa.array([None if m.timestamp_ms is None else m.timestamp_ms * 1000 for m in out], pa.int64()).cast(
                TIMESTAMP_TYPE
            ),
        ],
        schema=OUTPUT_SCHEMA,
    )


def _header_column(out: Sequence[Message]) -> pa.Array:
    """The headers of messages as one list column, built flat (no dict per header)."""
    offsets, names, values = [0], [], []
    for m in out:
        for name, value in m.headers:
            names.append(name)
            values.append(value)
        offsets.append(len(names))
    if not names:
        return pa.nulls(len(out), HEADER_TYPE)
    flat = pa.StructArray.from_arrays(
        [pa.array(names, pa.string()), pa.array(values, pa.binary())], fields=list(HEADER_TYPE.value_type)
    )
    empty = pa.array([not m.headers for m in out])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat, type=HEADER_TYPE, mask=empty)


class NotAnOutputBatch(TypeError):
    """A batch function returned something that cannot be written."""


def output_batch(batch: Any) -> pa.RecordBatch:
    """A function's (or the connector's) batch reduced to ``OUTPUT_SCHEMA``: ``value`` is
    required; ``key``, ``headers`` and ``timestamp`` are taken when present (else null);
    other columns are dropped. Text becomes UTF-8 bytes; a timestamp of another unit or
    zone is converted; an integer timestamp is epoch milliseconds."""
    if isinstance(batch, pa.Table):
        whole = batch.combine_chunks().to_batches()
        batch = whole[0] if whole else pa.RecordBatch.from_pylist([], batch.schema)
    if not isinstance(batch, pa.RecordBatch):
        raise NotAnOutputBatch(f"expected a pyarrow.RecordBatch, got {type(batch).__name__}")
    names = batch.schema.names
    if "value" not in names:
        raise NotAnOutputBatch(f"the batch has no value column (its columns: {', '.join(names) or 'none'})")
    n = batch.num_rows
    columns = [
        _binary(batch, "key", n),
        _binary(batch, "value", n),
        batch.column("headers").cast(HEADER_TYPE) if "headers" in names else pa.nulls(n, HEADER_TYPE),  # null casts
        _timestamp(batch, n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=OUTPUT_SCHEMA)


def _binary(batch: pa.RecordBatch, name: str, n: int) -> pa.Array:
    if name not in batch.schema.names:
        return pa.nulls(n, pa.binary())
    column = batch.column(name)
    if pa.types.is_null(column.type):  # all None, as pyarrow infers it
        return pa.nulls(n, pa.binary())
    if pa.types.is_binary(column.type):
        return column
    if (
        pa.types.is_string(column.type)
        or pa.types.is_large_string(column.type)
        or pa.types.is_large_binary(column.type)
    ):
        return column.cast(pa.binary())
    raise NotAnOutputBatch(f"column {name} is {column.type}: expected bytes or text")


def _timestamp(batch: pa.RecordBatch, n: int) -> pa.Array:
    if "timestamp" not in batch.schema.names:
        return pa.nulls(n, TIMESTAMP_TYPE)
    column = batch.column("timestamp")
    if pa.types.is_null(column.type):
        return pa.nulls(n, TIMESTAMP_TYPE)
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.timestamp("us", tz=column.type.tz or "UTC")).cast(TIMESTAMP_TYPE)
    if pa.types.is_integer(column.type):
        return pc.multiply(column.cast(pa.int64()), 1000).cast(TIMESTAMP_TYPE)
    raise NotAnOutputBatch(f"column timestamp is {column.type}: expected a timestamp or epoch milliseconds")


def records_batch(records: Iterable[Record]) -> pa.RecordBatch:
    """Records of a connector that reads one at a time, as an input batch (``RECORDS_SCHEMA``)."""
    rows = list(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.split_id for r in rows], pa.string()),
            pa.nulls(len(rows), pa.binary()),
            pa.array([to_bytes(r.value) for r in rows], pa.binary()),
            pa.array([r.event_time_ms * 1000 if r.event_time_ms is not None else None for r in rows], pa.int64()).cast(
                TIMESTAMP_TYPE
            ),
        ],
        schema=RECORDS_SCHEMA,
    )
