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


async def run(bootstrap: str, splits_per_reader: int, transactions: int) -> None:
    tag = uuid.uuid4().hex[:8]
    readers_topic, state_topic = f"bench-txn-{tag}.readers", f"bench-txn-{tag}.state"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **security_settings())
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(readers_topic, READERS, 1),
                NewTopic(state_topic, 1, 1, topic_configs=STATE_TOPIC_CONFIG),
            ]
        )
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        **security_settings(),
        transactional_id=f"bench-txn-{tag}",
        enable_idempotence=True,
        max_request_size=64 << 20,
        compression_type=None,
        linger_ms=0,
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **security_settings(),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=2 << 20,
    )
    await producer.start()
    await consumer.start()
    released, added, state = payloads(splits_per_reader)
    size = len(released) + len(added) + len(state)
    print(
        f"{transactions} transactions (after {WARM_UP} not measured) of {size:,} bytes "
        f"(SplitsReleased {len(released):,} + AddSplits {len(added):,} + state part {len(state):,})"
    )
    try:
        consumer.assign([TopicPartition(readers_topic, k) for k in range(READERS)])
        await consumer.seek_to_end()
        commit_ms: list[float] = []
        fetched_ms: list[float] = []
        for i in range(WARM_UP + transactions):
            subtask = i % READERS
            started = time.perf_counter()
            async with producer.transaction():
                futures = [
                    await producer.send(readers_topic, released, partition=subtask),
                    await producer.send(readers_topic, added, partition=subtask),
                    await producer.send(state_topic, state, key=b"bench/slot/%d" % subtask, partition=0),
                ]
            await asyncio.gather(*futures)
            committed = time.perf_counter()
            received = 0
            while received < 2:
                batch = await consumer.getmany(timeout_ms=1000)
                received += sum(len(records) for records in batch.values())
            done = time.perf_counter()
            if i >= WARM_UP:
                commit_ms.append((committed - started) * 1000)
                fetched_ms.append((done - started) * 1000)
        for name, values in (("commit", commit_ms), ("send -> fetched", fetched_ms)):
            print(
                f"{name:>16}: p50 {percentile(values, 0.5):6.1f} ms  p99 {percentile(values, 0.99):6.1f} ms"
                f"  max {max(values):6.1f} ms"
            )
    finally:
        await producer.stop()
        await consumer.stop()


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
