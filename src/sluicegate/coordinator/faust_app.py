"""The coordinator deployed as a Faust (faust-streaming) app.

One agent consumes the source's inbox topic (NS.S.coordinator, one partition,
so the coordinator sees one total order of its readers' messages) and hands
each record to the CoordinatorRuntime; a timer drives session timeouts and
watermark announcements; outgoing records go to NS.S.readers through Faust's
producer, partition = subtask.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path
from typing import Any

import faust

from sluicegate.connectors import load_source
from sluicegate.coordinator.core import CoordinatorCore
from sluicegate.coordinator.runtime import CoordinatorRuntime, OutgoingRecord
from sluicegate.coordinator.settings import CoordinatorSettings
from sluicegate_topics import ControlTopics

log = logging.getLogger("sluicegate.coordinator")

PROGRESS_INTERVAL_S = 5.0


def build_app(settings: CoordinatorSettings, datadir: Path | None = None) -> faust.App:
    """A Faust app coordinating one source. Topics must exist (see ensure_topics)."""
    source = load_source(settings.connector, settings.options)
    topics = ControlTopics.for_source(settings.source, settings.namespace)
    app_id = f"{settings.namespace}.{settings.source}.coordinator-app"
    datadir = datadir or Path(tempfile.gettempdir()) / "sluicegate-faust" / app_id
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        app_id,
        # sluicegate:// is Faust's aiokafka transport reading read_committed (faust_transport.py).
        broker=[f"sluicegate://{b.strip()}" for b in settings.bootstrap_servers.split(",")],
        datadir=str(datadir),
        web_enabled=settings.web_port is not None,
        web_port=settings.web_port or 6066,
        # A worker joins its group in seconds instead of Faust's ~30 s defaults.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        broker_rebalance_timeout=10.0,
        broker_commit_every=1,
        broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest",
        producer_linger=0.0,
        topic_allow_declare=False,
        topic_disable_leader=True,
        key_serializer="raw",
        value_serializer="raw",
    )
    inbox = app.topic(topics.coordinator, key_type=bytes, value_type=bytes, internal=False)
    faust_topics = {
        name: app.topic(name, key_type=bytes, value_type=bytes, internal=False)
        for name in (topics.readers, topics.dead_letter)
    }

    async def send(records: list[OutgoingRecord]) -> None:
        futures = [
            await faust_topics[r.topic].send(key=r.key, value=r.value, partition=r.partition, headers=r.headers)
            for r in records
        ]
        # Wait for the broker's acks: a record the core considers sent must not vanish silently.
        await asyncio.gather(*futures)

    core: CoordinatorCore[Any] = CoordinatorCore(source, settings.core_config())
    runtime = CoordinatorRuntime(core, topics.readers, topics.dead_letter, send)
    started = asyncio.Event()
    app.sluicegate_runtime = runtime  # type: ignore[attr-defined]  # for tests and ops endpoints

    @app.task
    async def start_enumerator() -> None:
        for noisy in ("faust", "mode", "aiokafka"):
            logging.getLogger(noisy).setLevel(max(logging.getLogger(noisy).getEffectiveLevel(), logging.WARNING))
        await runtime.start()
        started.set()
        log.info(
            "coordinator for source %s (connector %s, %d subtasks, epoch %d) is serving %s",
            settings.source,
            settings.connector,
            settings.max_parallelism,
            core.epoch,
            topics.coordinator,
        )

    @app.agent(inbox)
    async def inbox_agent(stream: Any) -> None:
        async for event in stream.events():
            await started.wait()
            msg = event.message
            await runtime.on_record(msg.topic, msg.partition, msg.offset, msg.key, msg.value)

    @app.timer(interval=settings.tick_interval_ms / 1000)
    async def tick() -> None:
        if started.is_set():
            await runtime.on_tick()

    @app.timer(interval=PROGRESS_INTERVAL_S)
    async def progress() -> None:
        if started.is_set():
            log.info("%s", describe_progress(runtime))

    @app.on_before_shutdown.connect
    async def _on_shutdown(app: faust.App, **kwargs: Any) -> None:
        await runtime.close()
        log.info("coordinator for source %s stopped: %s", settings.source, describe_progress(runtime))

    return app


def describe_progress(runtime: CoordinatorRuntime) -> str:
    core = runtime.core
    counters = core.metrics.counters
    return (
        f"{len(core.live_subtasks())}/{core.config.max_parallelism} readers live, "
        f"{core.tracker.total_owned()} splits owned, {counters['splits_assigned']} assigned in all, "
        f"{runtime.records_in} records in, {runtime.records_out} out, "
        f"{counters['fenced_messages']} fenced, {runtime.dead_letters} dead-lettered"
        + (", finished" if core.is_finished() else "")
    )
