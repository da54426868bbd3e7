"""``audit --follow`` over Kafka: read both control topics as they grow, feed an
``AuditFollower``, report what it finds, and serve Prometheus metrics.

The consumer is the batch audit's (assigned, read_committed, from the beginning);
it never stops at an end. Lag is measured once a second (one ListOffsets request)
as the records between each partition's position and its last stable offset.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sluicegate.audit.follow import AuditFollower, Finding, FollowSnapshot
from sluicegate.audit.kafka_source import control_partitions
from sluicegate.audit.replay import ReplayRecord, topic_names
from sluicegate.kafka.clients import control_consumer
from sluicegate.protocol.topics import ControlTopics

_BATCH = 10_000
LAG_INTERVAL_S = 1.0


class FollowCollector(Collector):
    def __init__(self, source: str, clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.snapshot = FollowSnapshot()
        self._clock = clock
        """Wall time in seconds: a release's age is taken against the ``ts`` of its record."""

    def collect(self) -> Iterator[Any]:
        s = self.snapshot
        counter, gauge = CounterMetricFamily, GaugeMetricFamily
        yield self._family(counter, "records_checked", "Records applied to the model.", s.applied)
        yield self._family(counter, "records_received", "Records read.", s.received, "topic")
        yield self._family(counter, "undecodable_records", "Records that do not decode.", s.undecodable, "topic")
        violations = {"any": sum(s.violations.values()), **s.violations}
        yield self._family(counter, "violations", "Violations found.", violations, "kind")
        yield self._family(gauge, "lag_records", "Records behind the last stable offset.", s.lag, "topic")
        yield self._family(gauge, "splits", "Splits by state.", s.splits, "state")
        yield self._family(gauge, "readers_live", "Subtasks with a live attempt.", s.readers_live)
        yield self._family(gauge, "waiting_records", "Records held until they are next in order.", s.waiting)
        yield self._family(
            gauge,
            "oldest_unowned_split_seconds",
            "How long the split released longest ago has had no owner (0: every released split has one).",
            self._unowned_for(s.oldest_unowned_ms),
        )

    def _unowned_for(self, released_ms: int | None) -> float:
        return 0.0 if released_ms is None else max(0.0, self._clock() - released_ms / 1000)

    def _family(
        self,
        kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
        name: str,
        doc: str,
        values: float | dict[str, int],
        label: str | None = None,
    ) -> CounterMetricFamily | GaugeMetricFamily:
        """``sluicegate_audit_<name>`` of this source: one value, or one per ``label`` value."""
        family = kind(f"sluicegate_audit_{name}", doc, labels=["source"] if label is None else ["source", label])
        if not isinstance(values, dict):
            family.add_metric([self.source], values)
        else:
            for key, n in values.items():
                family.add_metric([self.source, key], n)
        return family


def serve_metrics(source: str, port: int) -> FollowCollector:
    """Serve /metrics on ``port`` (all interfaces) from a collector the loop updates."""
    registry = CollectorRegistry()
    collector = FollowCollector(source)
    registry.register(collector)
    start_http_server(port, registry=registry)
    return collector


async def follow_control_topics(
    bootstrap: str,
    source: str,
    ns: str,
    on_findings: Callable[[list[Finding]], bool],
    *,
    collector: FollowCollector | None = None,
    on_progress: Callable[[FollowSnapshot], None] | None = None,
    split_id: str | None = None,
    on_split_events: Callable[[list[tuple[ReplayRecord, str]]], None] | None = None,
    on_reader_events: Callable[[list[str]], None] | None = None,
    progress_interval_s: float = 30.0,
    stop: asyncio.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Follow ``source`` until ``stop`` is set or ``on_findings`` returns False; the
    progress once more when ``stop`` ends it (the summary of the run)."""
    inbox_topic, readers_topic = topic_names(source, ns)
    state_topic = ControlTopics.for_source(source, ns).coordinator_state
    consumer = control_consumer(bootstrap, f"sluicegate-audit-follow-{source}")
    try:
        await consumer.start()
        partitions = await control_partitions(consumer, bootstrap, (inbox_topic, readers_topic, state_topic))
        tps = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
        inbox_tp = TopicPartition(inbox_topic, 0)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        follower = AuditFollower(
            source, len(partitions[readers_topic]), inbox_topic, readers_topic, clock, split_id=split_id
        )
        lag: dict[str, int] = {}
        # the state topic is read for the coordinator's progress, and not counted as lag
        checked = [tp for tp in tps if tp.topic != state_topic]
        lag_at = progress_at = clock()
        while stop is None or not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200, max_records=_BATCH)
            for tp, messages in sorted(batches.items(), key=lambda item: (item[0].topic, item[0].partition)):
                for m in messages:
                    if tp.topic == inbox_topic:
                        follower.inbox(m.offset, m.value)
                    elif tp.topic == state_topic:
                        follower.coordinator_state(m.key, m.value)
                    else:
                        follower.readers(tp.partition, m.offset, m.value)
            follower.inbox_read_to(await consumer.position(inbox_tp))
            findings = follower.step()
            if follower.events and on_split_events is not None:
                on_split_events(follower.events)
            follower.events = []
            if follower.reader_events and on_reader_events is not None:
                on_reader_events(follower.reader_events)
            follower.reader_events = []
            if clock() - lag_at >= LAG_INTERVAL_S:
                lag, lag_at = await _lag(consumer, checked), clock()
            snapshot = FollowSnapshot.of(follower, lag)
            if collector is not None:
                collector.snapshot = snapshot
            if findings and not on_findings(findings):
                return
            if on_progress is not None and clock() - progress_at >= progress_interval_s:
                on_progress(snapshot)
                progress_at = clock()
        if on_progress is not None:
            on_progress(FollowSnapshot.of(follower, lag))
    finally:
        await consumer.stop()


async def _lag(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> dict[str, int]:
    ends = await consumer.end_offsets(tps)
    lag: dict[str, int] = {}
    for tp in tps:
        lag[tp.topic] = lag.get(tp.topic, 0) + max(0, ends[tp] - await consumer.position(tp))
    return lag
