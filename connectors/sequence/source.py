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

import bisect
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluicegate.api import (
    Boundedness,
    ConfigError,
    InputStatus,
    RangeChunk,
    ReadResult,
    Record,
    Source,
    SourceReader,
    SourceReaderContext,
    SplitAssigner,
    SplitDistributor,
    SplitEnumerator,
    SplitEnumeratorContext,
    SupportsPositionRanges,
    SupportsSplitReassignmentOnRecovery,
    WireSplit,
)
from sluicegate.api.assigners import (
    ASSIGNER_OPTION,
    ASSIGNMENT_OPTIONS,
    GRACE_OPTION,
    REBALANCE_OPTION,
    FairShareAssigner,
    assigner_from_options,
)
from sluicegate.api.options import int_option, unknown_option

UNBOUNDED_STRIDE = 2**40
"""Unbounded split k starts at k * UNBOUNDED_STRIDE, so values never collide."""
UNBOUNDED_READ_AHEAD = 1_000_000
"""Position ranges: how far past its position an unbounded split without a rate can be read."""


@dataclass(slots=True)
class SequenceSplit:
    split_id: str
    start: int
    end: int | None
    """Exclusive; None for an unbounded split."""
    position: int
    """The next value to read."""

    @property
    def finished(self) -> bool:
        return self.end is not None and self.position >= self.end


class SequenceSplitCodec:
    def to_wire(self, split: SequenceSplit) -> WireSplit:
        return {"split_id": split.split_id, "start": split.start, "end": split.end, "position": split.position}

    def from_wire(self, data: Mapping[str, Any]) -> SequenceSplit:
        return SequenceSplit(data["split_id"], data["start"], data["end"], data["position"])


@dataclass(frozen=True)
class SequenceOptions:
    splits: int = 8
    records_per_split: int | None = 1000
    """None: unbounded."""
    rate: float = 0.0
    """Records per second per reader; 0: as fast as possible."""
    start_time_ms: int = 1_700_000_000_000
    event_interval_ms: int = 10
    release_interval_ms: int = 0
    """0: every split is known at start; otherwise splits_per_release more every this many ms."""
    splits_per_release: int = 1
    split_time_offset_ms: int = 0
    """Event-time skew: split k's first record has event time start_time_ms + k * this."""
    stall_split: int = -1
    """-1: none; otherwise the index of the split that goes quiet (see the module docstring)."""
    stall_at: int = 0
    stall_ms: int = 0
    assigner: Callable[[], SplitAssigner[Any]] = field(default=lambda: FairShareAssigner(), compare=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SequenceOptions:
        known = {
            "splits",
            "records_per_split",
            "rate",
            "start_time_ms",
            "event_interval_ms",
            "release_interval_ms",
            "splits_per_release",
            "split_time_offset_ms",
            "stall_split",
            "stall_at",
            "stall_ms",
            ASSIGNER_OPTION,
            GRACE_OPTION,
            REBALANCE_OPTION,
        }
        for key in options:
            if key not in known:
                raise unknown_option(key, known, "the sequence connector")
        splits = int_option(options, "splits", cls.splits, minimum=1)
        raw = options.get("records_per_split", "1000").strip().lower()
        records: int | None = None if raw == "unbounded" else int_option(options, "records_per_split", 1000, minimum=1)
        try:
            rate = float(options.get("rate", "0"))
        except ValueError:
            raise ConfigError("rate", f"must be a number of records per second, got {options['rate']!r}") from None
        if rate < 0 or not math.isfinite(rate):
            raise ConfigError("rate", "must be a finite number >= 0")
        return cls(
            splits=splits,
            records_per_split=records,
            rate=rate,
            start_time_ms=int_option(options, "start_time_ms", cls.start_time_ms, minimum=0),
            event_interval_ms=int_option(options, "event_interval_ms", cls.event_interval_ms, minimum=0),
            release_interval_ms=int_option(options, "release_interval_ms", cls.release_interval_ms, minimum=0),
            splits_per_release=int_option(options, "splits_per_release", cls.splits_per_release, minimum=1),
            split_time_offset_ms=int_option(options, "split_time_offset_ms", cls.split_time_offset_ms, minimum=0),
            stall_split=int_option(options, "stall_split", cls.stall_split, minimum=-1),
            stall_at=int_option(options, "stall_at", cls.stall_at, minimum=0),
            stall_ms=int_option(options, "stall_ms", cls.stall_ms, minimum=0),
            assigner=assigner_from_options(options, FairShareAssigner.name),
        )

    def split_index(self, split: SequenceSplit) -> int:
        stride = self.records_per_split if self.records_per_split is not None else UNBOUNDED_STRIDE
        return split.start // stride

    def stall_position(self, split: SequenceSplit) -> int | None:
        """Where ``split`` goes quiet (None: it does not)."""
        if self.stall_split < 0 or self.split_index(split) != self.stall_split:
            return None
        return split.start + self.stall_at

    def event_time_base(self, split: SequenceSplit) -> int:
        """Event time of value v of ``split`` = this + v * event_interval_ms."""
        stride = self.records_per_split if self.records_per_split is not None else UNBOUNDED_STRIDE
        index = split.start // stride
        return self.start_time_ms + index * self.split_time_offset_ms - split.start * self.event_interval_ms

    @property
    def released_at_start(self) -> int:
        """How many splits the enumerator knows when it is created."""
        return self.splits if self.release_interval_ms == 0 else 0

    def all_splits(self) -> list[SequenceSplit]:
        return self.splits_range(0, self.splits)

    def splits_range(self, first: int, stop: int) -> list[SequenceSplit]:
        """Splits first .. stop-1."""
        return [self.split(k) for k in range(first, min(stop, self.splits))]

    def split(self, k: int) -> SequenceSplit:
        """Split k as it is before anyone reads it."""
        width = max(5, len(str(self.splits - 1)))
        if self.records_per_split is None:
            start, end = k * UNBOUNDED_STRIDE, None
        else:
            start, end = k * self.records_per_split, (k + 1) * self.records_per_split
        return SequenceSplit(f"seq-{k:0{width}d}", start, end, start)

    def index_of(self, split: SequenceSplit) -> int:
        """k of split k (its start is k times the stride)."""
        stride = self.records_per_split if self.records_per_split is not None else UNBOUNDED_STRIDE
        return split.start // stride

    def fresh_index(self, split: SequenceSplit) -> int | None:
        """k if ``split`` is split k as ``split(k)`` makes it (never read), else None."""
        k = self.index_of(split)
        return k if 0 <= k < self.splits and self.split(k) == split else None


class StallClock:
    """The ``stall_split`` option for one reader or one query's planning: a split is quiet
    from the first time it is seen at its stall point until ``stall_ms`` later."""

    def __init__(self, options: SequenceOptions) -> None:
        self._options = options
        self._since_ms: dict[str, float] = {}

    def quiet(self, split: SequenceSplit, now_ms: float) -> bool:
        if split.position != self._options.stall_position(split):
            return False
        since = self._since_ms.setdefault(split.split_id, now_ms)
        return now_ms - since < self._options.stall_ms


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


class FreshRuns:
    """A set of split indices as disjoint runs [first, stop): a sorted list of the firsts
    (bisect) and a dict of their stops. Taking the first index of a run, what the
    fair-share assigner does a million times at start, is two dict operations."""

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._stop_of: dict[int, int] = {}

    def add(self, first: int, stop: int) -> None:
        """Add first .. stop-1, none of which is in the set (new splits are new indices)."""
        i = bisect.bisect_left(self._firsts, first)
        if i > 0 and self._stop_of[self._firsts[i - 1]] == first:  # joins the run before
            i -= 1
            first = self._firsts[i]
        else:
            self._firsts.insert(i, first)
        if i + 1 < len(self._firsts) and self._firsts[i + 1] == stop:  # and the run after
            stop = self._stop_of.pop(self._firsts.pop(i + 1))
        self._stop_of[first] = stop

    def discard(self, k: int) -> None:
        i = bisect.bisect_right(self._firsts, k) - 1
        if i < 0:
            return
        first = self._firsts[i]
        stop = self._stop_of[first]
        if k >= stop:
            return
        if first == k:
            del self._stop_of[k]
            if k + 1 == stop:
                del self._firsts[i]
            else:
                self._firsts[i] = k + 1
                self._stop_of[k + 1] = stop
            return
        self._stop_of[first] = k
        if k + 1 < stop:
            self._firsts.insert(i + 1, k + 1)
            self._stop_of[k + 1] = stop

    def runs(self) -> list[tuple[int, int]]:
        return [(first, self._stop_of[first]) for first in self._firsts]


class SequenceEnumerator(SplitEnumerator[SequenceSplit]):
    def __init__(
        self,
        context: SplitEnumeratorContext[SequenceSplit],
        unassigned: list[SequenceSplit],
        bounded: bool,
        options: SequenceOptions | None = None,
        released: int | None = None,
        fresh_runs: Sequence[tuple[int, int]] = (),
    ) -> None:
        """``unassigned`` are splits as they come back from readers; ``fresh_runs`` the
        never-read splits first .. stop-1, pending before them."""
        self._context = context
        self._bounded = bounded
        self._options = options or SequenceOptions(splits=len(unassigned))
        self._released = self._options.released_at_start if released is None else released
        """Splits 0 .. released-1 are known (unassigned, assigned or finished)."""
        self._codec = SequenceSplitCodec()
        assigner = self._options.assigner()
        self._distributor = SplitDistributor(
            context, assigner, all_discovered=lambda: self._bounded and self.all_released
        )
        self._fresh = FreshRuns()
        """The pending splits nobody has read, as index runs: snapshot_state costs what
        changed, not a pass over 1,000,000 pending splits on every commit."""
        self._others: dict[str, SequenceSplit] = {}
        """The other pending splits (back from readers), in the order they came."""
        assigner.on_removed = self._on_removed
        for first, stop in fresh_runs:
            self._add_fresh(first, stop)
        self._add_others(unassigned)

    @property
    def all_released(self) -> bool:
        return self._released >= self._options.splits

    def start(self) -> None:
        if not self.all_released and self._options.release_interval_ms == 0:
            self._on_discovered(self._options.splits, None)  # restored, and release is now off: all at once
        if not self.all_released:
            interval = self._options.release_interval_ms
            # The callable stands for discovery work off the loop; it only says how many
            # to release, so the handler (on the loop) decides which from the state.
            count = self._options.splits_per_release
            self._context.call_async(lambda: count, self._on_discovered, initial_delay_ms=interval, period_ms=interval)
        self._context.metrics.gauge("splits_released", self._released)
        self._distribute()

    def _on_discovered(self, count: int | None, error: BaseException | None) -> None:
        if error is not None or not count or self.all_released:
            return
        stop = min(self._options.splits, self._released + count)
        self._add_fresh(self._released, stop)
        self._released = stop
        self._context.metrics.gauge("splits_released", stop)
        self._distribute()

    def add_reader(self, subtask: int) -> None:
        self._distribute()

    def add_splits_back(self, splits: list[SequenceSplit], subtask: int) -> None:
        self._add_others(splits)
        self._distribute()

    def _add_fresh(self, first: int, stop: int) -> None:
        stop = min(stop, self._options.splits)
        if first < stop:
            self._distributor.add_splits(self._options.splits_range(first, stop))
            self._fresh.add(first, stop)

    def _add_others(self, splits: Sequence[SequenceSplit]) -> None:
        for split in splits:
            self._fresh.discard(self._options.index_of(split))  # a returned split replaces its fresh self
            self._others[split.split_id] = split
        self._distributor.add_splits(splits)

    def _on_removed(self, split: SequenceSplit) -> None:
        if self._others.pop(split.split_id, None) is None:
            self._fresh.discard(self._options.index_of(split))

    def handle_split_request(self, subtask: int, hostname: str | None) -> None:
        self._distribute(requester=subtask)

    def pending_split_ids(self) -> list[str]:
        return [split.split_id for split in self._distributor.assigner.pending]

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """The unassigned splits: runs of never-read splits as [first, stop], so the
        state of 1,000,000 fresh splits is a few bytes, not 80 MB; then the others."""
        items: list[Any] = [[first, stop] for first, stop in self._fresh.runs()]
        items += [self._codec.to_wire(split) for split in self._others.values()]
        state: dict[str, Any] = {"unassigned": items}
        if self._options.release_interval_ms > 0:
            state["released"] = self._released
        return state

    def _distribute(self, requester: int | None = None) -> None:
        self._distributor.distribute(requester)


class SequenceReader(SourceReader[SequenceSplit]):
    def __init__(self, options: SequenceOptions) -> None:
        self._options = options
        self._splits: dict[str, SequenceSplit] = {}
        self._paused: set[str] = set()
        self._tokens = 0.0
        self._last_refill = time.monotonic()
        self._turn = 0
        self._stall = StallClock(options)
        """When a split first stood at its stall point (the ``stall_split`` option)."""

    def add_splits(self, splits: Sequence[SequenceSplit]) -> None:
        for split in splits:
            self._splits[split.split_id] = SequenceSplit(split.split_id, split.start, split.end, split.position)

    def next_batch(self, max_records: int) -> ReadResult:
        budget = self._budget(max_records)
        result = ReadResult()
        readable = [s for s in self._splits.values() if s.split_id not in self._paused and not self._stalled(s)]
        if not readable:
            result.status = InputStatus.NOTHING_AVAILABLE
            return result
        per_split = max(1, budget // len(readable)) if budget else 0
        opts = self._options
        # Start at the next split each call: with a rate, a call may have fewer records
        # to give than there are splits, and a fixed order would starve the last ones.
        turn = self._turn % len(readable)
        self._turn += 1
        for split in readable[turn:] + readable[:turn]:
            if budget <= 0:
                break
            n = min(per_split, budget)
            if split.end is not None:
                n = min(n, split.end - split.position)
            stall = opts.stall_position(split)
            if stall is not None and split.position < stall:
                n = min(n, stall - split.position)  # stop at the stall point: it starts there
            base = opts.event_time_base(split)
            for value in range(split.position, split.position + n):
                result.records.append(Record(split.split_id, value, base + value * opts.event_interval_ms))
            split.position += n
            budget -= n
            if split.finished:
                result.finished_split_ids.append(split.split_id)
        for split_id in result.finished_split_ids:
            del self._splits[split_id]
        self._tokens -= len(result.records)
        result.status = InputStatus.MORE_AVAILABLE if self._splits else InputStatus.NOTHING_AVAILABLE
        return result

    def records_to_end(self) -> dict[str, int]:
        return {s.split_id: s.end - s.position for s in self._splits.values() if s.end is not None}

    def _stalled(self, split: SequenceSplit) -> bool:
        return self._stall.quiet(split, time.monotonic() * 1000)

    def _budget(self, max_records: int) -> int:
        if self._options.rate <= 0:
            return max_records
        now = time.monotonic()
        # the bucket holds one second of records, and at least one record (rates below 1/s)
        capacity = max(self._options.rate, 1.0)
        self._tokens = min(capacity, self._tokens + (now - self._last_refill) * self._options.rate)
        self._last_refill = now
        return max(0, min(max_records, int(self._tokens)))

    def snapshot_state(self, checkpoint_id: int) -> list[SequenceSplit]:
        return [SequenceSplit(s.split_id, s.start, s.end, s.position) for s in self._splits.values()]

    def remove_splits(self, split_ids: Sequence[str]) -> None:
        for split_id in split_ids:
            self._splits.pop(split_id, None)
            self._paused.discard(split_id)

    def pause_or_resume_splits(self, to_pause: Sequence[str], to_resume: Sequence[str]) -> None:
        self._paused.update(to_pause)
        self._paused.difference_update(to_resume)
