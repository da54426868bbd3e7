"""Operations endpoints on the Faust web server: /health, /metrics (Prometheus),
/sources/{S} (a JSON snapshot of one source's ownership, attempts and seq counters).

The Prometheus collector reads the runners at scrape time, so nothing on the
coordinator's hot path updates metrics. It reads a core on the core's step thread, between
two steps (``SourceRunner.read_core``): never half-way through a step, and never missing
the core because a step happened to be running when the scrape came.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import faust
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sluicegate.coordinator.core import CoordinatorCore
from sluicegate.coordinator.settings import CoordinatorSettings
from sluicegate.coordinator.source_runner import RunnerState, SourceRunner


class SourceRunners(Protocol):
    """What the endpoints read: the worker's settings and the runners it has now
    (faust_app.SourceRunners is one; this module does not import the app)."""

    @property
    def settings(self) -> CoordinatorSettings: ...

    @property
    def runners(self) -> Mapping[str, SourceRunner]: ...


READ_WAIT_S = 0.5
"""How long a request waits for a running step to end before it is answered without the
core: half of the shortest scrape timeout Prometheus has (1 s, at a 1 s interval)."""


@dataclass(frozen=True)
class CoreReading:
    """What ``/metrics`` serves of one source's core, read between two steps."""

    live_readers: int
    owned_splits: int
    epoch: int
    inbox_offset: int | None
    low_watermark: int | None
    counters: dict[str, int]
    enumerator_counters: dict[str, int]
    enumerator_gauges: dict[str, float]


def read_core(core: CoordinatorCore[Any]) -> CoreReading:
    group = core.enumerator_metrics
    return CoreReading(
        live_readers=len(core.live_subtasks()),
        owned_splits=core.tracker.total_owned(),
        epoch=core.epoch,
        inbox_offset=core.inbox_offset,
        low_watermark=core.watermarks.state.low_watermark,
        counters=dict(core.metrics.counters),
        enumerator_counters=dict(group.counters),
        enumerator_gauges=dict(group.gauges),
    )


def core_snapshot(core: CoordinatorCore[Any]) -> dict[str, Any]:
    """The core's part of ``/sources/{S}``."""
    return {
        "epoch": core.epoch,
        "cseq": core.cseq,
        "inbox_offset": core.inbox_offset,
        "low_watermark": core.watermarks.state.low_watermark,
        "finished": core.is_finished(),
        "counters": dict(core.metrics.counters),
        "enumerator_metrics": {
            "counters": dict(core.enumerator_metrics.counters),
            "gauges": dict(core.enumerator_metrics.gauges),
        },
        "subtasks": [
            {
                "subtask": slot.subtask,
                "state": slot.state.value,
                "attempt": slot.attempt,
                "location": slot.location,
                "seq": slot.seq,
                "applied_seq": core.tracker.applied_seq(slot.subtask),
                "checkpoint_id": slot.checkpoint_id,
                "owned_splits": sorted(core.tracker.owned_ids(slot.subtask)),
                "no_more_splits": slot.no_more_splits,
            }
            for slot in core.slots
        ],
    }


async def source_snapshot(runner: SourceRunner) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": runner.source,
        "state": runner.state.value,
        "stats": vars(runner.stats),
        "step_running_s": round(runner.step_running_s(), 3),
    }
    out.update(await runner.read_core(core_snapshot, READ_WAIT_S) or {})
    return out


async def read_cores(runners: SourceRunners) -> dict[str, CoreReading]:
    """Every runner's core, each read between two of its steps; a source whose step runs
    past ``READ_WAIT_S`` is left out (``sluicegate_step_running_seconds`` says so)."""
    names = sorted(runners.runners)
    readings = await asyncio.gather(*(runners.runners[n].read_core(read_core, READ_WAIT_S) for n in names))
    return {name: reading for name, reading in zip(names, readings, strict=True) if reading is not None}


class _RunnerCollector(Collector):
    def __init__(self, runners: SourceRunners, readings: Mapping[str, CoreReading]) -> None:
        self._runners = runners
        self._readings = readings

    def collect(self) -> Iterator[Any]:
        labels = ["source"]
        readers = GaugeMetricFamily("sluicegate_registered_readers", "Live reader attempts", labels=labels)
        assigned = GaugeMetricFamily("sluicegate_assigned_splits", "Splits owned by subtasks", labels=labels)
        epoch = GaugeMetricFamily("sluicegate_coordinator_epoch", "Epoch of the active coordinator", labels=labels)
        lag = GaugeMetricFamily(
            "sluicegate_inbox_records_pending", "Inbox records read but not committed", labels=labels
        )
        commit = GaugeMetricFamily(
            "sluicegate_commit_latency_seconds", "Duration of the last transaction", labels=labels
        )
        active = GaugeMetricFamily("sluicegate_active_source", "1 if this worker coordinates the source", labels=labels)
        low_watermark = GaugeMetricFamily(
            "sluicegate_low_watermark_ms",
            "The source's low watermark (event time, ms since the epoch) as the coordinator holds it",
            labels=labels,
        )
        counters = CounterMetricFamily(
            "sluicegate_coordinator_events",
            "Coordinator counters (fenced messages, dead letters ...)",
            labels=["source", "event"],
        )
        enumerator_events = CounterMetricFamily(
            "sluicegate_enumerator_events",
            "The enumerator's own counters (its context's metrics group)",
            labels=["source", "event"],
        )
        enumerator_gauges = GaugeMetricFamily(
            "sluicegate_enumerator_gauge",
            "The enumerator's own gauges (its context's metrics group), by name",
            labels=["source", "name"],
        )
        step = GaugeMetricFamily(
            "sluicegate_step_running_seconds",
            "How long the core's running step has run (0 between steps); the core's own series "
            f"are left out of a scrape while a step runs longer than {READ_WAIT_S} s",
            labels=labels,
        )
        for name in sorted(s.source for s in self._runners.settings.sources):
            runner = self._runners.runners.get(name)
            active.add_metric([name], 1.0 if runner is not None and runner.state is RunnerState.ACTIVE else 0.0)
            if runner is None:
                continue
            step.add_metric([name], runner.step_running_s())
            core = self._readings.get(name)
            if core is None:
                continue
            readers.add_metric([name], core.live_readers)
            assigned.add_metric([name], core.owned_splits)
            epoch.add_metric([name], core.epoch)
            committed = runner.committed_offset
            lag.add_metric(
                [name], 0 if core.inbox_offset is None or committed is None else core.inbox_offset - committed
            )
            commit.add_metric([name], runner.stats.last_commit_ms / 1000)
            if core.low_watermark is not None:  # a source without event time has none
                low_watermark.add_metric([name], core.low_watermark)
            for event, value in sorted(core.counters.items()):
                counters.add_metric([name, event], value)
            for event, count in sorted(core.enumerator_counters.items()):
                enumerator_events.add_metric([name, event], count)
            for gauge, level in sorted(core.enumerator_gauges.items()):
                enumerator_gauges.add_metric([name, gauge], level)
        yield from (readers, assigned, epoch, lag, commit, active, low_watermark, step)
        yield from (counters, enumerator_events, enumerator_gauges)


async def exposition(runners: SourceRunners) -> bytes:
    """The ``/metrics`` page: the runners as they are now, each core read between two steps."""
    registry = CollectorRegistry()
    registry.register(_RunnerCollector(runners, await read_cores(runners)))
    return generate_latest(registry)


class CoordinatorMetrics:
    def __init__(self, runners: SourceRunners) -> None:
        self.runners = runners

    def install(self, app: faust.App) -> None:
        runners = self.runners

        @app.page("/health")
        async def health(web: Any, request: Any) -> Any:
            failed = [r.source for r in runners.runners.values() if r.state is RunnerState.FAILED]
            body = {
                "status": "failing" if failed else "ok",
                "active_sources": sorted(runners.runners),
                "failed_sources": failed,
            }
            return web.json(body, status=503 if failed else 200)

        @app.page("/metrics")
        async def metrics(web: Any, request: Any) -> Any:
            return web.bytes(await exposition(runners), content_type="text/plain; version=0.0.4")

        @app.page("/sources/{source}")
        async def source(web: Any, request: Any, source: str) -> Any:
            runner = runners.runners.get(source)
            if runner is None:
                return web.json({"error": f"this worker is not the active coordinator of {source!r}"}, status=404)
            return web.json(await source_snapshot(runner))
