"""The coordinator's log on Kafka (log.py's port, aiokafka underneath).

- fence: a transactional producer with the source's transactional id; its
  ``InitProducerId`` fences the previous incarnation's producer and aborts its open
  transaction;
- restore: the state topic read to its end, read_committed (kafka/compacted.py);
- inbox: a consumer of partition 0 of the coordinator topic, read_committed, no group;
- commit: one producer transaction of the records and the state records;
- fence_reader: a transactional producer started on the reader's id and stopped (its
  ``InitProducerId`` is the fence, as a new reader's is);
- mark_alive: a plain producer of its own (not transactional, so not held up by the
  transaction a slow commit keeps open) writes a tombstone to the state topic.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced, TransactionalIdAuthorizationFailed

from sluicegate.coordinator.log import (
    CommitFailedError,
    CoordinatorLog,
    InboxPosition,
    InboxRecord,
    LogFencedError,
    OutgoingRecord,
    ReaderFenceRefusedError,
    StateRecord,
)
from sluicegate.coordinator.state_store import READ_RECORD_MAX_BYTES
from sluicegate.kafka.clients import control_consumer, security_settings, transactional_producer
from sluicegate.kafka.compacted import read_all
from sluicegate.kafka.startup_noise import quiet_fencing_leftovers
from sluicegate.protocol.topics import ControlTopics

FENCE_TRANSACTION_TIMEOUT_MS = 60_000
"""The fencing producer's transaction timeout (Kafka's default): it opens no transaction."""
KEY_LOOKUP_TIMEOUT_S = 5.0
"""How long ``key_written_at`` waits for the record (a fetch from a fresh consumer takes a
few round trips)."""
CLOSE_TIMEOUT_S = 5.0
"""How long ``close`` waits for each client to stop. A fenced producer's stop waited on a
dead broker's requests for as long as the broker stayed dead (27 s and more, issue 49):
meanwhile the runner that stepped down stayed in its worker's runners, and /health listed
the source active on two workers. A client past this is left to the garbage collector."""


class KafkaCoordinatorLog(CoordinatorLog):
    def __init__(self, bootstrap: str, topics: ControlTopics, transactional_id: str) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.transactional_id = transactional_id
        self._inbox = TopicPartition(topics.coordinator, 0)
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._marker: AIOKafkaProducer | None = None
        """Started at the first ``mark_alive``: most coordinators never need one."""
        self._fenced: LogFencedError | None = None
        """Once fenced, always: aiokafka's producer is then in a fatal state in which a
        next transaction fails with an AssertionError, not with the fence."""

    async def fence(self) -> None:
        quiet_fencing_leftovers()  # a fenced runner steps down and says so; aiokafka's leftovers need not
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            transactional_id=self.transactional_id,
            enable_idempotence=True,
            # The client does not refuse large records itself: the broker's limits decide
            # (state records are at most STATE_RECORD_MAX_BYTES; AddSplits max_message_bytes).
            max_request_size=READ_RECORD_MAX_BYTES,
            # No compression: aiokafka's gzip runs at level 9, ~60 ms per 500 KB AddSplits,
            # which was most of the registration-to-assignment latency.
            compression_type=None,
            linger_ms=0,
            **security_settings(),
        )
        try:
            await self._producer.start()  # init_transactions: fences the previous incarnation
        except ProducerFenced as exc:
            raise LogFencedError(str(exc)) from exc

    async def restore(self) -> list[tuple[bytes | None, bytes | None]]:
        return await read_all(self.bootstrap, self.topics.coordinator_state, max_record_bytes=READ_RECORD_MAX_BYTES)

    async def read_from(self, offset: int | None) -> None:
        if self._consumer is None:
            # a short fetch wait: the loop's own timeout decides how long a step waits
            self._consumer = control_consumer(self.bootstrap, f"{self.transactional_id}.inbox", fetch_max_wait_ms=50)
            await self._consumer.start()
            self._consumer.assign([self._inbox])
        if offset is None:
            await self._consumer.seek_to_beginning(self._inbox)
        else:
            self._consumer.seek(self._inbox, offset + 1)

    async def fetch(self, timeout_ms: int, max_records: int) -> list[InboxRecord]:
        assert self._consumer is not None, "read_from first"
        batch = await self._consumer.getmany(self._inbox, timeout_ms=timeout_ms, max_records=max_records)
        return [InboxRecord(r.partition, r.offset, r.key, r.value) for r in batch.get(self._inbox, [])]

    async def behind(self) -> InboxPosition:
        assert self._consumer is not None, "read_from first"
        consumer = self._consumer
        position = await consumer.position(self._inbox)
        return InboxPosition(position, consumer.last_stable_offset(self._inbox), consumer.highwater(self._inbox))

    async def stable_end(self) -> int:
        assert self._consumer is not None, "read_from first"
        ends = await self._consumer.end_offsets([self._inbox])  # read_committed: the last stable offset
        return int(ends[self._inbox])

    async def commit(self, records: Sequence[OutgoingRecord], state: Sequence[StateRecord]) -> None:
        assert self._producer is not None, "fence first"
        if self._fenced is not None:
            raise self._fenced
        producer = self._producer
        await self._know_partitions(records)
        futures: list[asyncio.Future[Any]] = []
        try:
            async with producer.transaction():
                for r in records:
                    futures.append(
                        await producer.send(r.topic, r.value, key=r.key, partition=r.partition, headers=r.headers)
                    )
                for key, value in state:
                    futures.append(await producer.send(self.topics.coordinator_state, value, key=key, partition=0))
            await asyncio.gather(*futures)
        except KafkaError as exc:
            _retrieve(futures)  # the transaction's failure says it all: no "exception never retrieved" later
            if isinstance(exc, ProducerFenced):
                self._fenced = LogFencedError(str(exc))
                raise self._fenced from exc
            size = sum(len(r.value or b"") for r in records) + sum(len(v or b"") for _, v in state)
            raise CommitFailedError(
                f"the commit of {len(records)} records and {len(state)} state records ({size:,} bytes) failed: {exc!r}"
            ) from exc

    async def fence_reader(self, transactional_id: str) -> None:
        # InitProducerId completes a commit in progress and aborts an open transaction
        # before it answers (the broker answers CONCURRENT_TRANSACTIONS meanwhile and the
        # client retries), so once start() returns the id has nothing in flight.
        producer = transactional_producer(
            self.bootstrap,
            transactional_id,
            # It opens no transaction; the reader's next producer sets its own timeout.
            transaction_timeout_ms=FENCE_TRANSACTION_TIMEOUT_MS,
            client_id=f"{self.transactional_id}.fence",
        )
        try:
            await producer.start()
        except TransactionalIdAuthorizationFailed as exc:
            raise ReaderFenceRefusedError(f"no WRITE on transactional id {transactional_id}: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                await producer.stop()

    async def key_written_at(self, offset: int) -> bytes | None:
        # Rare (once a session timeout while a transaction holds the inbox): a consumer of
        # its own, so the inbox consumer's position and fetches stay as they are.
        consumer = control_consumer(
            self.bootstrap, f"{self.transactional_id}.holder", isolation_level="read_uncommitted"
        )
        await consumer.start()
        try:
            consumer.assign([self._inbox])
            ends = await consumer.end_offsets([self._inbox])  # read_uncommitted: the high watermark
            if not 0 <= offset < ends[self._inbox]:
                return None
            consumer.seek(self._inbox, offset)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + KEY_LOOKUP_TIMEOUT_S
            while loop.time() < deadline:
                batch = await consumer.getmany(self._inbox, timeout_ms=200, max_records=1)
                for record in batch.get(self._inbox, []):
                    return record.key if record.offset == offset else None
            return None
        finally:
            await consumer.stop()

    async def mark_alive(self, key: bytes) -> None:
        if self._marker is None:
            # Not idempotent either: a lost or doubled tombstone of a part nobody writes
            # changes nothing, and the principal needs no IdempotentWrite for it.
            marker = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0, **security_settings())
            await marker.start()
            self._marker = marker
        await self._marker.send_and_wait(self.topics.coordinator_state, None, key=key, partition=0)

    async def close(self) -> None:
        for client in (self._consumer, self._producer, self._marker):
            if client is not None:
                with contextlib.suppress(Exception):  # a timeout among them
                    await asyncio.wait_for(client.stop(), CLOSE_TIMEOUT_S)

    async def _know_partitions(self, records: Sequence[OutgoingRecord]) -> None:
        """After ``sluicegate topics scale`` the producer's metadata lags the new partitions of
        the readers topic (aiokafka refuses a partition it does not know): refresh it. A topic
        the producer never sent to is left to ``send``, which fetches its metadata."""
        assert self._producer is not None
        cluster = self._producer.client.cluster

        def unknown() -> set[int]:
            return {
                r.partition
                for r in records
                if (known := cluster.partitions_for_topic(r.topic)) is not None and r.partition not in known
            }

        missing = unknown()
        for _ in range(50):
            if not missing:
                return
            await self._producer.client.force_metadata_update()
            missing = unknown()
            if missing:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.topics.readers} has no partitions {sorted(missing)[:5]}; did the topics shrink?")


def _retrieve(futures: list[asyncio.Future[Any]]) -> None:
    """Mark the exceptions of failed sends as seen (asyncio logs the others at ERROR)."""
    for future in futures:
        if future.done() and not future.cancelled():
            future.exception()
