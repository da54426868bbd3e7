"""The ``sequence`` connector's reader: the records of its splits, throttled by ``rate``, paused by ``stall_split``."""

from __future__ import annotations

import time
from collections.abc import Sequence

from sluicegate.api import (
    InputStatus,
    ReadResult,
    Record,
    SourceReader,
)

from .options import SequenceOptions
from .split import SequenceSplit
from .stall import StallClock


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
