"""The split-state topic (``NS.S.split-state``) as a stateful reader reads it: every
committed record, kept up to date by ``catch_up`` before a split's state is loaded.

Why "up to date" means the log end at the call, not the last stable offset: the state a
split arrives with was committed before the coordinator handed the split out, so it lies
below the log end at the call. It can lie above the last stable offset when another
reader's transaction on the topic is still open (it writes its states last, just before
it commits, so that is milliseconds, unless that reader died right there: then until
its transaction is aborted, by its restarted process or by the broker's transaction
timeout). Reading to the last stable offset could miss the state and start the split
from an empty one; reading to the log end waits for that transaction instead, and says so.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from sluicegate.kafka.clients import control_consumer, end_offsets_consumer
from sluicegate.reader.split_state import SplitStates

log = logging.getLogger("sluicegate.reader")

WAIT_NOTICE_S = 5.0
MAX_RECORD_BYTES = 1_048_576


class KafkaSplitStateLog:
    def __init__(self, bootstrap_servers: str, topic: str, client_id: str) -> None:
        self.topic = topic
        self._bootstrap = bootstrap_servers
        self._client_id = client_id
        self._reader: AIOKafkaConsumer | None = None
        self._ends: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []

    async def _start(self) -> None:
        reader = control_consumer(
            self._bootstrap,
            f"{self._client_id}.split-state",
            max_partition_fetch_bytes=MAX_RECORD_BYTES,
        )
        ends = end_offsets_consumer(self._bootstrap, f"{self._client_id}.split-state-end")
        await reader.start()
        await ends.start()
        self._reader, self._ends = reader, ends
        cluster = await reader._client.fetch_all_metadata()
        partitions = cluster.partitions_for_topic(self.topic)
        if not partitions:
            raise RuntimeError(f"the split-state topic {self.topic} has no partitions")
        self._partitions = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        reader.assign(self._partitions)
        await reader.seek_to_beginning(*self._partitions)

    async def catch_up(self, states: SplitStates) -> int:
        """Read every record committed below the log end as it is now into ``states``;
        returns how many were read."""
        if self._reader is None:
            await self._start()
        reader, ends = self._reader, self._ends
        assert reader is not None and ends is not None
        target = await ends.end_offsets(self._partitions)
        started = noticed = time.monotonic()
        count = 0
        while True:
            behind = [tp for tp in self._partitions if await reader.position(tp) < target[tp]]
            if not behind:
                return count
            batches = await reader.getmany(*behind, timeout_ms=200)
            for messages in batches.values():
                states.saw((m.key.decode(), m.value) for m in messages if m.key is not None)
                count += len(messages)
            if not batches and time.monotonic() - noticed >= WAIT_NOTICE_S:
                noticed = time.monotonic()
                log.info(
                    "loading split states: waiting %.0f s for a transaction still open on %s "
                    "(a reader that stopped while committing; it ends when that reader restarts "
                    "or the broker times the transaction out)",
                    noticed - started,
                    self.topic,
                )
            await asyncio.sleep(0)

    async def close(self) -> None:
        for consumer in (self._reader, self._ends):
            if consumer is not None:
                await consumer.stop()
        self._reader = self._ends = None
