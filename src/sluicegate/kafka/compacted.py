"""Reading a topic whole (state records, dead letters), or the latest value of a key of a
compacted one.

Both read ``read_committed``: state records are written in transactions, and an
aborted one must never be restored.
"""

from __future__ import annotations

import time
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from sluicegate.kafka.clients import control_consumer
from sluicegate.kafka.security import KafkaSecurity


async def read_all(bootstrap: str, topic: str, max_record_bytes: int) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed (key, value) of every partition of ``topic``, in offset order per partition."""
    return [(r.key, r.value) for r in await read_all_records(bootstrap, topic, max_record_bytes)]


async def read_all_records(
    bootstrap: str, topic: str, max_record_bytes: int, security: KafkaSecurity | None = None
) -> list[ConsumerRecord[Any, Any]]:
    """Every committed record of every partition of ``topic`` (headers too), in offset
    order per partition."""
    consumer = control_consumer(
        bootstrap,
        f"sluicegate-read-{topic}",
        security,
        max_partition_fetch_bytes=max_record_bytes,
        fetch_max_bytes=max_record_bytes,
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if partitions is None:  # a fresh consumer knows no topic yet (as audit/kafka_source.py asks)
            cluster = await consumer._client.fetch_all_metadata()
            partitions = cluster.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in sorted(partitions or {0})]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        records: list[ConsumerRecord[Any, Any]] = []
        remaining = {tp for tp in tps if end[tp] > 0}
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, messages in batch.items():
                records.extend(messages)
                if messages and messages[-1].offset + 1 >= end[tp]:
                    remaining.discard(tp)
            for tp in list(remaining):
                if await consumer.position(tp) >= end[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return records


async def read_latest_value(consumer: AIOKafkaConsumer, tp: TopicPartition, key: bytes) -> bytes | None:
    """The value of the latest committed record with ``key`` in ``tp`` (None: none, or a tombstone)."""
    found = await read_latest(consumer, tp, [key])
    return found[key][1] if key in found else None


async def read_latest(
    consumer: AIOKafkaConsumer, tp: TopicPartition, keys: list[bytes], before: int | None = None
) -> dict[bytes, tuple[int, bytes | None]]:
    """For each of ``keys``, the offset and value (None: a tombstone) of its latest committed
    record in ``tp`` below offset ``before`` (default: the read_committed end); keys with no
    such record are left out.

    Reads backwards in growing windows, so a long, not yet compacted partition is not read
    whole: the latest records are near its end.
    """
    consumer.assign([tp])
    begin = (await consumer.beginning_offsets([tp]))[tp]
    end = (await consumer.end_offsets([tp]))[tp]
    high = end if before is None else min(before, end)
    wanted = set(keys)
    found: dict[bytes, tuple[int, bytes | None]] = {}
    window = 64
    while high > begin and wanted - found.keys():
        low = max(begin, high - window)
        in_window = await _read_window(consumer, tp, low, high, wanted - found.keys())
        found.update(in_window)  # keys found here are final: earlier windows hold older records
        high = low
        window *= 8
    return found


async def _read_window(
    consumer: AIOKafkaConsumer, tp: TopicPartition, low: int, high: int, keys: set[bytes]
) -> dict[bytes, tuple[int, bytes | None]]:
    consumer.seek(tp, low)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    deadline = time.monotonic() + 60
    while await consumer.position(tp) < high:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {tp.topic}[{tp.partition}] {low}..{high} took over 60 s")
        batches = await consumer.getmany(tp, timeout_ms=500)
        for record in batches.get(tp, []):
            if record.offset >= high:
                break
            if record.key in keys:
                latest[record.key] = (record.offset, record.value)
    return latest
