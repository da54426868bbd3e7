"""Prometheus metrics of a Spark query's reader subtasks, served from the driver
(the ``metricsPort`` option; 0, the default: off).

Executors read the ranges the driver planned and report nothing back, so the figures
are the driver's own knowledge: splits owned and attempts per subtask, the records of
the batches Spark made durable (the ``rows`` of each acknowledged offset: rate() of
``sluicegate_spark_records_acknowledged_total`` is the query's records/s), the
watermark each subtask reports, the announced low watermark, fences, dead letters,
and how long acknowledging an offset to the coordinator took. No HTTP server runs on
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


class DriverView(Protocol):
    def metrics_snapshot(self) -> DriverSnapshot: ...


class _DriverCollector(Collector):
    def __init__(self, view: DriverView) -> None:
        self._view = view

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


class DriverMetrics:
    def __init__(self, view: DriverView) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_DriverCollector(view))
        self.ack_seconds = Histogram(
            "sluicegate_spark_checkpoint_ack_seconds",
            "Time to acknowledge one durable offset to the coordinator (all subtasks)",
            labelnames=["source"],
            buckets=ACK_BUCKETS,
            registry=self.registry,
        )
        self._server = MetricsServer(self.registry)

    async def serve(self, port: int) -> None:
        await self._server.start(port)

    async def close(self) -> None:
        await self._server.close()
