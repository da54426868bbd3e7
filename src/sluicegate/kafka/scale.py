"""Growing a source (``sluicegate topics scale``): more reader slots without a restart.

The per-subtask topics (``NS.S.readers``, ``NS.S.reader-state``) gain partitions
(Kafka partitions only grow), and then a ``MaxParallelismRaised`` record on the
coordinator's inbox tells the running coordinator to serve the new slots. It goes
through the inbox, not a side channel, so that the coordinator applies it in order
with its readers' records, commits it with its state, and the audit sees it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from sluicegate.kafka.clients import plain_producer
from sluicegate.kafka.topics import TopicApplyError, apply_topics, describe_topics
from sluicegate.protocol.codec import encode, encode_key
from sluicegate.protocol.messages import SOURCE_WIDE, MaxParallelismRaised, envelope
from sluicegate.protocol.topics import ControlTopics, topic_specs


class ScaleError(ValueError):
    """The source cannot be scaled as asked (it does not exist, or it would shrink)."""


@dataclass(frozen=True)
class ScaleResult:
    source: str
    before: int
    after: int


async def scale_source(bootstrap: str, namespace: str, source: str, max_parallelism: int) -> ScaleResult:
    """Grow the per-subtask topics of ``source`` to ``max_parallelism`` partitions and tell its
    coordinator. Idempotent: asking again for the current size announces it again."""
    topics = ControlTopics.for_source(source, namespace)
    infos = await describe_topics(bootstrap, [topics.readers, topics.coordinator])
    readers, inbox = infos[topics.readers], infos[topics.coordinator]
    if readers is None or inbox is None:
        raise ScaleError(f"source {source} has no topics in namespace {namespace}; run `sluicegate topics apply`")
    if max_parallelism < readers.partitions:
        raise ScaleError(
            f"{topics.readers} has {readers.partitions} partitions: a source's max_parallelism only grows "
            f"(asked for {max_parallelism})"
        )
    specs = [
        dataclasses.replace(spec, grow=spec.accept_more) for spec in topic_specs(namespace, source, max_parallelism)
    ]
    await apply_topics(bootstrap, specs)
    await _announce(bootstrap, topics, source, max_parallelism)
    return ScaleResult(source, readers.partitions, max_parallelism)


async def _announce(bootstrap: str, topics: ControlTopics, source: str, max_parallelism: int) -> None:
    record = envelope(
        MaxParallelismRaised(max_parallelism=max_parallelism),
        source=source,
        subtask=SOURCE_WIDE,
        attempt=None,
        epoch=0,
        ts=int(time.time() * 1000),
    )
    producer = plain_producer(bootstrap, f"{topics.coordinator}.scale")
    await producer.start()
    try:
        await producer.send_and_wait(topics.coordinator, encode(record), key=encode_key(SOURCE_WIDE))
    except Exception as exc:
        raise TopicApplyError(f"the topics grew, but telling the coordinator failed: {exc}") from exc
    finally:
        await producer.stop()
