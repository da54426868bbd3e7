"""A coordinator that starts itself where its source is read (issue 19 item 4).

A Spark query or a standalone reader whose source no coordinator serves runs one in its
own process: the same ``SourceRunner`` as a deployed worker's (the same transactional
state, in the same control topics), on a thread of its own with its own event loop, so
that a long coordinator step never delays the host's heartbeats. The host chooses how
(``coordinator`` / ``--coordinator``):

- ``auto`` (the default): a source that was never served (no committed state) is served
  at once; one that was is watched as a deployed standby watches it (takeover.py) and
  taken over once nobody has committed to its state topic for ``silence_ms``, counted
  from the first look (silence.py ``from_first_sample``): the previous host died, say.
  One whose last coordinator released it when its host ended (state_records.py
  ``RELEASED_PART``: a query stopped and restarted), or whose last coordinator's process
  ran on this machine and is gone (``HOST_PART``, host_process.py: a query's source
  process SIGKILLed, a killed driver restarted), is taken over at once, the deployed
  workers' check first.
  The silence is longer than a deployed standby's (5 s against 2 s) so that a deployed
  standby, when there is one, takes over first; and while the source's deployed workers
  are alive (their Faust group, by the default app id of workers of that one source, has
  members) this process does not take it over at all: their commits may be held up by a
  broker failover (10 s and more), which their standby rides out, and a reader that took
  the source then would keep it with the deployed workers all standing by (issue 49;
  workers with an app id of their own cannot be found so: their readers want
  ``external``). A coordinator deployed later (a Faust worker given the source) fences
  this one through the source's transactional id, and this one stands by again; one
  that serves commits at least every quarter of a deployed standby's silence, so it is
  never taken over. Where this process cannot coordinate (its principal may not, or the
  source is not set up and the host does not say how many subtasks it has), it says so
  once and relies on a deployed coordinator.
- ``embedded``: serve at once (fencing whoever serves), then as auto; what stops it
  from coordinating fails the host at start.
- ``external``: never; a deployed coordinator serves the source.

Before anything runs, the source's missing control topics are created (as ``sluicegate
topics apply``; existing ones keep their partition count, which is the source's
``max_parallelism``), and the definition the host brings is compared with the committed
one: a host that says the source is something else fails at start, naming the options.

Readers talk to "the coordinator" through the control topics only and cannot tell which
process serves them: a handover is a coordinator failover, which resets no reader
(docs/protocol.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate.api.source import INPUT_WAIT_S
from sluicegate.coordinator.host_process import HostProcess, gone_from_here, this_machine
from sluicegate.coordinator.new_source import check_new_source_inputs
from sluicegate.coordinator.restart_backoff import RestartBackoff
from sluicegate.coordinator.settings import SourceSettings, default_group_ids
from sluicegate.coordinator.silence import liveness_interval_ms
from sluicegate.coordinator.source_runner import RunnerState, SourceRunner, check_definition
from sluicegate.coordinator.state_store import read_state
from sluicegate.coordinator.takeover import TakeoverWatch
from sluicegate.kafka.groups import GroupMembers, group_members
from sluicegate.kafka.security import KafkaSecurity, use_security
from sluicegate.kafka.topics import apply_topics, describe_topics
from sluicegate.loop_thread import LoopThread
from sluicegate.protocol.definition import DefinitionMismatchError
from sluicegate.protocol.state_records import host_of_last, released_by_last
from sluicegate.protocol.timing import SESSION_TIMEOUT_MS
from sluicegate.protocol.topics import ControlTopics, topic_specs

log = logging.getLogger("sluicegate.coordinator")

HOST_POLL_S = 0.1
"""How often a host looks whether the last coordinator's process, running on this
machine when it started, is gone (``_take_over_once_gone``)."""
SILENCE_MS = 5_000
"""Longer than a deployed standby's default (CoordinatorSettings.takeover_silence_ms, 2 s):
where both watch, the deployed one takes over first."""
PREPARE_TIMEOUT_S = 60.0


class CoordinatorMode(enum.Enum):
    AUTO = "auto"
    EMBEDDED = "embedded"
    EXTERNAL = "external"

    @classmethod
    def parse(cls, text: str, setting: str) -> CoordinatorMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigError(setting, f"must be auto, embedded or external, got {text!r}") from None


class EmbeddedCoordinator:
    """The coordinator of one source, hosted by the process that reads it."""

    def __init__(
        self,
        source: str,
        connector: str,
        options: Mapping[str, str],
        bootstrap: str,
        namespace: str,
        mode: CoordinatorMode,
        new_source_parallelism: int | None,
        parallelism_setting: str = "max_parallelism",
        session_timeout_ms: int = SESSION_TIMEOUT_MS,
        silence_ms: int = SILENCE_MS,
        security: KafkaSecurity | None = None,
        input_wait_s: float = INPUT_WAIT_S,
    ) -> None:
        """``new_source_parallelism``: the ``max_parallelism`` to set the source up with when
        its control topics do not exist yet (None: they must; the error says how). A source
        that exists keeps its own (the partitions of its readers topic).
        ``parallelism_setting``: the host's name for it, in messages. ``input_wait_s``: how
        long a source never served waits for its inputs before the start fails
        (new_source.py)."""
        self._source = source
        self.connector = connector
        self.options = dict(options)
        self.new_source_parallelism = new_source_parallelism
        self.parallelism_setting = parallelism_setting
        self.session_timeout_ms = session_timeout_ms
        self.settings: SourceSettings | None = None
        """The runner's settings, once the source's max_parallelism is known (``start``)."""
        self.bootstrap = bootstrap
        self.namespace = namespace
        self.mode = mode
        self.silence_ms = silence_ms
        self.security = security
        self.input_wait_s = input_wait_s
        self.topics = ControlTopics.for_source(source, namespace)
        self.runner: SourceRunner | None = None
        self.refusal: str | None = None
        """Set when the committed state came to define the source otherwise (``sluicegate
        source redefine`` while this process ran): it coordinates no more, and whichever
        coordinator serves the new definition refuses the host's registrations."""
        self.source_existed: bool | None = None
        """Whether the source's control topics were there before this process looked; None
        until it looked (never, with ``external``)."""
        self.source_read_before: bool | None = None
        """Whether a reader of the source acknowledged a checkpoint before this process
        looked (``read_before``); None until it looked. Topics that exist say less: a
        coordinator started first creates them, and nothing has been read."""
        self._thread = LoopThread(f"sluicegate-coordinator-{source}")
        self._watch_task: asyncio.Task[None] | None = None
        self._backoff = RestartBackoff()
        self._not_before = 0.0
        self._closing = False
        self._asking: asyncio.Task[None] | None = None
        self._yielding_to: str | None = None
        """The deployed group this process last stood back for (said once per streak)."""

    @property
    def source(self) -> str:
        return self._source

    @property
    def active(self) -> bool:
        return self.runner is not None and self.runner.state is RunnerState.ACTIVE

    # -- life cycle (the host's thread) ------------------------------------------------

    def start(self) -> None:
        """Create the missing control topics, check the definition (and a new source's
        inputs), and start watching (in the background). Raises DefinitionMismatchError,
        SourceError (a new source's inputs are missing) and, with ``embedded``, whatever
        stops it from coordinating: the host must not start. ``external``: nothing at all."""
        if self.mode is CoordinatorMode.EXTERNAL or self._thread.started:
            return
        if self.security is not None:
            use_security(self.security)  # the runner's clients take the process's settings
        try:
            self._thread.start(self._prepare, timeout_s=PREPARE_TIMEOUT_S)
        except (DefinitionMismatchError, SourceError):
            raise
        except Exception as exc:
            if self.mode is CoordinatorMode.EMBEDDED:
                raise
            log.warning(
                "source %s: this process will not coordinate it (coordinator=auto): %s; "
                "it relies on a deployed coordinator",
                self.source,
                _reason(exc),
            )

    def close(self) -> None:
        """Stop the watch, and the runner once it has read and committed what the host's
        readers sent before (``SourceRunner.finish``). Nothing needs to be sent: a successor
        resumes from the last commit."""
        self._closing = True
        self._thread.stop(self._stop)

    # -- on the loop -------------------------------------------------------------------

    async def _prepare(self) -> None:
        """The control topics (existing ones keep their partition count) and the definition;
        then the watch starts (a source no coordinator ever served is taken at once)."""
        existing = (await describe_topics(self.bootstrap, [self.topics.readers], self.security))[self.topics.readers]
        self.source_existed = existing is not None
        # the source's max_parallelism is the one it was set up with
        max_parallelism = existing.partitions if existing is not None else self.new_source_parallelism
        if max_parallelism is None:
            raise ConfigError(
                self.parallelism_setting,
                f"source {self.source} is not set up (no {self.topics.readers}): give "
                f"{self.parallelism_setting} to set it up with that many reader subtasks, or run "
                "`sluicegate topics apply` or its coordinator first",
            )
        settings = SourceSettings(
            self.source,
            self.connector,
            max_parallelism,
            self.options,
            session_timeout_ms=self.session_timeout_ms,
        )
        specs = topic_specs(self.namespace, self.source, max_parallelism)
        await apply_topics(self.bootstrap, specs, security=self.security)
        stored = await read_state(self.bootstrap, self.topics.coordinator_state, self.source)
        check_definition(self.source, stored.parts if stored else None, settings.definition(), self._who())
        self.source_read_before = stored is not None and read_before(stored.parts)
        if stored is None:  # its first start: before its definition is committed
            await check_new_source_inputs(self.source, self.connector, self.options, self.input_wait_s)
        self.settings = settings
        free = None if stored is None else nobody_serves(stored.parts)
        ending = None if stored is None or free is not None else last_host_here(stored.parts)
        if self.mode is CoordinatorMode.AUTO and stored is not None and free is None:
            log.info(
                "source %s: this process coordinates it if nobody does (no commit to %s for %d ms); "
                "a deployed coordinator takes it over (coordinator=auto)",
                self.source,
                self.topics.coordinator_state,
                self.silence_ms,
            )
        served_before = stored is not None
        self._watch_task = asyncio.get_running_loop().create_task(
            self._watch(served_before, free, ending), name=f"coordinator watch {self.source}"
        )

    def _who(self) -> str:
        return f"this process's coordinator (coordinator={self.mode.value})"

    async def _watch(self, served_before: bool, free: str | None, ending: HostProcess | None) -> None:
        """``free``: why nobody serves a source served before, when its state says so;
        ``ending``: the last coordinator's process, running on this machine."""
        if self.mode is CoordinatorMode.EMBEDDED or not served_before:
            self._take_over(self.source, 0.0)
        elif ending is not None:
            self._asking = asyncio.get_running_loop().create_task(
                self._take_over_once_gone(ending), name=f"coordinator host {self.source}"
            )
        elif free is not None:
            # Nobody serves it (its last coordinator stopped or died with its host: a query
            # restarted, a reader redeployed), so there is no silence to wait out; only the
            # source's deployed workers come first, as after a silence.
            log.info("source %s: %s", self.source, free)
            self._asking = asyncio.get_running_loop().create_task(
                self._take_over_unless_deployed(self.source, 0.0), name=f"coordinator ask {self.source}"
            )
        # Several hosts of one source (its readers) watch alike: each waits a little longer
        # than the silence, by its own random share, so that one of them takes over first
        # and the others see it commit instead of all fencing each other in turn.
        silence_ms = self.silence_ms + random.randint(0, self.silence_ms // 2)
        watch = TakeoverWatch(
            self.bootstrap,
            self.namespace,
            [self.source],
            silence_ms,
            self._watched,
            self._take_over,
            from_first_sample=True,
            security=self.security,
        )
        await watch.run()

    def _watched(self) -> set[str]:
        return set() if self.runner is not None or self.refusal is not None else {self.source}

    def _take_over(self, name: str, silent_for_s: float) -> None:
        if self._closing or self.runner is not None or time.monotonic() < self._not_before:
            return
        if silent_for_s > 0 and self.mode is CoordinatorMode.AUTO:
            # Ask first whether deployed workers are alive (the watch calls again after
            # another silence if this process stands back).
            if self._asking is None or self._asking.done():
                self._asking = asyncio.get_running_loop().create_task(
                    self._take_over_unless_deployed(name, silent_for_s), name=f"coordinator ask {name}"
                )
            return
        self._serve(name, silent_for_s)

    async def _take_over_once_gone(self, host: HostProcess) -> None:
        """The last coordinator's process runs on this machine; it may be ending: a Spark
        query's source process is killed as the query stops, while its next run starts.
        Taken over as soon as it is gone, within the silence; past that, the watch decides
        (a live host commits, a silent one is taken over after the silence)."""
        deadline = time.monotonic() + self.silence_ms / 1000
        while time.monotonic() < deadline:
            await asyncio.sleep(HOST_POLL_S)
            if self._closing or self.runner is not None:
                return
            if gone_from_here(host):
                log.info("source %s: %s", self.source, gone_reason(host))
                await self._take_over_unless_deployed(self.source, 0.0)
                return

    async def _take_over_unless_deployed(self, name: str, silent_for_s: float) -> None:
        # The group of the source's own workers only: the namespace's shared group may
        # serve other sources, and one with an app_id of its own cannot be found.
        single, _ = default_group_ids(self.namespace, name)
        groups = await group_members(self.bootstrap, [single], self.security)
        alive = next((g for g in groups if g.members), None)
        unknown = next((g for g in groups if g.members is None and not g.not_authorized), None)
        if alive is not None or unknown is not None:
            self._stand_back(name, silent_for_s, alive, unknown)
            return
        self._yielding_to = None
        if self._closing or self.runner is not None or time.monotonic() < self._not_before:
            return
        self._serve(name, silent_for_s)

    def _stand_back(
        self, name: str, silent_for_s: float, alive: GroupMembers | None, unknown: GroupMembers | None
    ) -> None:
        """No takeover now: deployed workers are alive (theirs to take over), or whether
        they are is not known (the broker that would say is failing over: the next
        silence asks again). One line per streak, not per silence."""
        group = alive.group if alive is not None else f"? {unknown.group if unknown else ''}"
        if group == self._yielding_to:
            return
        self._yielding_to = group
        served = f"no coordinator committed for {silent_for_s:.1f} s" if silent_for_s > 0 else "nobody serves it"
        if alive is not None:
            log.info(
                "source %s: %s, but its deployed coordinator group %s has %d live worker(s): theirs to take "
                "over; this process stands by",
                name,
                served,
                alive.group,
                alive.members,
            )
        else:
            assert unknown is not None
            log.info(
                "source %s: %s; whether deployed workers (group %s) are alive is not known (%s); asking again "
                "after the next silence",
                name,
                served,
                unknown.group,
                unknown.error,
            )

    def _serve(self, name: str, silent_for_s: float) -> None:
        if silent_for_s > 0:
            log.warning(
                "source %s: no coordinator committed for %.1f s; this process coordinates it now "
                "(fencing any silent one)",
                name,
                silent_for_s,
            )
        else:
            log.info("source %s: this process coordinates it now (coordinator=%s)", name, self.mode.value)
        assert self.settings is not None
        runner = SourceRunner(
            self.settings,
            self.bootstrap,
            self.namespace,
            on_stop=self._on_runner_stopped,
            liveness_interval_ms=liveness_interval_ms(self.silence_ms),
        )
        self.runner = runner
        runner.start()

    def _on_runner_stopped(self, runner: SourceRunner) -> None:
        if self.runner is not runner:
            return
        self.runner = None
        if runner.state is RunnerState.REFUSED:
            self.refusal = f"source {self.source}: {runner.failure}"
            log.error("%s", self.refusal)
        elif runner.state is RunnerState.FENCED:
            log.info("source %s: another coordinator serves it now; this process stands by", self.source)
        elif runner.state is RunnerState.FAILED:
            served = runner.served_s()
            delay = self._backoff.failed(served)
            self._not_before = time.monotonic() + delay
            log.error(
                "source %s: %s; this process coordinates it again from the last commit in %.0f s if nobody else does",
                self.source,
                runner.failure or "the coordinator failed",
                delay,
            )

    async def _stop(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._asking
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch_task
        runner, self.runner = self.runner, None
        if runner is not None:
            await runner.finish()
            log.info("source %s: stopped this process's coordinator (%s)", self.source, runner.describe())


def nobody_serves(parts: Mapping[str, Any]) -> str | None:
    """Why the committed state ``parts`` say that nobody serves their source, or None
    when they do not say so (whoever committed last may be alive)."""
    if released_by_last(parts):
        return "its last coordinator released it when its host ended"
    host = HostProcess.from_json(host_of_last(parts))
    if host is not None and gone_from_here(host):
        return gone_reason(host)
    return None


def read_before(parts: Mapping[str, Any]) -> bool:
    """Whether the committed state ``parts`` hold a checkpoint some subtask's reader
    acknowledged: positions it read to, where its source's next reader goes on."""
    return any(part["slot"].get("checkpoint_id") is not None for key, part in parts.items() if key.startswith("slot/"))


def last_host_here(parts: Mapping[str, Any]) -> HostProcess | None:
    """The process the state ``parts`` name as their last coordinator's host, when it
    ran on this machine."""
    host = HostProcess.from_json(host_of_last(parts))
    return host if host is not None and host.machine == this_machine() else None


def gone_reason(host: HostProcess) -> str:
    return f"its last coordinator's process (pid {host.pid}, this machine) is gone"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if text else type(exc).__name__
