"""The ``sequence`` connector's enumerator: splits handed out through an assigner, released at start or over time."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from sluicegate.api import (
    SplitDistributor,
    SplitEnumerator,
    SplitEnumeratorContext,
)

from .options import SequenceOptions
from .split import SequenceSplit, SequenceSplitCodec


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

    def __bool__(self) -> bool:
        return bool(self._firsts)

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
        if self._fresh:  # a returned split replaces its fresh self
            for split in splits:
                self._fresh.discard(self._options.index_of(split))
        self._others.update((split.split_id, split) for split in splits)
        self._distributor.add_splits(splits)

    def _on_removed(self, splits: Sequence[SequenceSplit]) -> None:
        others = self._others
        for split in splits:
            if others.pop(split.split_id, None) is None and self._fresh:
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
