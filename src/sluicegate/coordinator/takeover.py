"""The standby side of fast takeover: watch the state topics of the sources this
worker does not run, and take a source over once its active coordinator has been
silent for ``takeover_silence_ms`` (silence.py has the rule).

One read_uncommitted consumer per worker samples the log end offset of every watched
``NS.S.coordinator-state`` partition (a ListOffsets request; no record is fetched): it
moves with every state record written, inside a transaction too, so a commit of a
hundred megabytes that takes seconds shows as progress while it is written (the runner
puts its last ``meta`` into a long transaction every megabyte, and marks itself alive
outside a transaction the broker keeps waiting). Every standby watches,
and every one of them may take over: the transactional id decides. If two start at once, the later ``init_transactions``
fences the earlier, whose open transaction is aborted and whose runner steps down;
the survivor read the state after its own fencing, so it resumes from the last
commit like any successor. The worst a race costs is one epoch more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from sluicegate.coordinator.silence import SilenceWatch, Verdict
from sluicegate.kafka.clients import control_consumer
from sluicegate.kafka.security import KafkaSecurity
from sluicegate.protocol.topics import ControlTopics

log = logging.getLogger("sluicegate.coordinator")

RETRY_S = 5.0


def poll_interval_s(silence_ms: int) -> float:
    """How often a standby samples: a tenth of the silence, within 50-500 ms."""
    return min(0.5, max(0.05, silence_ms / 10_000))


class TakeoverWatch:
    """Samples the state topics of ``watched()`` (the sources not run here) and calls
    ``take_over(source, silent_for_s)`` for each whose coordinator fell silent."""

    def __init__(
        self,
        bootstrap: str,
        namespace: str,
        sources: Iterable[str],
        silence_ms: int,
        watched: Callable[[], set[str]],
        take_over: Callable[[str, float], None],
        from_first_sample: bool = False,
        security: KafkaSecurity | None = None,
    ) -> None:
        """``from_first_sample``: a source nobody commits to is taken over too (silence.py)."""
        self.bootstrap = bootstrap
        self.security = security
        self.silence_ms = silence_ms
        self._partitions = {
            name: TopicPartition(ControlTopics.for_source(name, namespace).coordinator_state, 0) for name in sources
        }
        self._watches = {name: SilenceWatch(silence_ms / 1000, from_first_sample) for name in self._partitions}
        self._watched = watched
        self._take_over = take_over
        self._was_watched: set[str] = set()

    async def run(self) -> None:
        """Until cancelled. A broker that cannot be reached only delays the watch: no
        sample is no evidence of silence."""
        while True:
            consumer = control_consumer(
                self.bootstrap, "sluicegate-takeover-watch", self.security, isolation_level="read_uncommitted"
            )
            try:
                await consumer.start()
                while True:
                    await self._sample(consumer)
                    await asyncio.sleep(poll_interval_s(self.silence_ms))
            except Exception as exc:  # the watch only speeds takeover up: it must not take the worker down
                log.warning("takeover watch: %r; starting it again in %.0f s", exc, RETRY_S)
            finally:
                await consumer.stop()
            await asyncio.sleep(RETRY_S)

    async def _sample(self, consumer: AIOKafkaConsumer) -> None:
        watched = self._watched() & set(self._partitions)
        for name in watched - self._was_watched:
            self._watches[name].restart()  # what this worker saw while it ran the source proves nothing
        self._was_watched = watched
        if not watched:
            return
        try:
            ends = await consumer.end_offsets([self._partitions[n] for n in sorted(watched)])
        except KafkaError as exc:
            # No sample is no evidence: silence counts only between successful samples.
            log.debug("takeover watch: could not sample the state topics: %r", exc)
            return
        now = time.monotonic()
        for name in sorted(watched):
            watch = self._watches[name]
            watch.observe(ends[self._partitions[name]], now)
            if watch.verdict() is Verdict.TAKE_OVER:
                silent_for = watch.silent_for_s()
                watch.restart()
                self._was_watched.discard(name)
                self._take_over(name, silent_for)
