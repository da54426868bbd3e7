"""The ``files`` standalone reader: reads its splits one after the other, in batches.

A split is opened when its turn comes: the file is checked against its listing (size
and modification time), then read as Arrow batches of the source's schema from the
split's position; each batch becomes records (a dict per row) until the split's end.
After the last row the file is checked again: a file that changed while it was read
is a bad file too. Bad files follow ``on_bad_file`` (badfiles.py). The host asks the
enumerator for more splits when this reader has nothing to read (pull assignment).
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from sluicegate.api import InputStatus, ReadResult, Record, SourceReader, SourceReaderContext

from .badfiles import BAD_FILE_EVENT, BadFile, BadFileError, change_of
from .options import FileOptions
from .split import FileSplit
from .storage import FileStore

log = logging.getLogger("sluicegate.connectors.files")

ARROW_BATCH_ROWS = 8_192


class FileSourceReader(SourceReader[FileSplit]):
    def __init__(
        self,
        options: FileOptions,
        store: FileStore,
        schema: Callable[[], pa.Schema],
        context: SourceReaderContext | None = None,
    ) -> None:
        self._options = options
        self._store = store
        self._schema = schema
        self._context = context
        self._splits: OrderedDict[str, FileSplit] = OrderedDict()
        self._current: tuple[FileSplit, Iterator[pa.RecordBatch]] | None = None
        self._leftover: pa.RecordBatch | None = None
        self._paused: set[str] = set()
        """Splits paused for watermark alignment: not read until resumed."""
        self.bad_files = 0

    def add_splits(self, splits: Sequence[FileSplit]) -> None:
        for split in splits:
            self._splits[split.split_id] = split.copy()

    def next_batch(self, max_records: int) -> ReadResult:
        result = ReadResult()
        while len(result.records) < max_records:
            split = next((s for s in self._splits.values() if s.split_id not in self._paused), None)
            if split is None:
                break
            try:
                self._read(split, max_records - len(result.records), result)
            except BadFile as bad:
                self._on_bad_file(split, bad, result)
        readable = any(sid not in self._paused for sid in self._splits)
        result.status = InputStatus.MORE_AVAILABLE if readable else InputStatus.NOTHING_AVAILABLE
        return result

    def _read(self, split: FileSplit, room: int, result: ReadResult) -> None:
        if self._current is None or self._current[0] is not split:
            self._open(split)
        assert self._current is not None
        batches = self._current[1]
        while room > 0:
            batch = self._leftover if self._leftover is not None else next(batches, None)
            self._leftover = None
            if batch is None:
                self._check_unchanged(split)
                self._finish(split, result)
                return
            if batch.num_rows > room:
                batch, self._leftover = batch.slice(0, room), batch.slice(room)
            self._emit(split, batch, result)
            room -= batch.num_rows
        if split.rows is not None and split.position >= split.rows and self._leftover is None:
            self._check_unchanged(split)
            self._finish(split, result)

    def _open(self, split: FileSplit) -> None:
        self._check_unchanged(split)
        batches = self._store.batches(split, self._schema(), split.position, split.rows, ARROW_BATCH_ROWS)
        self._current = (split, batches)
        self._leftover = None

    def _check_unchanged(self, split: FileSplit) -> None:
        change = change_of(split, self._store.info(split.path))
        if change is not None:
            raise BadFile(split.path, change)

    def _emit(self, split: FileSplit, batch: pa.RecordBatch, result: ReadResult) -> None:
        rows = batch.to_pylist()
        times = _event_times(batch, self._options.event_time_column)
        split_id = split.split_id
        if times is None:
            result.records.extend(Record(split_id, row) for row in rows)
        else:
            result.records.extend(Record(split_id, row, t) for row, t in zip(rows, times, strict=True))
        split.position += len(rows)

    def _finish(self, split: FileSplit, result: ReadResult) -> None:
        self._splits.pop(split.split_id, None)
        self._paused.discard(split.split_id)
        self._current = None
        self._leftover = None
        result.finished_split_ids.append(split.split_id)

    def _on_bad_file(self, split: FileSplit, bad: BadFile, result: ReadResult) -> None:
        if self._options.on_bad_file == "fail":
            raise BadFileError(bad)
        self.bad_files += 1
        read = f"; rows 0..{split.position - 1} of the split were read" if split.position else ""
        log.warning("skipped bad file %s: %s%s (on_bad_file=skip)", bad.path, bad.reason, read)
        if self._context is not None:
            self._context.dead_letter("bad-file", self._store.url(bad.path), split.position, f"{bad.reason}{read}")
            with contextlib.suppress(NotImplementedError):
                self._context.send_source_event({"type": BAD_FILE_EVENT, "path": bad.path, "reason": bad.reason})
        self._finish(split, result)

    def snapshot_state(self, checkpoint_id: int) -> list[FileSplit]:
        return [s.copy() for s in self._splits.values()]

    def remove_splits(self, split_ids: Sequence[str]) -> None:
        for split_id in split_ids:
            self._splits.pop(split_id, None)
            if self._current is not None and self._current[0].split_id == split_id:
                self._current = None
                self._leftover = None

    def pause_or_resume_splits(self, to_pause: Sequence[str], to_resume: Sequence[str]) -> None:
        # A paused split's open file is dropped; it is opened again at its position when
        # it is next read (a Parquet split skips the row groups before it).
        self._paused = (self._paused | set(to_pause)) - set(to_resume)

    def close(self) -> None:
        self._current = None
        self._leftover = None


def _event_times(batch: pa.RecordBatch, column: str | None) -> list[Any] | None:
    """The event time (ms) of each row, from the event-time column (None: no such column)."""
    if column is None:
        return None
    values = batch.column(batch.schema.get_field_index(column))
    times: list[Any] = event_time_ms(values).to_pylist()
    return times


def event_time_ms(values: Any) -> Any:
    """An event-time column as int64 ms (timestamps and dates converted, integers as they are)."""
    import pyarrow.compute as pc

    kind = values.type
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        return pc.cast(pc.cast(values, pa.timestamp("ms", tz=getattr(kind, "tz", None))), pa.int64())
    return pc.cast(values, pa.int64())
