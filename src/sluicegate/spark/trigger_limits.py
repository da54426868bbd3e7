"""Spark's ``minOffsetsPerTrigger`` / ``maxTriggerDelay`` and ``minPartitions``, for any
connector a query reads through ``format("sluicegate")``: pure rules, the clock given.

- A micro-batch waits until it has at least ``min_rows`` new rows, or until
  ``max_delay_ms`` have passed since the last batch that read rows (Spark's Kafka source:
  "the trigger is delayed until minOffsetsPerTrigger are available or maxTriggerDelay has
  passed"). A batch that only carries bookkeeping (assignments, finished splits) is never
  held back: it reads nothing and the coordinator waits for it.
- ``cut_ranges`` cuts a batch's large ranges so that no Spark partition reads more than
  ``maxRecordsPerPartition`` rows and there are at least ``minPartitions`` of them, each
  range in pieces in proportion to its share of the batch (as Spark's Kafka source splits
  the offset range of a skewed or backlogged partition).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

SplitT = TypeVar("SplitT")


@dataclass
class MinRowsPerTrigger:
    min_rows: int
    max_delay_ms: int
    last_batch_ms: int
    """When the last batch that read rows was planned (the query's start before that)."""

    def admits(self, new_rows: int, now_ms: int) -> bool:
        """Whether a batch of ``new_rows`` rows runs now; a batch that runs resets the delay."""
        if new_rows == 0:
            return True  # bookkeeping only
        if new_rows >= self.min_rows or now_ms - self.last_batch_ms >= self.max_delay_ms:
            self.last_batch_ms = now_ms
            return True
        return False


@dataclass(frozen=True)
class PlannedPart(Generic[SplitT]):
    """One Spark partition of a batch: a subtask's ranges ``(split, start, end)``."""

    subtask: int
    ranges: tuple[tuple[SplitT, int, int], ...]


def cut_ranges(
    parts: list[PlannedPart[SplitT]], min_partitions: int | None, max_rows_per_part: int | None = None
) -> list[PlannedPart[SplitT]]:
    """``parts`` with large ranges cut: first each range of more than ``max_rows_per_part``
    rows into ``ceil(rows / max)`` even pieces (Spark 4's ``maxRecordsPerPartition``), then,
    so that there are at least ``min_partitions`` parts, each range into pieces in
    proportion to its rows (Spark's ``minPartitions``), as Spark's Kafka source's
    KafkaOffsetRangeCalculator cuts them. A range cut in pieces leaves its subtask's part;
    its pieces are parts of their own."""
    if max_rows_per_part is not None:
        parts = _cut(parts, lambda rows: -(-rows // max_rows_per_part))
    if min_partitions is None or len(parts) >= min_partitions:
        return parts
    total = sum(end - start for part in parts for _, start, end in part.ranges)
    if total <= 0:
        return parts
    return _cut(parts, lambda rows: min(rows, max(1, round(rows / total * min_partitions))))


def _cut(parts: list[PlannedPart[SplitT]], pieces_of: Callable[[int], int]) -> list[PlannedPart[SplitT]]:
    """Each range in ``pieces_of(its rows)`` even pieces, a part each (one piece: kept)."""
    out: list[PlannedPart[SplitT]] = []
    for part in parts:
        kept: list[tuple[SplitT, int, int]] = []
        pieces: list[PlannedPart[SplitT]] = []
        for split, start, end in part.ranges:
            count = pieces_of(end - start)
            if count <= 1:
                kept.append((split, start, end))
                continue
            bounds = [start + (end - start) * i // count for i in range(count + 1)]
            pieces += [PlannedPart(part.subtask, ((split, a, b),)) for a, b in itertools.pairwise(bounds)]
        if kept:
            out.append(PlannedPart(part.subtask, tuple(kept)))
        out += pieces
    return out
