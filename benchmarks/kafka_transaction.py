"""The floor under control_plane.py's phase 2: one bare Kafka transaction of the same
bytes, without sluicegate.

A re-registration of a reader that owns 6,250 splits makes the coordinator commit one
transaction holding a SplitsReleased (6,250 ids), an AddSplits (6,250 splits) on the
subtask's partition of the readers topic, and the subtask's state part (the same
6,250 splits) on the compacted state topic. This script commits transactions of that
shape with aiokafka's transactional producer, as the SourceRunner does, and a
read_committed consumer (as a reader) waits for the records. It prints p50/p99 of the
commit and of send -> fetched. What control_plane.py measures above these figures is
sluicegate's own cost.

    .venv/bin/python benchmarks/kafka_transaction.py [--splits-per-reader 6250] [--transactions 100]
        [--bootstrap-servers HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from sluicegate.kafka.clients import security_settings

READERS = 16
WARM_UP = 10
"""Transactions not measured: the broker's JIT and the first AddPartitionsToTxn per partition."""
STATE_TOPIC_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": "67108864"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def payloads(splits_per_reader: int) -> tuple[bytes, bytes, bytes]:
    splits = [
        {"split_id": f"seq-{i:05d}", "start": i * 1000, "end": (i + 1) * 1000, "position": i * 1000}
        for i in range(splits_per_reader)
    ]
    released = orjson.dumps({"v": 2, "type": "SplitsReleased", "body": {"split_ids": [s["split_id"] for s in splits]}})
    added = orjson.dumps({"v": 2, "type": "AddSplits", "body": {"seq": 1, "splits": splits}})
    state = orjson.dumps({"applied_seq": 0, "owned": [[1, s] for s in splits]})
    return released, added, state


@dataclass
class BareTransactions:
    """Topics, a transactional producer and a read_committed consumer for transactions of
    one re-registration's shape; ``measure(n)`` commits ``n`` more and keeps their times."""

    bootstrap: str
    splits_per_reader: int
    commit_ms: list[float] = field(default_factory=list)
    fetched_ms: list[float] = field(default_factory=list)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    sent: int = 0

    def __post_init__(self) -> None:
        self.released, self.added, self.state = payloads(self.splits_per_reader)
        self.size = len(self.released) + len(self.added) + len(self.state)
        self.readers_topic, self.state_topic = f"bench-txn-{self.tag}.readers", f"bench-txn-{self.tag}.state"
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            **security_settings(),
            transactional_id=f"bench-txn-{self.tag}",
            enable_idempotence=True,
            max_request_size=64 << 20,
            compression_type=None,
            linger_ms=0,
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            **security_settings(),
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=50,
            max_partition_fetch_bytes=2 << 20,
        )

    def describe(self) -> str:
        return (
            f"{self.size:,} bytes (SplitsReleased {len(self.released):,} + AddSplits {len(self.added):,} "
            f"+ state part {len(self.state):,})"
        )

    async def start(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, **security_settings())
        await admin.start()
        try:
            await admin.create_topics(
                [
                    NewTopic(self.readers_topic, READERS, 1),
                    NewTopic(self.state_topic, 1, 1, topic_configs=STATE_TOPIC_CONFIG),
                ]
            )
        finally:
            await admin.close()
        await self.producer.start()
        await self.consumer.start()
        self.consumer.assign([TopicPartition(self.readers_topic, k) for k in range(READERS)])
        await self.consumer.seek_to_end()
        await self._commit_and_fetch(WARM_UP)

    async def measure(self, transactions: int) -> None:
        await self._commit_and_fetch(transactions, keep=True)

    async def _commit_and_fetch(self, transactions: int, keep: bool = False) -> None:
        for _ in range(transactions):
            subtask = self.sent % READERS
            self.sent += 1
            started = time.perf_counter()
            async with self.producer.transaction():
                futures = [
                    await self.producer.send(self.readers_topic, self.released, partition=subtask),
                    await self.producer.send(self.readers_topic, self.added, partition=subtask),
                    await self.producer.send(self.state_topic, self.state, key=b"bench/slot/%d" % subtask, partition=0),
                ]
            await asyncio.gather(*futures)
            committed = time.perf_counter()
            received = 0
            while received < 2:
                batch = await self.consumer.getmany(timeout_ms=1000)
                received += sum(len(records) for records in batch.values())
            done = time.perf_counter()
            if keep:
                self.commit_ms.append((committed - started) * 1000)
                self.fetched_ms.append((done - started) * 1000)

    async def stop(self) -> None:
        await self.producer.stop()
        await self.consumer.stop()


async def run(bootstrap: str, splits_per_reader: int, transactions: int) -> None:
    bare = BareTransactions(bootstrap, splits_per_reader)
    print(f"{transactions} transactions (after {WARM_UP} not measured) of {bare.describe()}")
    await bare.start()
    try:
        await bare.measure(transactions)
    finally:
        await bare.stop()
    for name, values in (("commit", bare.commit_ms), ("send -> fetched", bare.fetched_ms)):
        print(
            f"{name:>16}: p50 {percentile(values, 0.5):6.1f} ms  p99 {percentile(values, 0.99):6.1f} ms"
            f"  max {max(values):6.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits-per-reader", type=int, default=6_250)
    parser.add_argument("--transactions", type=int, default=100)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args()
    if args.bootstrap_servers:
        asyncio.run(run(args.bootstrap_servers, args.splits_per_reader, args.transactions))
        return
    from sluicegate.devtools.broker.local import LocalKafkaBroker

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as workdir:
        broker = LocalKafkaBroker(run_dir=Path(workdir) / "broker", keep=False)
        bootstrap = broker.start(timeout_s=180)
        try:
            asyncio.run(run(bootstrap, args.splits_per_reader, args.transactions))
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
