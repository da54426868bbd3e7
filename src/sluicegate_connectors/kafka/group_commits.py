"""Commit a source's durable positions to a Kafka consumer group (``commit_offsets_to_group``),
so that Kafka's own lag tools see how far it has read: ``kafka-consumer-groups.sh
--describe``, Burrow, a Grafana Kafka-lag panel. What Spark users ask for and Spark's own
Kafka source never did (SPARK-27549); Flink's KafkaSource does it on checkpoint.

For monitoring only: the group's offsets are committed once a checkpoint holding them is
durable (a standalone reader's checkpoint, a Spark batch's commit) and are never read
back: a query restarts from its own checkpoint, whatever the group says. The commits of
a "simple" group (no member ever subscribes, each reader commits its own partitions)
are asynchronous and never fail the read: a refusal (an ACL, a group that has members
of its own) is logged once per kind, with the group named.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .cluster import TopicPartitionKey
from .options import KafkaOptions

log = logging.getLogger("sluicegate.connectors.kafka")


class GroupOffsetCommitter:
    """Commits positions (the next offset to read, Kafka's meaning of a committed offset)
    to ``options.commit_group``; a consumer of its own, made at the first commit."""

    def __init__(self, options: KafkaOptions) -> None:
        assert options.commit_group is not None
        self.group = options.commit_group
        self._options = options
        self._consumer: Any | None = None
        self._said: set[str] = set()
        self.committed: dict[TopicPartitionKey, int] = {}
        """What the broker accepted last, by partition (for tests and logs)."""
        self._asked: dict[TopicPartitionKey, int] = {}

    def commit(self, positions: Mapping[TopicPartitionKey, int]) -> None:
        """Commit ``positions`` in the background, those that moved since the last ask
        (a Spark query at rest tells the same ones every trigger); never raises."""
        positions = {key: offset for key, offset in positions.items() if self._asked.get(key) != offset}
        if not positions:
            return
        try:
            consumer = self._client()
            consumer.poll(0)  # serves the callbacks of earlier commits
            offsets = [TopicPartition(topic, partition, offset) for (topic, partition), offset in positions.items()]
            consumer.commit(offsets=offsets, asynchronous=True)
            self._asked.update(positions)
        except (KafkaException, RuntimeError) as exc:
            self._say(type(exc).__name__, f"cannot commit positions to consumer group {self.group}: {exc}")

    def close(self, wait_s: float = 5.0) -> None:
        """Deliver what is pending (for up to ``wait_s``: a reader's last checkpoint is
        its last commit), then close."""
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        try:
            deadline = time.monotonic() + wait_s
            while self._pending() and time.monotonic() < deadline:
                consumer.poll(0.05)
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("closing the committer of group %s: %r", self.group, exc)

    def _pending(self) -> bool:
        return any(self.committed.get(key) != offset for key, offset in self._asked.items())

    def _client(self) -> Any:
        if self._consumer is None:
            config = self._options.client_config(
                **{"group.id": self.group, "enable.auto.commit": False, "on_commit": self._on_commit}
            )
            self._consumer = Consumer(config)
        return self._consumer

    def _on_commit(self, error: Any, partitions: list[Any]) -> None:
        if error is not None:
            self._say(str(error.name()), f"consumer group {self.group} refused the source's positions: {error.str()}")
            for tp in partitions:  # refused: not pending any more
                self._asked.pop((tp.topic, tp.partition), None)
            return
        for tp in partitions:
            if tp.error is not None:
                self._asked.pop((tp.topic, tp.partition), None)
                self._say(
                    str(tp.error.name()),
                    f"consumer group {self.group} refused {tp.topic}-{tp.partition}: {tp.error.str()}",
                )
            else:
                self.committed[(tp.topic, tp.partition)] = tp.offset

    def _say(self, kind: str, message: str) -> None:
        if kind not in self._said:  # once per kind: the read goes on, a log every second would not help
            self._said.add(kind)
            log.warning("%s (lag monitoring only: the read goes on)", message)
