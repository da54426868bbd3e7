"""Where a reader host writes the records its connector reads.

- ``kafka:TOPIC``: every record goes to TOPIC through the host's transactional
  producer, inside the transaction that also carries the reader's checkpoint
  and its ``CheckpointAck``: data, state and ack commit atomically
  (exactly-once). The topic must exist (sluicegate never creates it): the host waits
  ``--topic-wait-timeout-s`` for it, then exits 2 saying so.
- ``jsonl:PATH``: one JSON line per record, appended to PATH and flushed and
  fsynced before each checkpoint commits (at-least-once: the records after the
  last checkpoint may be written again after a crash).

Both write the same JSON object per record:
``{"subtask", "split_id", "value", "event_time_ms"}``.
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

from sluicegate.api.errors import ConfigError
from sluicegate.api.reader import Record

OUTPUT_SETTING = "--output"


@dataclass(frozen=True)
class OutputSpec:
    kind: Literal["kafka", "jsonl"]
    target: str
    """The topic (kafka) or the file path (jsonl)."""

    @classmethod
    def parse(cls, text: str) -> OutputSpec:
        kind, sep, target = text.partition(":")
        kind = kind.strip().lower()
        target = target.strip()
        if not sep or kind not in ("kafka", "jsonl"):
            raise ConfigError(OUTPUT_SETTING, f"expected kafka:TOPIC or jsonl:PATH, got {text!r}")
        if not target:
            raise ConfigError(OUTPUT_SETTING, f"{kind}: needs a {'topic' if kind == 'kafka' else 'path'}")
        if kind == "kafka":
            if len(target) > 249 or not all(c.isalnum() or c in "._-" for c in target):
                raise ConfigError(OUTPUT_SETTING, f"{target!r} is not a valid Kafka topic name")
            return cls("kafka", target)
        parent = Path(target).expanduser().resolve().parent
        if not parent.is_dir():
            raise ConfigError(OUTPUT_SETTING, f"the directory {str(parent)!r} of {target!r} does not exist")
        return cls("jsonl", target)

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
    async def write(self, subtask: int, records: Sequence[Record]) -> None: ...

    @abstractmethod
    async def flush(self) -> None:
        """Make everything written so far durable (or part of the open transaction)."""

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

    async def flush(self) -> None:
        futures, self._futures = self._futures, []
        await gather_all(futures)

    def discarded(self) -> None:
        for future in self._futures:  # aborted with the transaction: only mark them retrieved
            future.add_done_callback(_retrieve)
        self._futures = []
        super().discarded()


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


def open_output(spec: OutputSpec, producer: Callable[[], Any]) -> Output:
    if spec.kind == "kafka":
        return KafkaOutput(spec.target, producer)
    return JsonlOutput(spec.target)
