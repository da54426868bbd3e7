"""Read a source's two control topics, from the beginning to a consistent cut.

The reader is a plain assigned consumer: no consumer group, no commits,
``read_committed``, so aborted coordinator transactions stay invisible. It reads to
the end offsets captured when it starts (with read_committed, ``end_offsets``
answers the last stable offset), then on until the records of every step up to
the last one seen are readable, and leaves later ones out (cut.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from sluicegate.audit.cut import Cut, CutPlan
from sluicegate.audit.replay import InboxRecord, ReadersRecord, numbered, topic_names
from sluicegate.kafka.clients import control_consumer

_BATCH = 100_000
CUT_TIMEOUT_S = 10.0
"""How long to wait for the records of committed steps that are not readable yet (their
transaction markers are on their way: milliseconds, unless the broker is in trouble)."""
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
    cut: Cut | None = None
    """The consistent cut judged (None: no numbered coordinator record)."""


async def read_control_topics(
    bootstrap: str, source: str, ns: str = "sluicegate"
) -> tuple[list[InboxRecord], list[ReadersRecord]]:
    """(inbox as (offset, value), readers topic as (partition, offset, value)).

    Committed records only, from the beginning up to the end offsets at start.
    """
    read = await read_control_topics_full(bootstrap, source, ns)
    return read.inbox, read.readers


async def read_control_topics_full(
    bootstrap: str,
    source: str,
    ns: str = "sluicegate",
    *,
    stall_timeout_s: float = 60.0,
    cut_timeout_s: float = CUT_TIMEOUT_S,
) -> ControlTopicsRead:
    """``read_control_topics`` plus the topic names, the readers topic's partition count
    and the consistent cut judged (cut.py): read on past the first end offsets until
    every coordinator record up to the cut is there, for at most ``cut_timeout_s``.

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
        partitions = await control_partitions(consumer, bootstrap, (inbox_topic, readers_topic))
        tps = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        inbox: list[InboxRecord] = []
        readers: list[ReadersRecord] = []
        ends = await _read_to_ends(consumer, tps, inbox_topic, inbox, readers, stall_timeout_s)
        inbox_end = ends[TopicPartition(inbox_topic, 0)]
        plan = CutPlan.first(numbered(raw) for _, _, raw in readers)
        cut: Cut | None = None
        if plan is not None:
            left_out = rereads = 0
            deadline = time.monotonic() + cut_timeout_s
            while not plan.complete(inbox_end) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # the markers of a committed step are on their way
                later: list[ReadersRecord] = []
                ends = await _read_to_ends(consumer, tps, inbox_topic, inbox, later, stall_timeout_s)
                inbox_end = ends[TopicPartition(inbox_topic, 0)]
                kept, past = plan.take(later)
                readers += kept
                left_out += past
                rereads += 1
            cut = plan.cut(inbox_end, left_out, rereads)
        return ControlTopicsRead(
            inbox_topic=inbox_topic,
            readers_topic=readers_topic,
            readers_partitions=len(partitions[readers_topic]),
            inbox=inbox,
            readers=readers,
            cut=cut,
        )
    finally:
        await consumer.stop()


async def control_partitions(consumer: AIOKafkaConsumer, bootstrap: str, topics: Sequence[str]) -> dict[str, list[int]]:
    """Each of ``topics``' partitions; MissingTopicsError naming those that do not exist."""
    # One metadata fetch gives both the topic list and the partitions; the consumer's
    # own cache (partitions_for_topic) only knows topics it was asked about before.
    cluster = await consumer._client.fetch_all_metadata()
    existing = cluster.topics()
    missing = [t for t in topics if t not in existing]
    if missing:
        raise MissingTopicsError(missing, bootstrap)
    partitions: dict[str, list[int]] = {}
    for topic in topics:
        found = cluster.partitions_for_topic(topic)
        if not found:
            raise MissingTopicsError([topic], bootstrap)
        partitions[topic] = sorted(found)
    return partitions


async def _read_to_ends(
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    inbox_topic: str,
    inbox: list[InboxRecord],
    readers: list[ReadersRecord],
    stall_timeout_s: float,
) -> dict[TopicPartition, int]:
    """Read on from the consumer's positions to the end offsets taken now (the last
    stable offsets: read_committed), appending to ``inbox`` and ``readers``; the ends."""
    ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
    pending = {tp for tp in tps if ends[tp] > await consumer.position(tp)}
    consumer.pause(*tps)
    consumer.resume(*pending)
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
    return ends
