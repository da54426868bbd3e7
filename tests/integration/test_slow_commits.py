"""A commit that the broker keeps waiting, over real Kafka (issue 21, items 2 and 5).

On a loaded broker, a transaction of 21 state records waited 4 s before the broker took
its first record (benchmarks/scale_readers.py: 64 readers and two coordinators on two
cores). The standby saw the state topic stand still and took over from a coordinator
that was only waiting. Now, while a transaction waits, the runner writes tombstones of the
``alive`` part outside it, so the state topic's end keeps moving (silence.py ``mark_due``).

The parts are real: a SourceRunner on Kafka, and a TakeoverWatch sampling the state topic
as a standby worker does, with the default silence of 2 s. The one thing a test cannot
order from a broker is slowness, so ``HeldCommits`` holds chosen commits back before it
hands them to the Kafka log:

1. A commit held for four silences: the watch does not take over. The runner marked
   itself alive all along, and the committed state is unchanged by the marks.
2. A commit held past LONGEST_COMMIT_S (1 s for this test) is taken for a stall. The
   runner stops marking, and the watch takes over one silence after that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import pytest

from sluicegate.coordinator import silence
from sluicegate.coordinator.kafka_log import KafkaCoordinatorLog
from sluicegate.coordinator.log import OutgoingRecord, StateRecord
from sluicegate.coordinator.settings import SourceSettings
from sluicegate.coordinator.silence import liveness_interval_ms
from sluicegate.coordinator.source_runner import RunnerState, SourceRunner
from sluicegate.coordinator.state_store import read_state
from sluicegate.coordinator.takeover import TakeoverWatch
from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol.names import coordinator_transactional_id
from sluicegate.protocol.topics import ControlTopics, topic_specs
from sluicegate.testing.forwarding_log import ForwardingLog

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

NAMESPACE = "sluicegate"
SILENCE_MS = 2000
SILENCE_S = SILENCE_MS / 1000
LIVENESS_MS = liveness_interval_ms(SILENCE_MS)
HELD_S = 4 * SILENCE_S
STALL_AFTER_S = 1.0


class HeldCommits(ForwardingLog):
    """The Kafka log, with the next commits held back ``hold_s`` seconds each first."""

    def __init__(self, inner: KafkaCoordinatorLog) -> None:
        super().__init__(inner)
        self.hold_s: list[float] = []
        self.holding_since: float | None = None

    async def commit(self, records: Sequence[OutgoingRecord], state: Sequence[StateRecord]) -> None:
        if self.hold_s:
            self.holding_since = time.monotonic()
            await asyncio.sleep(self.hold_s.pop(0))
        await self.inner.commit(records, state)


async def until(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        await asyncio.sleep(0.05)


async def test_a_held_commit_keeps_the_standby_waiting_and_a_stalled_one_does_not(
    kafka_bootstrap: str, unique_source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = unique_source
    await apply_topics(kafka_bootstrap, topic_specs(NAMESPACE, source, 2))
    topics = ControlTopics.for_source(source, NAMESPACE)
    log = HeldCommits(KafkaCoordinatorLog(kafka_bootstrap, topics, coordinator_transactional_id(NAMESPACE, source)))
    settings = SourceSettings(source, "sequence", 2, {"splits": "4", "records_per_split": "10"})
    runner = SourceRunner(settings, kafka_bootstrap, NAMESPACE, liveness_interval_ms=LIVENESS_MS, log=log)
    takeovers: list[float] = []
    watch = TakeoverWatch(
        kafka_bootstrap,
        NAMESPACE,
        [source],
        SILENCE_MS,
        lambda: {source},
        lambda _, __: takeovers.append(time.monotonic()),
    )
    runner.start()
    watching = asyncio.get_running_loop().create_task(watch.run())
    try:
        await until(lambda: runner.state is RunnerState.ACTIVE, timeout_s=60)
        started_marks = runner.stats.marked_alive  # a start-up longer than a quarter interval marks too
        await asyncio.sleep(2 * SILENCE_S)  # the watch sees the heartbeat commits move the topic
        assert not takeovers, "a coordinator that commits is not taken over"
        assert runner.stats.marked_alive == started_marks, "commits the broker takes at once need no mark"

        # 1. Held for four silences: marked alive throughout, so no takeover.
        log.hold_s.append(HELD_S)
        await until(lambda: not log.hold_s, timeout_s=5)
        commits = runner.stats.commits
        await until(lambda: runner.stats.commits > commits, timeout_s=HELD_S + 10)
        assert not takeovers, (
            f"taken over during a commit held {HELD_S:.0f} s: the marks did not keep the watch waiting"
        )
        held_marks = runner.stats.marked_alive - started_marks
        assert held_marks >= HELD_S / (LIVENESS_MS / 1000) - 3, held_marks
        stored = await read_state(kafka_bootstrap, topics.coordinator_state, source)
        assert stored is not None and stored.parts["meta"]["epoch"] == 1 and "alive" not in stored.parts

        # 2. Held past the longest: a stall, silence, and the watch takes over.
        monkeypatch.setattr(silence, "LONGEST_COMMIT_S", STALL_AFTER_S)
        log.hold_s.append(STALL_AFTER_S + 3 * SILENCE_S)
        await until(lambda: not log.hold_s, timeout_s=5)
        await until(lambda: bool(takeovers), timeout_s=STALL_AFTER_S + 3 * SILENCE_S)
        assert log.holding_since is not None
        taken_after_s = takeovers[0] - log.holding_since
        # the marks stop after STALL_AFTER_S; the watch needs one silence more, sampling
        # every 0.2 s, and a mark or a heartbeat may have landed just before the hold
        assert STALL_AFTER_S + SILENCE_S - 0.5 <= taken_after_s <= STALL_AFTER_S + SILENCE_S + 1.5, taken_after_s
    finally:
        watching.cancel()
        await runner.stop()
