"""The coordinator deployed as a Faust (faust-streaming) app.

Faust does what it is good at: workers join one consumer group, and Faust's
partition assignment gives each partition of the app's leadership topic
(``<app id>.leadership``, one partition per source, nothing written to it) to
exactly one worker; the holder of partition i is the active coordinator of the
i-th source (sorted by name), the others are its standbys and take over when the
group rebalances. (Subscribing to the sources' one-partition inbox topics instead
would put every source on one worker: Faust's assignor treats topics with equal
partition counts as copartitioned and gives all their partitions 0 to the same
worker.) Faust also runs the web server (/health, /metrics, /sources/{S}) and the
worker lifecycle.

The exactly-once work itself is done by a SourceRunner per active source with
aiokafka's transactional producer (see source_runner.py and docs/architecture.md
for why not Faust's own exactly-once mode). A runner starts when its inbox
partition is assigned to this worker and stops when it is taken away; if two
workers briefly both believe they are active, Kafka's producer fencing lets only
the newer one commit.

Fast takeover (``takeover_silence_ms``, takeover.py): every worker also watches the
state topics of the sources it does not run, and takes a source over once its
coordinator has committed nothing for that long, without waiting for the group
session to time out. Such a runner runs until the next rebalance, where the Faust
assignment is followed again: a worker not assigned the source stops its runner, the
assigned one starts its own (fencing any other).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faust
from aiokafka import TopicPartition

from sluicegate.api.source import INPUT_WAIT_S
from sluicegate.coordinator.metrics import CoordinatorMetrics
from sluicegate.coordinator.new_source import check_new_source_inputs
from sluicegate.coordinator.restart_backoff import RestartBackoff
from sluicegate.coordinator.settings import CoordinatorSettings
from sluicegate.coordinator.silence import liveness_interval_ms
from sluicegate.coordinator.source_runner import RunnerState, SourceRunner
from sluicegate.coordinator.takeover import TakeoverWatch
from sluicegate.kafka.security import current_security
from sluicegate.kafka.startup_noise import quiet_startup_noise
from sluicegate.protocol.topics import ControlTopics, leadership_topic_spec

log = logging.getLogger("sluicegate.coordinator")

PROGRESS_INTERVAL_S = 5.0


class DefinitionRefused(RuntimeError):
    """A runner of this worker brought another definition of its source than the committed one."""


class SourceRunners:
    """The runners of the sources this worker is active for, kept in line with the
    Faust assignment."""

    def __init__(self, settings: CoordinatorSettings, on_refused: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self._on_refused = on_refused
        """Called when a runner is refused (another definition of its source): the worker stops."""
        self.runners: dict[str, SourceRunner] = {}
        self.assigned: set[str] = set()
        self.leadership = leadership_topic_spec(settings.group_id, len(settings.sources))
        self._by_partition = dict(enumerate(sorted(s.source for s in settings.sources)))
        self._backoff: dict[str, RestartBackoff] = {}
        self.closing = False
        self._standby: set[str] = set()
        self._said_finished: set[str] = set()
        self._not_before: dict[str, float] = {}
        """Source -> time.monotonic() before which this worker does not take it over
        again after its runner here failed (the restart backoff, for takeovers too)."""

    async def on_assignment(self, assigned: set[TopicPartition]) -> None:
        sources = {
            self._by_partition[tp.partition]
            for tp in assigned
            if tp.topic == self.leadership.name and tp.partition in self._by_partition
        }
        self.assigned = sources
        self._say_standby(set(self._by_partition.values()) - sources)
        for name in sorted(set(self.runners) - sources):
            log.info("source %s moved to another worker; stopping its coordinator here", name)
            await self.runners.pop(name).stop()
        for name in sorted(sources - set(self.runners)):
            self._start(name)

    def _say_standby(self, standby: set[str]) -> None:
        """Once per change: which sources this worker stands by for and what would make it
        take one over (a standby that says nothing looks like a coordinator that hangs)."""
        if standby == self._standby:
            return
        self._standby = standby
        if not standby:
            return
        silence_ms = self.settings.takeover_silence_ms
        watch = "takes one over when the group gives it to this worker"
        if silence_ms:
            topics = sorted(ControlTopics.for_source(n, self.settings.namespace).coordinator_state for n in standby)
            watch += f" or when its coordinator commits nothing to {', '.join(topics)} for {silence_ms} ms"
        log.info(
            "this worker is a standby for source%s %s: another worker coordinates %s; it %s",
            "s" if len(standby) > 1 else "",
            ", ".join(sorted(standby)),
            "them" if len(standby) > 1 else "it",
            watch,
        )

    def say_finished(self) -> None:
        """Once per source: a bounded source whose splits are all read is finished, and
        why its coordinator stays up anyway (otherwise it looks like a hang)."""
        for name, runner in sorted(self.runners.items()):
            core = runner.core_at_rest
            if name in self._said_finished or core is None or not core.is_finished():
                continue
            self._said_finished.add(name)
            log.info(
                "source %s is finished: every split was read and every reader was told there are no more. "
                "This coordinator stays up so that a reader or a Spark query restarting from a checkpoint "
                "finds its source; stop it with Ctrl-C (SIGTERM)",
                name,
            )

    def watched(self) -> set[str]:
        """The sources whose coordinator runs elsewhere, if anywhere: the ones to watch."""
        return set(self._by_partition.values()) - set(self.runners)

    def take_over(self, name: str, silent_for_s: float) -> None:
        """The coordinator of ``name`` fell silent: run it here. Starting the runner
        fences the silent one (init_transactions), then restores from the last commit."""
        if self.closing or name in self.runners or time.monotonic() < self._not_before.get(name, 0.0):
            return
        log.warning(
            "source %s: no commit seen for %.1f s; taking over (fencing the silent coordinator)", name, silent_for_s
        )
        self._start(name)

    def _start(self, name: str) -> None:
        silence_ms = self.settings.takeover_silence_ms
        runner = SourceRunner(
            self.settings.source(name),
            self.settings.bootstrap_servers,
            self.settings.namespace,
            tick_interval_ms=self.settings.tick_interval_ms,
            commit_interval_ms=self.settings.commit_interval_ms,
            on_stop=self._on_runner_stopped,
            liveness_interval_ms=liveness_interval_ms(silence_ms) if silence_ms else None,
        )
        self.runners[name] = runner
        log.info("this worker is now the active coordinator of source %s", name)
        runner.start()

    def _on_runner_stopped(self, runner: SourceRunner) -> None:
        if self.runners.get(runner.source) is not runner:
            return
        del self.runners[runner.source]
        if runner.state is RunnerState.REFUSED:
            message = f"source {runner.source}: {runner.failure}"
            log.error("%s; this worker stops (restarting it would not change the definition)", message)
            if self._on_refused is not None:
                self._on_refused(message)
            return
        if runner.state is not RunnerState.FAILED:
            return
        backoff = self._backoff.setdefault(runner.source, RestartBackoff())
        served = runner.served_s()
        delay = backoff.failed(served)
        self._not_before[runner.source] = time.monotonic() + delay
        if runner.source not in self.assigned:
            log.error(
                "source %s: %s; not restarted here (this worker is not assigned it)", runner.source, runner.failure
            )
        else:
            log.error(
                "source %s: %s; restarting its coordinator from the last commit in %.0f s (failure %d in a row)",
                runner.source,
                runner.failure or "the coordinator failed",
                delay,
                backoff.streak,
            )
            asyncio.get_running_loop().call_later(delay, self._restart_if_assigned, runner.source)

    def _restart_if_assigned(self, name: str) -> None:
        if name in self.assigned and name not in self.runners:
            self._start(name)

    async def stop_all(self) -> None:
        self.closing = True  # a worker shutting down takes nothing over
        for name in sorted(self.runners):
            await self.runners.pop(name).stop()


def build_app(settings: CoordinatorSettings, datadir: Path | None = None) -> faust.App:
    """A Faust app coordinating ``settings.sources``. Their topics and the leadership
    topic must exist (``prepare_topics``)."""
    quiet_startup_noise()  # the Faust group's first coordinator lookups fail at every fresh start
    app_id = settings.group_id
    datadir = datadir or Path(tempfile.gettempdir()) / "sluicegate-faust" / app_id
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        app_id,
        # sluicegate:// is Faust's aiokafka transport reading read_committed (faust_transport.py).
        broker=[f"sluicegate://{b.strip()}" for b in settings.bootstrap_servers.split(",")],
        broker_credentials=current_security().faust_credentials(),
        datadir=str(datadir),
        web_enabled=settings.web_port is not None,
        web_port=settings.web_port or 6066,
        web_bind=settings.web_bind,
        # Takeover: a killed worker's sources move after the group session timeout.
        # 6 s is the broker's minimum (group.min.session.timeout.ms); see docs/deploy.md.
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_rebalance_timeout=10.0,
        broker_commit_interval=5.0,
        consumer_auto_offset_reset="latest",
        topic_allow_declare=False,
        topic_disable_leader=True,
        key_serializer="raw",
        value_serializer="raw",
    )

    def stop_refused(message: str) -> None:
        # A worker that cannot serve its source with the definition it was given must not
        # sit on its partition of the leadership topic: it stops, non-zero, so that the
        # group moves the source to a worker that can and the operator sees why.
        app.sluicegate_refusal = message  # type: ignore[attr-defined]
        asyncio.get_running_loop().create_task(app.crash(DefinitionRefused(message)))

    runners = SourceRunners(settings, on_refused=stop_refused)
    metrics = CoordinatorMetrics(runners)
    if settings.takeover_silence_ms:
        watch = TakeoverWatch(
            settings.bootstrap_servers,
            settings.namespace,
            [s.source for s in settings.sources],
            settings.takeover_silence_ms,
            runners.watched,
            runners.take_over,
        )

        @app.task  # type: ignore[untyped-decorator]
        async def takeover_watch() -> None:
            await watch.run()

    app.sluicegate_runners = runners  # type: ignore[attr-defined]  # for ops endpoints and tests
    leadership_topic = app.topic(runners.leadership.name, key_type=bytes, value_type=bytes, internal=False)

    @app.agent(leadership_topic)
    async def leadership(stream: Any) -> None:
        # Faust subscribes only to hold partitions (nothing is written to the topic);
        # each runner reads its source's inbox itself, from the offset committed with
        # its state.
        async for _ in stream:
            pass

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        assigned: set[TopicPartition] = set(args[0])  # the whole assignment (eager rebalancing)
        await runners.on_assignment(assigned)

    @app.timer(interval=PROGRESS_INTERVAL_S)  # type: ignore[untyped-decorator]
    async def progress() -> None:
        for runner in list(runners.runners.values()):
            log.info("%s", runner.describe())
        runners.say_finished()

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def _shutdown(sender: Any, *args: Any, **kwargs: Any) -> None:
        for runner in list(runners.runners.values()):
            log.info("stopping: %s", runner.describe())
        await runners.stop_all()

    metrics.install(app)
    return app


async def prepare_topics(settings: CoordinatorSettings) -> None:
    """Create what is missing: every source's control topics and the app's leadership
    topic (grown by a partition for each source added to the configuration)."""
    from sluicegate.kafka.topics import apply_topics
    from sluicegate.protocol.topics import topic_specs

    specs = [spec for s in settings.sources for spec in topic_specs(settings.namespace, s.source, s.max_parallelism)]
    specs.append(leadership_topic_spec(settings.group_id, len(settings.sources)))
    await apply_topics(settings.bootstrap_servers, specs, replication=settings.replication)


async def check_sources(settings: CoordinatorSettings, wait_s: float = INPUT_WAIT_S) -> None:
    """Refuse to start before serving anything, each source's committed state read once:

    - DefinitionMismatchError if a source's committed definition differs from this
      worker's: a standby must be refused now, not when it takes over;
    - SourceError if a source started for the first time (no committed state) reads inputs
      that do not exist (new_source.py)."""
    from sluicegate.coordinator.source_runner import check_definition
    from sluicegate.coordinator.state_store import read_state

    stored = {
        source.source: await read_state(
            settings.bootstrap_servers,
            ControlTopics.for_source(source.source, settings.namespace).coordinator_state,
            source.source,
        )
        for source in settings.sources
    }
    for source in settings.sources:
        state = stored[source.source]
        check_definition(source.source, state.parts if state else None, source.definition(), "this coordinator")
    for source in settings.sources:
        if stored[source.source] is None:
            await check_new_source_inputs(source.source, source.connector, source.options, wait_s)
