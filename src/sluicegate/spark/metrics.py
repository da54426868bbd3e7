"""Prometheus metrics of a Spark query's reader subtasks, served from the driver
(the ``metricsPort`` option; 0, the default: off).

The driver's own knowledge: splits owned and attempts per subtask, the records of
the batches Spark made durable (the ``rows`` of each acknowledged offset: rate() of
``sluicegate_spark_records_acknowledged_total`` is the query's records/s), the
watermark each subtask reports, the announced low watermark, fences, dead letters,
how long acknowledging an offset to the coordinator took, and each split's lag (the
records available at the last planning and not planned yet). And what the executors
read, which each task reports to the driver when it finishes (read_reports.py): rows,
Arrow bytes and seconds per subtask, rows and bytes per split. No HTTP server runs on
executors. Read at scrape time on the driver's loop (metrics_server.py), like the
reader host's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sluicegate.metrics_server import MetricsServer
from sluicegate.spark.read_reports import REPORT_PATH, ReadTally

ACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class SubtaskFigures:
    registered: bool
    splits_owned: int
    watermark_ms: int | None


@dataclass(frozen=True)
class DriverSnapshot:
    source: str
    subtasks: dict[int, SubtaskFigures]
    records_acknowledged: int
    low_watermark_ms: int | None
    registrations: int
    fenced: int
    acks: int
    splits_finished: int
    dead_letters: int
    split_lag: dict[str, tuple[int, int]]
    """Split id -> (subtask, records available at the last planning and not planned)."""


class DriverView(Protocol):
    def metrics_snapshot(self) -> DriverSnapshot: ...


class _DriverCollector(Collector):
    def __init__(self, view: DriverView, reads: ReadTally) -> None:
        self._view = view
        self._reads = reads

    def collect(self) -> Iterator[Any]:
        snap = self._view.metrics_snapshot()
        per = ["source", "subtask"]
        owned = GaugeMetricFamily("sluicegate_spark_splits_owned", "Splits a subtask owns now", labels=per)
        registered = GaugeMetricFamily(
            "sluicegate_spark_registered", "1 while a subtask has a live attempt", labels=per
        )
        watermark = GaugeMetricFamily(
            "sluicegate_spark_watermark_ms", "A subtask's watermark (of what is durably planned)", labels=per
        )
        for s, fig in sorted(snap.subtasks.items()):
            labels = [snap.source, str(s)]
            owned.add_metric(labels, fig.splits_owned)
            registered.add_metric(labels, 1.0 if fig.registered else 0.0)
            if fig.watermark_ms is not None:
                watermark.add_metric(labels, fig.watermark_ms)
        yield from (owned, registered, watermark)
        low = GaugeMetricFamily("sluicegate_spark_low_watermark_ms", "The announced low watermark", labels=["source"])
        if snap.low_watermark_ms is not None:
            low.add_metric([snap.source], snap.low_watermark_ms)
        yield low
        for name, doc, value in (
            (
                "records_acknowledged",
                "Records of the batches Spark made durable (offset rows)",
                snap.records_acknowledged,
            ),
            ("registrations", "Registrations sent", snap.registrations),
            ("fenced", "Times a subtask was fenced and registered again", snap.fenced),
            ("checkpoint_acks", "Offsets acknowledged to the coordinator, per subtask", snap.acks),
            ("splits_finished", "Splits reported finished", snap.splits_finished),
            ("dead_letters", "Control records that did not decode (dead-lettered, skipped)", snap.dead_letters),
        ):
            family = CounterMetricFamily(f"sluicegate_spark_{name}", doc, labels=["source"])
            family.add_metric([snap.source], value)
            yield family
        lag = GaugeMetricFamily(
            "sluicegate_spark_split_lag_records",
            "Records of a split available at the last planning and not planned for reading yet",
            labels=["source", "subtask", "split"],
        )
        for split_id, (subtask, behind) in sorted(snap.split_lag.items()):
            lag.add_metric([snap.source, str(subtask), split_id], behind)
        yield lag
        yield from self._executor_reads(snap.source)

    def _executor_reads(self, source: str) -> Iterator[Any]:
        """What the executors reported reading (read_reports.py)."""
        tally = self._reads
        per = ["source", "subtask"]
        rows = CounterMetricFamily("sluicegate_spark_rows_read", "Rows executors read, per subtask", labels=per)
        size = CounterMetricFamily(
            "sluicegate_spark_bytes_read", "Arrow bytes executors handed to Spark, per subtask", labels=per
        )
        seconds = CounterMetricFamily(
            "sluicegate_spark_read_seconds", "Executor time from a task's first read to its last batch", labels=per
        )
        tasks = CounterMetricFamily("sluicegate_spark_read_tasks", "Read tasks reported, per subtask", labels=per)
        for subtask, sub in sorted(tally.subtasks.items()):
            labels = [source, str(subtask)]
            rows.add_metric(labels, sub.rows)
            size.add_metric(labels, sub.bytes)
            seconds.add_metric(labels, sub.seconds)
            tasks.add_metric(labels, sub.tasks)
        yield from (rows, size, seconds, tasks)
        per_split = ["source", "subtask", "split"]
        split_rows = CounterMetricFamily(
            "sluicegate_spark_split_rows_read",
            "Rows executors read, per split (the most recent splits)",
            labels=per_split,
        )
        split_bytes = CounterMetricFamily(
            "sluicegate_spark_split_bytes_read", "Arrow bytes executors read, per split", labels=per_split
        )
        for split_id, fig in tally.splits.items():
            labels = [source, str(fig.subtask), split_id]
            split_rows.add_metric(labels, fig.rows)
            split_bytes.add_metric(labels, fig.bytes)
        yield from (split_rows, split_bytes)
        refused = CounterMetricFamily(
            "sluicegate_spark_read_reports_refused",
            "POSTs to /reads that were not this query's reports",
            labels=["source"],
        )
        refused.add_metric([source], tally.refused)
        yield refused


class DriverMetrics:
    def __init__(self, view: DriverView, source: str) -> None:
        self.registry = CollectorRegistry()
        self.reads = ReadTally(source)
        self.registry.register(_DriverCollector(view, self.reads))
        self.ack_seconds = Histogram(
            "sluicegate_spark_checkpoint_ack_seconds",
            "Time to acknowledge one durable offset to the coordinator (all subtasks)",
            labelnames=["source"],
            buckets=ACK_BUCKETS,
            registry=self.registry,
        )
        self._server = MetricsServer(self.registry, posts={REPORT_PATH: self.reads.add_raw})

    async def serve(self, port: int) -> None:
        await self._server.start(port)

    async def close(self) -> None:
        await self._server.close()
