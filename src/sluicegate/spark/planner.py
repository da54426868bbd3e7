"""``latestOffset``: how the driver decides the next micro-batch's offset.

Each call first acknowledges the start offset (it is in Spark's offset log, so
durable), then plans (offsets.py ``plan_next``) from the driver's view of the
subtasks, once the connector names no new input to come (``inputs_to_come``: a new
topic not assigned yet), with its end positions (``prepare_planning``,
``available_end``), its event times (watermark alignment) and the optional
planning-time event-time bound. It waits a little when only bookkeeping changed
(so that a burst of coordinator records and the other subtasks' registrations
settle before a batch that reads nothing), and with ``Trigger.AvailableNow`` it
ends the query's reading once everything available was read.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Mapping
from typing import Any

from sluicegate.api.ranges import SupportsPositionRanges
from sluicegate.api.source import Boundedness, Source
from sluicegate.spark.driver import SparkReaderDriver
from sluicegate.spark.offsets import EventTimeBound, OwnedSplit, SourceOffset, SubtaskView, plan_next
from sluicegate.spark.read_reports import MAX_SPLIT_SERIES

log = logging.getLogger("sluicegate.spark")

WAITING_NOTICE_S = 30.0
ACK_RETRY_S = 0.5
SETTLE_S = 30.0
"""At most how long a driver's first batch waits for its subtasks' registrations and assignments."""
QUIET_S = 0.5
"""The assignments have settled when no coordinator record came for this long."""


def offsets_behind_latest(available_ends: Mapping[str, int], consumed: SourceOffset) -> list[int]:
    """Each split's records between ``consumed`` (the last batch's end) and its available
    end at the last planning: Spark's Kafka source's ``offsetsBehindLatest`` for its
    progress metrics (a partition missing from the offset counts from 0, as there)."""
    where = consumed.index()
    return [end - (where[sid].entry.pos if sid in where else 0) for sid, end in sorted(available_ends.items())]


class NextOffsetPlanner:
    """One ``latestOffset`` call: the next offset after ``start``, or ``start`` itself."""

    def __init__(
        self,
        source_name: str,
        source: Source[Any],
        driver: SparkReaderDriver,
        alignment_max_drift_ms: int | None = None,
        max_splits: int | None = None,
    ) -> None:
        assert isinstance(source, SupportsPositionRanges)
        self.source_name = source_name
        self.source = source
        self.ranges: SupportsPositionRanges[Any] = source
        self.driver = driver
        self.alignment_max_drift_ms = alignment_max_drift_ms
        self.max_splits = max_splits
        """Spark's ``maxFilesPerTrigger``: at most this many splits read in a batch."""
        self._available_now_ms: int | None = None
        self._available: dict[str, int] = {}
        """Each split's available end, as planning asked for it."""
        self.read_everything = False
        """With ``Trigger.AvailableNow``: this call found everything available read (the
        run ends)."""

    _last_prepare_warning = float("-inf")
    """A planner lives for one latestOffset call; the warning's rate limit is the query's."""

    def next_offset(
        self, start: SourceOffset, max_rows: int | None, available_now_ms: int | None, settle: bool = False
    ) -> SourceOffset:
        """``settle``: the first planning of this driver (``_settle``)."""
        end = self._next_offset(start, max_rows, available_now_ms, settle)
        if self._available:  # a call that planned nothing (no ack yet, data cluster down) knows no lag
            self.driver.split_lag = self.lag_after(end)
            self.driver.available_ends = dict(self._available)
        return end

    def lag_after(self, offset: SourceOffset, most: int = MAX_SPLIT_SERIES) -> dict[str, tuple[int, int]]:
        """Each split's records available at this planning beyond ``offset`` (what Spark's
        Kafka source calls offsets behind latest), by the subtask that owns it: the ``most``
        splits furthest behind (each is a series; a ``files`` source owns a split per file)."""
        lag = {
            split_id: (where.subtask, max(0, self._available[split_id] - where.entry.pos))
            for split_id, where in offset.index().items()
            if split_id in self._available and where.subtask >= 0
        }
        if len(lag) <= most:
            return lag
        return dict(heapq.nlargest(most, lag.items(), key=lambda item: item[1][1]))

    def _next_offset(
        self, start: SourceOffset, max_rows: int | None, available_now_ms: int | None, settle: bool
    ) -> SourceOffset:
        driver = self.driver
        self._available_now_ms = available_now_ms
        available_now = available_now_ms is not None
        if not self._acknowledged(start, available_now):
            return start
        generation = driver.generation
        if settle:
            generation = self._settle()
        waited = False
        since = time.monotonic()
        while True:
            planning = driver.planning_state()
            if not self._prepare_planning(planning.views):
                return start
            if self.ranges.inputs_to_come():
                # New inputs the coordinator's discovery has not assigned yet: a batch
                # planned now would leave them out (Spark's sources read them at once).
                generation = driver.wait_for_change(generation, 0.2)
                continue
            end = plan_next(
                start,
                planning.views,
                max_rows,
                self._available_end,
                planning.reported_finished,
                self._event_time_before,
                self._event_time_bound(),
                in_order=self.ranges.reads_splits_in_order,
                max_splits=self.max_splits,
            )
            if end is not start:
                if end.rows == start.rows:
                    if available_now and self._done():
                        # Only bookkeeping (finished splits reported, NoMoreSplits, splits
                        # that arrived with nothing to read) is new: no batch for it, as
                        # Spark's own sources run none; a later run records it.
                        return self._everything_read(start)
                    if not waited:
                        # Only assignments or bookkeeping changed: let a burst of coordinator
                        # records settle before paying for a batch that reads nothing.
                        waited = True
                        generation = driver.wait_for_change(generation, 0.3)
                        continue
                return end
            if not available_now:
                if waited:
                    return start
                waited = True
                generation = driver.wait_for_change(generation, 0.2)
                continue
            if self._done():
                return self._everything_read(start)
            generation = driver.wait_for_change(generation, 1.0)
            if time.monotonic() - since >= WAITING_NOTICE_S:
                since = time.monotonic()
                log.info("source %s: waiting for the coordinator (%s)", self.source_name, driver.status())

    def _everything_read(self, start: SourceOffset) -> SourceOffset:
        self.driver.leave()
        self.read_everything = True
        log.info("source %s: everything available was read", self.source_name)
        return start

    def _settle(self) -> int:
        """Before the first batch of a driver (a query's start or restart): until every
        subtask is registered and the coordinator's assignments have gone quiet for
        QUIET_S, at most SETTLE_S. The first batch reads what the splits have, so one
        planned while the assignment is still arriving would leave the late splits to a
        later batch, and a ``Trigger.Once`` run (a single batch) would never read them."""
        driver = self.driver
        deadline = time.monotonic() + SETTLE_S
        generation = driver.generation
        while time.monotonic() < deadline:
            remaining = deadline - time.monotonic()
            if driver.all_active():
                changed = driver.wait_for_change(generation, min(QUIET_S, remaining))
                if changed == generation:
                    break
            else:
                changed = driver.wait_for_change(generation, min(0.3, remaining))
            generation = changed
        return generation

    def _acknowledged(self, start: SourceOffset, available_now: bool) -> bool:
        """Whether the coordinator has ``start``'s ack. A batch planned before it had would
        let its splits run ahead of what the coordinator holds, so there is no batch until
        then. With ``Trigger.AvailableNow`` an offset equal to ``start`` ends the query, so
        this waits (the broker may be down for minutes) instead of answering "no batch"."""
        since = time.monotonic()
        while not self.driver.acknowledge(start):
            if not available_now:
                log.warning("checkpoint %d is not acknowledged yet: no new batch", start.checkpoint_id)
                return False
            if time.monotonic() - since >= WAITING_NOTICE_S:
                since = time.monotonic()
                log.warning(
                    "source %s: checkpoint %d is not acknowledged yet; waiting", self.source_name, start.checkpoint_id
                )
            time.sleep(ACK_RETRY_S)
        return True

    def _done(self) -> bool:
        """availableNow: a bounded source is done when every subtask has finished; an
        unbounded one when every subtask is registered and nothing is left below the
        trigger's start time (checked again after a second, for late assignments)."""
        driver = self.driver
        if self.source.boundedness is Boundedness.BOUNDED:
            return driver.all_finished()
        if not driver.all_active():
            return False
        generation = driver.generation
        return driver.wait_for_change(generation, 1.0) == generation

    def _prepare_planning(self, views: Mapping[int, SubtaskView]) -> bool:
        """Let the connector fetch what planning needs (e.g. end offsets); False when it
        cannot now (its data cluster is down): no new batch, the query waits and retries."""
        codec = self.source.split_codec
        splits = [codec.from_wire(o.split) for v in views.values() for o in v.splits]
        try:
            self.ranges.prepare_planning(splits)
        except Exception as exc:
            now = time.monotonic()
            if now - NextOffsetPlanner._last_prepare_warning >= WAITING_NOTICE_S:
                NextOffsetPlanner._last_prepare_warning = now
                log.warning("source %s: cannot plan the next batch now: %s", self.source_name, exc)
            time.sleep(1.0)
            return False
        skipped = self.ranges.take_skipped_input()
        if skipped:
            self.driver.dead_letter(skipped)
        return True

    def _split(self, owned: OwnedSplit) -> Any:
        return self.source.split_codec.from_wire(owned.split)

    def _available_end(self, owned: OwnedSplit, base: int) -> int:
        split = self.ranges.with_position(self._split(owned), base)
        now_ms = int(time.time() * 1000)
        if self._available_now_ms is not None and self.source.boundedness is not Boundedness.BOUNDED:
            now_ms = self._available_now_ms
        end = self.ranges.available_end(split, now_ms)
        self._available[owned.split_id] = end
        return end

    def _event_time_before(self, owned: OwnedSplit, base: int) -> int | None:
        return self.ranges.event_time_before(self._split(owned), base)

    def _event_time_bound(self) -> EventTimeBound | None:
        drift = self.alignment_max_drift_ms
        if drift is None:
            return None
        ranges = self.ranges

        def at(owned: OwnedSplit, position: int) -> int | None:
            return ranges.event_time_at(self._split(owned), position)

        def after(owned: OwnedSplit, event_time_ms: int) -> int | None:
            return ranges.position_after_event_time(self._split(owned), event_time_ms)

        return EventTimeBound(drift, at, after)
