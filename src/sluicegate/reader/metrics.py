"""Prometheus metrics of one reader host, served on ``/metrics`` (``--metrics-port``).

Everything but the checkpoint latency is read from the host at scrape time (a
collector, as the coordinator's), so the read loop updates nothing. The server runs
on the reader's own event loop (metrics_server.py), so a scrape never races the loop.

Labels: ``source`` and ``subtask`` on every series. Per-split series (records left to
each split's end) only with ``split_labels`` (``--metrics-split-labels``): a reader
may own thousands of splits, and every split id would be a series of its own; the
total over the reader's splits is always there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sluicegate.metrics_server import MetricsServer

CHECKPOINT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class ReaderSnapshot:
    """The reader's figures at one scrape."""

    source: str
    subtask: int
    registered: bool
    splits_owned: int
    records_read: int
    records_written: int
    watermark_ms: int | None
    idle: bool
    low_watermark_ms: int | None
    records_to_end: dict[str, int]
    splits_finished: int
    checkpoints: int
    registrations: int
    fenced: int
    dead_letters: int


class ReaderView(Protocol):
    """What the collector reads (the ReaderHost is one; this module does not import it)."""

    def metrics_snapshot(self) -> ReaderSnapshot | None: ...


class _ReaderCollector(Collector):
    def __init__(self, view: ReaderView, split_labels: bool) -> None:
        self._view = view
        self._split_labels = split_labels

    def collect(self) -> Iterator[Any]:
        snap = self._view.metrics_snapshot()
        if snap is None:  # not started yet: no subtask to label with
            return
        labels = ["source", "subtask"]
        values = [snap.source, str(snap.subtask)]

        def gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
            family = GaugeMetricFamily(f"sluicegate_reader_{name}", doc, labels=labels)
            if value is not None:
                family.add_metric(values, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(f"sluicegate_reader_{name}", doc, labels=labels)
            family.add_metric(values, value)
            return family

        yield gauge("registered", "1 while the reader has a live attempt", 1.0 if snap.registered else 0.0)
        yield gauge("splits_owned", "Splits this reader owns now", snap.splits_owned)
        yield counter("records_read", "Records read (rate(): records/s)", snap.records_read)
        yield counter("records_written", "Records committed to the output", snap.records_written)
        yield gauge("watermark_ms", "The reader's watermark as it reports it (event time, ms)", snap.watermark_ms)
        yield gauge("idle", "1 while every split is idle", 1.0 if snap.idle else 0.0)
        yield gauge("low_watermark_ms", "The source's low watermark as last announced", snap.low_watermark_ms)
        yield gauge(
            "records_to_end",
            "Records left before the end of the owned splits whose end the connector knows",
            sum(snap.records_to_end.values()) if snap.records_to_end else None,
        )
        yield gauge("splits_with_known_end", "Owned splits whose end the connector knows", len(snap.records_to_end))
        yield counter("splits_finished", "Splits this process finished", snap.splits_finished)
        yield counter("checkpoints", "Checkpoints committed", snap.checkpoints)
        yield counter("registrations", "Registrations sent (one per attempt)", snap.registrations)
        yield counter("fenced", "Times this process was fenced and registered again", snap.fenced)
        yield counter("dead_letters", "Control records that did not decode (dead-lettered, skipped)", snap.dead_letters)
        if self._split_labels:
            per_split = GaugeMetricFamily(
                "sluicegate_reader_split_records_to_end",
                "Records left before the end of one split",
                labels=[*labels, "split"],
            )
            for split_id, left in sorted(snap.records_to_end.items()):
                per_split.add_metric([*values, split_id], left)
            yield per_split


class ReaderMetrics:
    def __init__(self, view: ReaderView, *, split_labels: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_ReaderCollector(view, split_labels))
        self.checkpoint_seconds = Histogram(
            "sluicegate_reader_checkpoint_seconds",
            "Duration of one checkpoint transaction (flush, state, ack, commit)",
            labelnames=["source", "subtask"],
            buckets=CHECKPOINT_BUCKETS,
            registry=self.registry,
        )
        self._server = MetricsServer(self.registry)

    def observe_checkpoint(self, source: str, subtask: int, seconds: float) -> None:
        self.checkpoint_seconds.labels(source, str(subtask)).observe(seconds)

    async def serve(self, port: int) -> None:
        """Serve /metrics on ``port`` (on the caller's loop)."""
        await self._server.start(port)

    async def close(self) -> None:
        await self._server.close()
