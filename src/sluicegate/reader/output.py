"""Where a reader host writes the records it reads (after the user's function, if any).

- ``kafka:TOPIC``: through the host's transactional producer, inside the transaction that
  also carries the reader's checkpoint and its ``CheckpointAck``: data, state and ack
  commit atomically (exactly-once). The topic must exist (sluicegate never creates it):
  the host waits ``--topic-wait-timeout-s`` for it, then exits 2 saying so.
- ``jsonl:PATH``: one JSON line per record, appended to PATH and flushed and fsynced
  before each checkpoint commits (at-least-once: the records after the last checkpoint
  may be written again after a crash).

What is written (``--output-format``):

- ``record`` (kafka's default): the record itself, key, value, headers and timestamp,
  batched (to Kafka: partitioned by key as Kafka's default partitioner does, a keyless
  batch to one partition, the next batch to the next). To jsonl:
  ``{"key", "value", "headers", "timestamp"}`` with bytes as text or base64
  (api/bytes_json.py);
- ``envelope`` (jsonl's default): sluicegate's JSON wrapper
  ``{"subtask", "split_id", "value", "event_time_ms"}`` (for kafka keyed by the split id),
  ``value`` being the connector's JSON of the record. No user function with it.
"""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import orjson
import pyarrow as pa

from sluicegate.api.bytes_json import header_value, put_bytes
from sluicegate.api.errors import ConfigError
from sluicegate.api.reader import Record
from sluicegate.kafka.partitioner import key_partitions
from sluicegate.reader.records import Message, header_pairs, messages
from sluicegate.reader.user_code import load_callable

OUTPUT_SETTING = "--output"


FORMAT_SETTING = "--output-format"
FORMATS = ("record", "envelope")
DEFAULT_FORMAT = {"kafka": "record", "jsonl": "envelope", "parquet": "record", "sink": "record"}
KINDS = "kafka:TOPIC, jsonl:PATH, parquet:DIR or sink:MODULE:FACTORY"
RECORDS_ONLY = ("parquet", "sink")


@dataclass(frozen=True)
class OutputSpec:
    kind: Literal["kafka", "jsonl", "parquet", "sink"]
    target: str
    """The topic (kafka), the file path (jsonl), the directory (parquet) or the user's
    ``module:factory`` (sink)."""
    format: str = ""
    """``record`` or ``envelope``; empty: the kind's default."""

    def __post_init__(self) -> None:
        if not self.format:
            object.__setattr__(self, "format", DEFAULT_FORMAT[self.kind])
        elif self.format not in FORMATS:
            raise ConfigError(FORMAT_SETTING, f"must be record or envelope, got {self.format!r}")
        if self.kind in RECORDS_ONLY and self.format != "record":
            raise ConfigError(FORMAT_SETTING, f"{self.kind}: writes records (key, value, headers, timestamp) only")

    @property
    def records(self) -> bool:
        """Writes the records themselves (not the envelope)."""
        return self.format == "record"

    @classmethod
    def parse(cls, text: str, output_format: str | None = None) -> OutputSpec:
        kind, sep, target = text.partition(":")
        kind = kind.strip().lower()
        target = target.strip()
        chosen = (output_format or "").strip().lower()
        if not sep or kind not in DEFAULT_FORMAT:
            raise ConfigError(OUTPUT_SETTING, f"expected {KINDS}, got {text!r}")
        if not target:
            what = {"kafka": "topic", "jsonl": "path", "parquet": "directory", "sink": "module:factory"}[kind]
            raise ConfigError(OUTPUT_SETTING, f"{kind}: needs a {what}")
        if kind == "sink":
            return cls("sink", target, chosen)
        if kind == "kafka":
            if len(target) > 249 or not all(c.isalnum() or c in "._-" for c in target):
                raise ConfigError(OUTPUT_SETTING, f"{target!r} is not a valid Kafka topic name")
            return cls("kafka", target, chosen)
        if kind == "parquet":
            if "://" in target:
                raise ConfigError(OUTPUT_SETTING, "parquet: needs a local directory (a file's rename is the commit)")
            directory = Path(target).expanduser().resolve()
            if directory.exists() and not directory.is_dir():
                raise ConfigError(OUTPUT_SETTING, f"{str(directory)!r} is not a directory")
            if not directory.parent.is_dir():
                raise ConfigError(
                    OUTPUT_SETTING, f"the directory {str(directory.parent)!r} of {target!r} does not exist"
                )
            return cls("parquet", str(directory), chosen)
        parent = Path(target).expanduser().resolve().parent
        if not parent.is_dir():
            raise ConfigError(OUTPUT_SETTING, f"the directory {str(parent)!r} of {target!r} does not exist")
        return cls("jsonl", target, chosen)

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}"


def record_json(subtask: int, record: Record) -> bytes:
    return orjson.dumps(
        {
            "subtask": subtask,
            "split_id": record.split_id,
            "value": record.value,
            "event_time_ms": record.event_time_ms,
        },
        default=str,
    )


class Output(ABC):
    """A sink for records. The host calls ``write`` as records arrive, ``flush`` before
    each checkpoint commits, then ``committed`` (or ``discarded`` after a failure)."""

    exactly_once: bool = False

    def __init__(self) -> None:
        self.records_written = 0
        """Records that are part of a committed checkpoint (or, at-least-once, written for good)."""
        self.records_pending = 0

    async def open(self) -> None:  # noqa: B027 - optional
        """Prepare for writing."""

    @abstractmethod
    async def write(self, subtask: int, records: Sequence[Record]) -> None:
        """Records in the envelope format."""

    @abstractmethod
    async def write_batch(self, batch: pa.RecordBatch) -> None:
        """Records themselves: a batch in ``records.OUTPUT_SCHEMA``."""

    @abstractmethod
    async def flush(self) -> None:
        """Make everything written so far durable (or part of the open transaction)."""

    def staged(self) -> tuple[str, ...]:
        """Names to keep in the checkpoint that ``flush`` prepared: an output whose commit
        follows the transaction's (parquet) finishes it from them after a crash."""
        return ()

    async def recover(self, staged: tuple[str, ...]) -> None:  # noqa: B027 - optional
        """At start, with the restored checkpoint's ``staged`` names."""

    def committed(self) -> None:
        self.records_written += self.records_pending
        self.records_pending = 0

    def discarded(self) -> None:
        """The records since the last checkpoint will not be committed (transaction aborted)."""
        if self.exactly_once:
            self.records_pending = 0
        else:
            self.committed()

    async def close(self) -> None:  # noqa: B027 - optional
        """Release resources."""


class Sink(Output):
    """An output of the user's own: ``--output sink:module:factory`` where ``factory(subtask)``
    returns one (``sluicegate.Sink``). The host calls, from its loop:

    - ``open()`` once, then ``write_batch(batch)`` with records in ``records.OUTPUT_SCHEMA``
      (key, value, headers, timestamp) as they are read and processed;
    - ``flush()`` before each checkpoint commits: make everything written so far durable;
    - ``committed()`` once that checkpoint committed, or ``discarded()`` when it did not
      (the records since the last checkpoint will be read and written again);
    - ``close()`` at the end.

    As it is (``exactly_once = False``), a crash writes the records since the last checkpoint
    again: at-least-once, as ``jsonl:``. For exactly-once, set ``exactly_once = True``, stage
    in ``flush``, return what was staged from ``staged()`` (kept in the checkpoint), make it
    visible in ``committed()`` and finish it in ``recover(staged)`` after a crash, as
    ``parquet:`` does (reader/parquet_output.py). Call ``super()`` in ``committed`` and
    ``discarded``: they keep the counts."""

    async def write(self, subtask: int, records: Sequence[Record]) -> None:
        raise TypeError("a sink writes records, not the JSON envelope")


class JsonlOutput(Output):
    exactly_once = False

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._file: IO[bytes] | None = None

    async def open(self) -> None:
        if self._file is None:
            self._file = self.path.open("ab")

    async def write(self, subtask: int, records: Sequence[Record]) -> None:
        if not records:
            return
        if self._file is None:
            await self.open()
        assert self._file is not None
        self._file.write(b"".join(record_json(subtask, r) + b"\n" for r in records))
        self.records_pending += len(records)

    async def write_batch(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        if self._file is None:
            await self.open()
        assert self._file is not None
        self._file.write(b"".join(_message_json(m) + b"\n" for m in messages(batch)))
        self.records_pending += batch.num_rows

    async def flush(self) -> None:
        file = self._file
        if file is None:
            return
        file.flush()
        await asyncio.to_thread(os.fsync, file.fileno())

    async def close(self) -> None:
        if self._file is not None:
            await self.flush()
            self._file.close()
            self._file = None


class KafkaOutput(Output):
    """Produces through the host's transactional producer; the host owns the transaction."""

    exactly_once = True

    def __init__(self, topic: str, producer: Callable[[], Any]) -> None:
        super().__init__()
        self.topic = topic
        self._producer = producer
        self._futures: list[asyncio.Future[Any]] = []
        self._next_keyless = 0

    async def write(self, subtask: int, records: Sequence[Record]) -> None:
        producer = self._producer()
        for r in records:
            future = await producer.send(
                self.topic,
                value=record_json(subtask, r),
                key=r.split_id.encode(),
            )  # the broker's timestamp: an old event time would fall to retention at once
            self._futures.append(future)
        self.records_pending += len(records)

    async def write_batch(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        producer = self._producer()
        partitions = sorted(await producer.partitions_for(self.topic))
        keyless = partitions[self._next_keyless % len(partitions)]
        self._next_keyless += 1
        builders: dict[int, Any] = {}
        keys = batch.column("key")
        columns = zip(
            key_partitions(keys, len(partitions)),
            keys.to_pylist(),
            batch.column("value").to_pylist(),
            header_pairs(batch, batch.num_rows),
            batch.column("timestamp").cast(pa.int64()).to_pylist(),
            strict=True,
        )
        for index, key, value, kafka_headers, stamp in columns:
            partition = keyless if index is None else partitions[index]
            builder = builders.get(partition)
            if builder is None:
                builder = builders[partition] = producer.create_batch()
            timestamp = None if stamp is None else stamp // 1000
            if builder.append(key=key, value=value, timestamp=timestamp, headers=list(kafka_headers)) is None:
                await self._send(producer, builder, partition)
                builder = builders[partition] = producer.create_batch()
                if builder.append(key=key, value=value, timestamp=timestamp, headers=list(kafka_headers)) is None:
                    raise ValueError(f"a record of {len(value or b'')} bytes is larger than the producer's batch")
        for partition, builder in builders.items():
            await self._send(producer, builder, partition)
        self.records_pending += batch.num_rows

    async def _send(self, producer: Any, builder: Any, partition: int) -> None:
        builder.close()
        self._futures.append(await producer.send_batch(builder, self.topic, partition=partition))

    async def flush(self) -> None:
        futures, self._futures = self._futures, []
        await gather_all(futures)

    def discarded(self) -> None:
        for future in self._futures:  # aborted with the transaction: only mark them retrieved
            future.add_done_callback(_retrieve)
        self._futures = []
        super().discarded()


def _message_json(message: Message) -> bytes:
    out: dict[str, Any] = {}
    put_bytes(out, "key", message.key)
    put_bytes(out, "value", message.value)
    out["headers"] = [[name, header_value(value)] for name, value in message.headers] or None
    out["timestamp"] = message.timestamp_ms
    return orjson.dumps(out)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def gather_all(futures: Sequence[asyncio.Future[Any]]) -> None:
    """Wait for every future (none left unretrieved), then raise the first failure."""
    if not futures:
        return
    results = await asyncio.gather(*futures, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def open_output(spec: OutputSpec, producer: Callable[[], Any], subtask: int) -> Output:
    if spec.kind == "kafka":
        return KafkaOutput(spec.target, producer)
    if spec.kind == "parquet":
        from sluicegate.reader.parquet_output import ParquetOutput

        return ParquetOutput(spec.target, subtask)
    if spec.kind == "sink":
        return user_sink(spec.target, subtask)
    return JsonlOutput(spec.target)


def user_sink(target: str, subtask: int) -> Output:
    """``factory(subtask)`` of ``--output sink:module:factory``, checked to be an Output."""
    factory = load_callable(target, OUTPUT_SETTING, "sink factory")
    sink = factory(subtask)
    if not isinstance(sink, Output):
        raise ConfigError(OUTPUT_SETTING, f"sink:{target} returned a {type(sink).__name__}, not a sluicegate.Sink")
    return sink
