"""The reader: reads its splits in key order, a batch at a time."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from sluicegate.api import InputStatus, ReadResult, Record, SourceReader
from sqltable.split import KeyRangeSplit
from sqltable.table import TableOptions


class KeyRangeReader(SourceReader[KeyRangeSplit]):
    def __init__(self, options: TableOptions) -> None:
        self._options = options
        self._splits: dict[str, KeyRangeSplit] = {}
        self._paused: set[str] = set()
        self._connection: sqlite3.Connection | None = None

    def add_splits(self, splits: Sequence[KeyRangeSplit]) -> None:
        for split in splits:
            self._splits[split.split_id] = KeyRangeSplit(split.split_id, split.low, split.high, split.position)

    def next_batch(self, max_records: int) -> ReadResult:
        result = ReadResult()
        for split in [s for s in self._splits.values() if s.split_id not in self._paused]:
            if len(result.records) >= max_records:
                break
            limit = max_records - len(result.records)
            rows = self._options.rows(self._connect(), split.position, split.high, limit)
            result.records += [Record(split.split_id, row) for row in rows]
            # the next key to read: past the last row, or the end when the range is exhausted
            split.position = rows[-1][self._options.key] + 1 if len(rows) == limit else split.high
            if split.finished:
                result.finished_split_ids.append(split.split_id)
                del self._splits[split.split_id]
        result.status = InputStatus.MORE_AVAILABLE if self._splits else InputStatus.NOTHING_AVAILABLE
        return result

    def snapshot_state(self, checkpoint_id: int) -> list[KeyRangeSplit]:
        return [KeyRangeSplit(s.split_id, s.low, s.high, s.position) for s in self._splits.values()]

    def remove_splits(self, split_ids: Sequence[str]) -> None:
        for split_id in split_ids:
            self._splits.pop(split_id, None)

    def pause_or_resume_splits(self, to_pause: Sequence[str], to_resume: Sequence[str]) -> None:
        self._paused.update(to_pause)
        self._paused.difference_update(to_resume)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = self._options.connect()
        return self._connection
