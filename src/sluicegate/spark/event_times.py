"""The event times behind a Spark query's watermarks, found off the acknowledgement's path.

Once Spark has written a batch's offset, the driver acknowledges it, and each split's
watermark becomes the event time of its last record before the acknowledged position.
The executors do not tell the driver their records' event times (on the JVM read path no
sluicegate code sees a record), so the driver asks the connector, and the ``kafka``
connector reads the records just before each position back from the cluster: a fetch
round trip and broker work. The next micro-batch waits for the acknowledgement, so the
acknowledgement does not wait for that: ``EventTimeProbe`` asks
on a worker thread, for the newest acknowledged position of each split, and raises the
watermarks when the answer comes. A heartbeat in between carries the watermark of the
batch before, which is still true (a watermark only says what has been read).

Watermarks leave the driver in heartbeats, one a ``heartbeat_interval_ms``: the probe
asks at most that often, not once a micro-batch (at 8 batches a second over 8
partitions, the broker used 3.7-6.4 CPU s in 10 s with a probe every batch and 3.0-3.9
with none; Spark's own source, 2.3-3.0).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from sluicegate.api.ranges import SupportsPositionRanges
from sluicegate.api.split import WireSplit
from sluicegate.reader.watermark import SplitWatermarks

log = logging.getLogger("sluicegate.spark")


class EventTimeProbe:
    """Acknowledged positions waiting for their event times, asked for in one call at a time."""

    def __init__(
        self,
        ranges: SupportsPositionRanges[Any],
        codec: Any,
        watermarks: Callable[[int], SplitWatermarks],
        clock_ms: Callable[[], int],
        min_interval_s: float,
    ) -> None:
        self.ranges = ranges
        self.codec = codec
        self._watermarks = watermarks
        """subtask -> its watermarks now (a subtask that registers again gets new ones)."""
        self._clock_ms = clock_ms
        self.min_interval_s = min_interval_s
        self._last_asked_s = float("-inf")
        self._wanted: dict[tuple[int, str], tuple[WireSplit, int]] = {}
        self._task: asyncio.Task[None] | None = None

    def want(self, subtask: int, split_id: str, split: WireSplit, position: int) -> None:
        """The split's event time before ``position`` is wanted (a later position of the
        same split replaces an earlier one not asked for yet). Call on the loop."""
        self._wanted[(subtask, split_id)] = (split, position)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sluicegate-event-times")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while self._wanted:
            wait_s = self._last_asked_s + self.min_interval_s - time.monotonic()
            if wait_s > 0:
                await asyncio.sleep(wait_s)  # later acks' positions replace these meanwhile
            self._last_asked_s = time.monotonic()
            wanted, self._wanted = self._wanted, {}
            keys = list(wanted)
            try:
                times = await asyncio.to_thread(self._event_times, [wanted[k] for k in keys])
            except Exception as exc:  # the data cluster may be down: the next ack asks again
                log.warning("event times of %d splits could not be read now: %s", len(keys), exc)
                continue
            now_ms = self._clock_ms()
            for (subtask, split_id), event_time_ms in zip(keys, times, strict=True):
                # not active: the acknowledgement already marked the splits that moved
                self._watermarks(subtask).advance(split_id, event_time_ms, now_ms, active=False)

    def _event_times(self, wanted: list[tuple[WireSplit, int]]) -> list[int | None]:
        return self.ranges.event_times_before([(self.codec.from_wire(wire), pos) for wire, pos in wanted])
