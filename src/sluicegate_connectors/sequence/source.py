"""``sequence``: split k is the integer range [k*R, (k+1)*R) (R = records_per_split),
read in order; record n of a split carries event time
start_time_ms + k*split_time_offset_ms + i*event_interval_ms where i is n's index
inside its split (split_time_offset_ms, default 0, skews the splits' event times,
e.g. to see watermark alignment at work). Unbounded splits never end.

The enumerator hands unassigned splits to registered readers through a
``SplitAssigner`` (option ``assigner``: ``fair_share`` by default, ``sticky`` or
``round_robin``; ``assignment_grace_ms``), on add_reader, add_splits_back and
RequestSplit. It supports reassignment on recovery.

With ``release_interval_ms`` > 0 the splits are not all known at start: the
enumerator discovers ``splits_per_release`` more every ``release_interval_ms``
through ``context.call_async`` (a periodic call, as a file or partition
discovery would be), in split order, and hands them out as they come. Only
once every split is released does a bounded source signal NoMoreSplits. How
many are released is part of the enumerator's checkpoint.

With ``stall_split`` = K (>= 0) split K goes quiet once ``stall_at`` of its records
are read: a reader gives nothing from it for ``stall_ms``, then reads on (a
partition whose producer paused; the split idleness tests). The pause is the
reader's, not part of any checkpoint. Spark's planning sees the same: the split
has nothing available past its stall point for ``stall_ms`` after planning first
reached it (kept by the source object, which lives for the query on the driver).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from sluicegate.api import (
    Boundedness,
    RangeChunk,
    Source,
    SourceReaderContext,
    SplitEnumeratorContext,
    SupportsPositionRanges,
    SupportsSplitReassignmentOnRecovery,
)
from sluicegate.api.assigners import (
    ASSIGNMENT_OPTIONS,
)

from .enumerator import SequenceEnumerator
from .options import SequenceOptions
from .reader import SequenceReader
from .split import UNBOUNDED_READ_AHEAD, SequenceSplit, SequenceSplitCodec
from .stall import StallClock


class SequenceSource(Source[SequenceSplit], SupportsSplitReassignmentOnRecovery, SupportsPositionRanges[SequenceSplit]):
    # A reader's throttle and stalls change when records come, not which; assignment, who reads them
    LOCAL_OPTIONS = ("rate", "stall_split", "stall_at", "stall_ms", *ASSIGNMENT_OPTIONS)

    def __init__(self, options: SequenceOptions) -> None:
        self.options = options
        self._codec = SequenceSplitCodec()
        self._stall = StallClock(options)
        """When planning first found a split at its stall point (``stall_split``)."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SequenceSource:
        return cls(SequenceOptions.parse(options))

    @property
    def boundedness(self) -> Boundedness:
        if self.options.records_per_split is None:
            return Boundedness.CONTINUOUS_UNBOUNDED
        return Boundedness.BOUNDED

    @property
    def split_codec(self) -> SequenceSplitCodec:
        return self._codec

    def create_enumerator(self, context: SplitEnumeratorContext[SequenceSplit]) -> SequenceEnumerator:
        released = self.options.released_at_start
        return SequenceEnumerator(
            context, [], self.boundedness is Boundedness.BOUNDED, self.options, fresh_runs=[(0, released)]
        )

    def restore_enumerator(self, context: SplitEnumeratorContext[SequenceSplit], checkpoint: Any) -> SequenceEnumerator:
        runs, splits = self._unassigned_from_state(checkpoint["unassigned"])
        # without "released" (no progressive release, or an older checkpoint) every split was known
        released = int(checkpoint.get("released", self.options.splits))
        return SequenceEnumerator(
            context, splits, self.boundedness is Boundedness.BOUNDED, self.options, released=released, fresh_runs=runs
        )

    def _unassigned_from_state(self, items: list[Any]) -> tuple[list[tuple[int, int]], list[SequenceSplit]]:
        """The runs of never-read splits ([first, stop] items, snapshot_state) and the other
        splits (wire splits; a never-read one, as older states hold them, joins the runs)."""
        runs: list[tuple[int, int]] = []
        splits: list[SequenceSplit] = []
        for item in items:
            if isinstance(item, list):
                runs.append((item[0], item[1]))
                continue
            split = self._codec.from_wire(item)
            k = self.options.fresh_index(split)
            if k is None:
                splits.append(split)
            elif runs and runs[-1][1] == k:
                runs[-1] = (runs[-1][0], k + 1)
            else:
                runs.append((k, k + 1))
        return runs, splits

    def create_reader(self, context: SourceReaderContext) -> SequenceReader:
        return SequenceReader(self.options)

    # -- position ranges (sluicegate.api.ranges) --------------------------------

    value_type = "bigint"

    def split_position(self, split: SequenceSplit) -> int:
        return split.position

    def with_position(self, split: SequenceSplit, position: int) -> SequenceSplit:
        return SequenceSplit(split.split_id, split.start, split.end, position)

    def split_end(self, split: SequenceSplit) -> int | None:
        return split.end

    def available_end(self, split: SequenceSplit, now_ms: int) -> int:
        opts = self.options
        if opts.rate > 0:
            produced = math.floor(max(0, now_ms - opts.start_time_ms) * opts.rate / 1000)
            limit = split.start + produced
        elif split.end is None:
            limit = split.position + UNBOUNDED_READ_AHEAD
        else:
            limit = split.end
        if split.end is not None:
            limit = min(limit, split.end)
        return max(split.position, self._before_stall(split, limit, now_ms))

    def _before_stall(self, split: SequenceSplit, limit: int, now_ms: int) -> int:
        """``limit``, or the stall point while the split is quiet there (``stall_split``)."""
        stall = self.options.stall_position(split)
        if stall is None or not split.position <= stall < limit:
            return limit
        if split.position < stall:
            return stall  # planned up to the stall point, where the quiet starts
        return stall if self._stall.quiet(split, now_ms) else limit

    def read_range(self, split: SequenceSplit, start: int, end: int, max_rows: int) -> Iterator[RangeChunk]:
        import pyarrow as pa
        import pyarrow.compute as pc

        if start < split.start or (split.end is not None and end > split.end):
            raise ValueError(f"range [{start}, {end}) is outside split {split.split_id} [{split.start}, {split.end})")
        opts = self.options
        base = opts.event_time_base(split)
        step = max(1, max_rows)
        one = pa.scalar(1, pa.int64())
        for a in range(start, end, step):
            n = min(step, end - a)
            values = pc.add(pc.cumulative_sum(pa.repeat(one, n)), a - 1)
            times = pc.add(pc.multiply(values, opts.event_interval_ms), base)
            yield RangeChunk(values, times)

    def event_time_before(self, split: SequenceSplit, position: int) -> int | None:
        if position <= split.start:
            return None
        return self.options.event_time_base(split) + (position - 1) * self.options.event_interval_ms

    def event_time_at(self, split: SequenceSplit, position: int) -> int | None:
        if position < split.start or (split.end is not None and position >= split.end):
            return None
        return self.options.event_time_base(split) + position * self.options.event_interval_ms

    def position_after_event_time(self, split: SequenceSplit, event_time_ms: int) -> int | None:
        interval = self.options.event_interval_ms
        base = self.options.event_time_base(split)
        if interval == 0:
            return None if base <= event_time_ms else split.start
        first = max(split.start, (event_time_ms - base) // interval + 1)
        return first if split.end is None or first < split.end else None
