"""The Source: built from string options; a factory for the enumerator and the readers.

Bounded (the table as it is when the enumerator looks), and it reads position ranges
(``SupportsPositionRanges``: a split's position is a key, so ``[a, b)`` holds at most
``b - a`` rows), which is what a Spark query needs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sluicegate.api import (
    Boundedness,
    RangeChunk,
    Source,
    SourceReaderContext,
    SplitEnumeratorContext,
    SupportsPositionRanges,
)
from sluicegate.api.assigners import assigner_from_options
from sqltable.enumerator import KeyRangeEnumerator
from sqltable.reader import KeyRangeReader
from sqltable.split import KeyRangeSplit, KeyRangeSplitCodec
from sqltable.table import TableOptions


class SqlTableSource(Source[KeyRangeSplit], SupportsPositionRanges[KeyRangeSplit]):
    value_type = "string"

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = TableOptions.parse(options)
        self._assigner = assigner_from_options(options, default="fair_share")
        self._codec = KeyRangeSplitCodec()

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SqlTableSource:
        return cls(options)

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def split_codec(self) -> KeyRangeSplitCodec:
        return self._codec

    def create_enumerator(self, context: SplitEnumeratorContext[KeyRangeSplit]) -> KeyRangeEnumerator:
        return KeyRangeEnumerator(context, self.options, self._assigner())

    def restore_enumerator(self, context: SplitEnumeratorContext[KeyRangeSplit], checkpoint: Any) -> KeyRangeEnumerator:
        unassigned = [self._codec.from_wire(s) for s in checkpoint["unassigned"]]
        return KeyRangeEnumerator(context, self.options, self._assigner(), checkpoint["discovered"], unassigned)

    def create_reader(self, context: SourceReaderContext) -> KeyRangeReader:
        return KeyRangeReader(self.options)

    # -- SupportsPositionRanges: what a Spark driver plans with --------------------------

    def split_position(self, split: KeyRangeSplit) -> int:
        return split.position

    def with_position(self, split: KeyRangeSplit, position: int) -> KeyRangeSplit:
        return KeyRangeSplit(split.split_id, split.low, split.high, position)

    def split_end(self, split: KeyRangeSplit) -> int:
        return split.high

    def available_end(self, split: KeyRangeSplit, now_ms: int) -> int:
        return split.high  # a snapshot: all of it is there

    def read_range(self, split: KeyRangeSplit, start: int, end: int, max_rows: int) -> Iterator[RangeChunk]:
        connection = self.options.connect()
        try:
            while start < end:
                rows = self.options.rows(connection, start, end, max_rows)
                if not rows:
                    return
                yield RangeChunk(values=[repr(row) for row in rows])
                start = rows[-1][self.options.key] + 1
        finally:
            connection.close()
