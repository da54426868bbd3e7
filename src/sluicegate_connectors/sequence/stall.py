"""The ``stall_split`` option: when a split is quiet at its stall point."""

from __future__ import annotations

from .options import SequenceOptions
from .split import SequenceSplit


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
