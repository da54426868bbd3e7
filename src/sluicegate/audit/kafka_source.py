"""Read a source's two control topics, from the beginning to their last stable offset.

The reader is a plain assigned consumer: no consumer group, no commits,
``read_committed``, so aborted coordinator transactions stay invisible and the
read stops at the end offsets captured when it starts (with read_committed,
``end_offsets`` answers the last stable offset).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiokafka import TopicPartition

from sluicegate.audit.replay import InboxRecord, ReadersRecord, topic_names
from sluicegate.kafka.clients import control_consumer

_BATCH = 100_000
_FETCH_BYTES = 64 * 1024 * 1024


class MissingTopicsError(RuntimeError):
    def __init__(self, topics: list[str], bootstrap: str) -> None:
        super().__init__(
            f"topic(s) {', '.join(topics)} do not exist on {bootstrap}: "
            "is the source name (and namespace) right, and has its coordinator ever started?"
        )
        self.topics = topics


class ReadTimeoutError(RuntimeError):
    pass


@dataclass(frozen=True)
class ControlTopicsRead:
    inbox_topic: str
    readers_topic: str
    readers_partitions: int
    inbox: list[InboxRecord]
    readers: list[ReadersRecord]


async def read_control_topics(
    bootstrap: str, source: str, ns: str = "sluicegate"
) -> tuple[list[InboxRecord], list[ReadersRecord]]:
    """(inbox as (offset, value), readers topic as (partition, offset, value)).

    Committed records only, from the beginning up to the end offsets at start.
    """
    read = await read_control_topics_full(bootstrap, source, ns)
    return read.inbox, read.readers


async def read_control_topics_full(
    bootstrap: str, source: str, ns: str = "sluicegate", *, stall_timeout_s: float = 60.0
) -> ControlTopicsRead:
    """``read_control_topics`` plus the topic names and the readers topic's partition count.

    Raises MissingTopicsError naming the missing topics, and ReadTimeoutError if
    no progress towards the captured end offsets is made for ``stall_timeout_s``.
    """
    inbox_topic, readers_topic = topic_names(source, ns)
    consumer = control_consumer(
        bootstrap,
        f"sluicegate-audit-{source}",
        max_partition_fetch_bytes=_FETCH_BYTES,
        fetch_max_bytes=_FETCH_BYTES,
    )
    try:
        await consumer.start()
        # One metadata fetch gives both the topic list and the partitions; the consumer's
        # own cache (partitions_for_topic) only knows topics it was asked about before.
        cluster = await consumer._client.fetch_all_metadata()
        existing = cluster.topics()
        missing = [t for t in (inbox_topic, readers_topic) if t not in existing]
        if missing:
            raise MissingTopicsError(missing, bootstrap)
        partitions: dict[str, list[int]] = {}
        for topic in (inbox_topic, readers_topic):
            found = cluster.partitions_for_topic(topic)
            if not found:
                raise MissingTopicsError([topic], bootstrap)
            partitions[topic] = sorted(found)
        tps = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        inbox: list[InboxRecord] = []
        readers: list[ReadersRecord] = []
        pending = {tp for tp in tps if ends[tp] > await consumer.position(tp)}
        consumer.pause(*[tp for tp in tps if tp not in pending])
        last_progress = time.monotonic()
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=500, max_records=_BATCH)
            for tp, messages in batches.items():
                end = ends[tp]
                if tp.topic == inbox_topic:
                    inbox.extend((m.offset, m.value) for m in messages if m.offset < end)
                else:
                    readers.extend((tp.partition, m.offset, m.value) for m in messages if m.offset < end)
                if messages:
                    last_progress = time.monotonic()
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
                    consumer.pause(tp)
            if pending and time.monotonic() - last_progress > stall_timeout_s:
                stuck = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
                raise ReadTimeoutError(
                    f"no progress for {stall_timeout_s:.0f}s reading {stuck} up to the end offsets captured at start"
                )
            await asyncio.sleep(0)
        return ControlTopicsRead(
            inbox_topic=inbox_topic,
            readers_topic=readers_topic,
            readers_partitions=len(partitions[readers_topic]),
            inbox=inbox,
            readers=readers,
        )
    finally:
        await consumer.stop()
