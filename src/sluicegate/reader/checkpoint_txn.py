"""The reader host's transaction: one transactional producer per subtask, as a small state
machine (idle, open, fenced).

Everything a standalone reader commits goes through it: a checkpoint (the reader's state,
its ``CheckpointAck`` and any ``SplitsFinished``), the records of a ``kafka:`` output
written since the last checkpoint, the state and ``ReaderLeaving`` of a graceful stop, and
the re-affirmed checkpoint after a fence. It owns the rules that used to be repeated at
each of those places:

- a producer that is fenced (``ProducerFenced``, or aiokafka's ``IllegalOperation`` once
  the producer left its transaction because of a fence) means another process took the
  subtask's transactional id: ``ReaderTakenOver``, decided in ``raise_if_fenced`` alone;
- a failed commit aborts the transaction, so the next one starts clean;
- an abort the broker no longer knows (it aborted the transaction past its timeout while
  it was away) leaves aiokafka's producer unusable for good: a new producer on the same id
  replaces it (``init_transactions`` aborts whatever the old one left).

The producer is injected (``new_producer``), so tests drive every transition with an
in-memory double (tests/unit/test_checkpoint_txn.py).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced

from sluicegate.reader.output import gather_all

log = logging.getLogger("sluicegate.reader")

RETRY_S = 1.0


class ReaderTakenOver(RuntimeError):
    """Another process of this subtask started its transactional producer: this one is a zombie."""


class TxnState(enum.Enum):
    IDLE = "idle"  # a producer, no transaction open
    OPEN = "open"  # a transaction open: sends go into it
    FENCED = "fenced"  # the producer was fenced: nothing more goes through it until replaced


class TxnProducer(Protocol):
    """What the state machine needs of aiokafka's AIOKafkaProducer."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def begin_transaction(self) -> None: ...

    async def commit_transaction(self) -> None: ...

    async def abort_transaction(self) -> None: ...

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]: ...


@dataclass(frozen=True)
class TxnRecord:
    topic: str
    value: bytes | None
    """None: a tombstone (a compacted topic forgets the key)."""
    key: bytes | None = None
    partition: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


class CheckpointTxn:
    def __init__(
        self,
        new_producer: Callable[[], TxnProducer],
        taken_over: Callable[[], ReaderTakenOver],
        stop_producer: Callable[[TxnProducer], Awaitable[None]],
        *,
        retry_s: float = RETRY_S,
    ) -> None:
        self._new_producer = new_producer
        self._taken_over = taken_over
        """The error for this subtask, naming it (the host knows the names)."""
        self._stop_producer = stop_producer
        self._retry_s = retry_s
        self._producer: TxnProducer | None = None
        self.state = TxnState.IDLE

    @property
    def producer(self) -> TxnProducer:
        """The current producer, for an output that writes into the open transaction."""
        assert self._producer is not None, "start() first"
        return self._producer

    def raise_if_fenced(self, exc: BaseException) -> None:
        """The one place that decides a fence: an error that means another process took the
        transactional id raises ReaderTakenOver (the state becomes FENCED); any other
        returns, for the caller to handle."""
        if isinstance(exc, (ProducerFenced, IllegalOperation)):
            self.state = TxnState.FENCED
            raise self._taken_over() from exc

    # -- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """A producer on the subtask's id. Starting it (init_transactions) fences a zombie
        of this subtask; a failure to start is raised (the host decides)."""
        producer = self._new_producer()
        try:
            await producer.start()
        except BaseException:
            await self._stop_producer(producer)
            raise
        self._producer, self.state = producer, TxnState.IDLE

    async def renew(self) -> None:
        """A new producer on the same id in place of the current one (fenced, or unusable
        after a lost transaction), retried until the broker answers."""
        old, self._producer, self.state = self._producer, None, TxnState.IDLE
        if old is not None:
            await self._stop_producer(old)
        while True:
            try:
                await self.start()
            except KafkaError as exc:
                log.warning("cannot start a new transactional producer yet: %s; retrying", exc)
                await asyncio.sleep(self._retry_s)
                continue
            log.info("started a new transactional producer")
            return

    def fenced(self) -> None:
        """The broker fenced the producer (found outside a call of this object): its
        transaction is gone, and nothing may abort it or write with it before ``renew``."""
        self.state = TxnState.FENCED

    async def stop(self) -> None:
        if self._producer is not None:
            await self._stop_producer(self._producer)

    # -- transactions ------------------------------------------------------------------

    async def open(self) -> None:
        """Open a transaction unless one is open."""
        if self.state is TxnState.OPEN:
            return
        if self.state is TxnState.FENCED:
            raise self._taken_over()
        try:
            await self.producer.begin_transaction()
        except (KafkaError, IllegalOperation) as exc:
            self.raise_if_fenced(exc)
            raise
        self.state = TxnState.OPEN

    async def commit(self, records: Sequence[TxnRecord]) -> None:
        """``records`` and whatever the output wrote since ``open``, atomically. A fence
        raises ReaderTakenOver; any other Kafka error aborts the transaction (so the next
        starts clean) and is raised for the host to decide what the loss means."""
        await self.open()
        try:
            futures = [
                await self.producer.send(
                    r.topic, r.value, key=r.key, partition=r.partition, headers=list(r.headers) or None
                )
                for r in records
            ]
            await gather_all(futures)
            await self.producer.commit_transaction()
        except (KafkaError, IllegalOperation) as exc:
            self.raise_if_fenced(exc)
            await self.abort()
            raise
        self.state = TxnState.IDLE

    async def abort(self) -> None:
        """Abort the open transaction, if any. A fence raises ReaderTakenOver; an abort the
        broker refuses otherwise (it lost the transaction) renews the producer."""
        if self.state is not TxnState.OPEN:
            return
        self.state = TxnState.IDLE
        try:
            await self.producer.abort_transaction()
        except (KafkaError, IllegalOperation) as exc:
            self.raise_if_fenced(exc)
            log.warning("aborting the open transaction failed: %s", exc)
            await self.renew()
