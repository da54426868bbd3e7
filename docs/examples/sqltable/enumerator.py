"""The enumerator: finds the key range once (off the loop), cuts it into splits and
lets a ``SplitAssigner`` hand them out."""

from __future__ import annotations

from typing import Any

from sluicegate.api import SplitDistributor, SplitEnumerator, SplitEnumeratorContext
from sluicegate.api.assigners import SplitAssigner
from sqltable.split import KeyRangeSplit, KeyRangeSplitCodec
from sqltable.table import TableOptions


class KeyRangeEnumerator(SplitEnumerator[KeyRangeSplit]):
    def __init__(
        self,
        context: SplitEnumeratorContext[KeyRangeSplit],
        options: TableOptions,
        assigner: SplitAssigner[KeyRangeSplit],
        discovered: bool = False,
        unassigned: list[KeyRangeSplit] | None = None,
    ) -> None:
        self._context = context
        self._options = options
        self._discovered = discovered
        self._distributor = SplitDistributor(context, assigner, all_discovered=lambda: self._discovered)
        self._distributor.add_splits(unassigned or [])

    def start(self) -> None:
        if not self._discovered:
            # The query blocks: it runs on a worker thread, its result comes back on the loop.
            self._context.call_async(self._options.key_bounds, self._on_bounds)
        self._distributor.distribute()

    def _on_bounds(self, bounds: tuple[int, int] | None, error: BaseException | None) -> None:
        if error is not None:
            raise error  # the coordinator discards this step and restarts the source, with back-off
        if bounds is not None:
            low, high = bounds
            size = self._options.keys_per_split
            self._distributor.add_splits(
                [KeyRangeSplit(f"keys-{k}", k, min(k + size, high + 1), k) for k in range(low, high + 1, size)]
            )
        self._discovered = True
        self._distributor.distribute()

    def add_reader(self, subtask: int) -> None:
        self._distributor.distribute()

    def handle_split_request(self, subtask: int, hostname: str | None) -> None:
        self._distributor.distribute(requester=subtask)

    def add_splits_back(self, splits: list[KeyRangeSplit], subtask: int) -> None:
        self._distributor.add_splits(splits)  # a failed reader's splits, at its checkpoint's positions
        self._distributor.distribute()

    def snapshot_state(self, checkpoint_id: int) -> Any:
        codec = KeyRangeSplitCodec()
        pending = [codec.to_wire(split) for split in self._distributor.assigner.pending]
        return {"discovered": self._discovered, "unassigned": pending}
