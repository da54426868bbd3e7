"""The ``sequence`` connector's options, and what they make: the splits, their records' event times."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sluicegate.api import (
    ConfigError,
    SplitAssigner,
)
from sluicegate.api.assigners import (
    ASSIGNER_OPTION,
    GRACE_OPTION,
    REBALANCE_OPTION,
    FairShareAssigner,
    assigner_from_options,
)
from sluicegate.api.options import int_option, unknown_option

from .split import UNBOUNDED_STRIDE, SequenceSplit


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
