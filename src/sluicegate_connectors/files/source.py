"""``FileSource``: the enumerator, the reader and row ranges of the ``files`` connector.

Files of a directory or an object store prefix (any fsspec URL), in Parquet, CSV or
JSON Lines, read once each: bounded (the files present at start) or continuously
(new files found every ``discovery_interval_ms``). docs/files.md is the guide.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sluicegate.api import (
    Boundedness,
    RangeChunk,
    Source,
    SourceReaderContext,
    SplitEnumeratorContext,
    SupportsPositionRanges,
    SupportsSplitReassignmentOnRecovery,
)
from sluicegate.api.assigners import ASSIGNMENT_OPTIONS
from sluicegate.api.errors import ConfigError, SourceError, option_named
from sluicegate.api.ranges import SkippedInput

from .badfiles import BadFile, BadFileError
from .enumerator import FileEnumerator, queue_order, splits_of_files
from .options import FileOptions
from .ranges import PlanningView
from .reader import FileSourceReader, event_time_ms
from .schema import parse_ddl
from .split import FileSplit, FileSplitCodec
from .storage import READ_ERRORS, FileStore

log = logging.getLogger("sluicegate.connectors.files")

RANGE_BATCH_ROWS = 65_536
CHECK_INTERVAL_S = 1.0


class FileSource(
    Source[FileSplit],
    SupportsSplitReassignmentOnRecovery,
    SupportsPositionRanges[FileSplit],
):
    LOCAL_OPTIONS = ("storage.", "missing_path", "discovery_interval_ms", *ASSIGNMENT_OPTIONS)
    """``storage.``: fsspec's arguments (endpoints, credentials); ``discovery_interval_ms``: how
    often to list, as a throttle (a Spark query's default lists every second)."""
    reads_splits_in_order = True  # a Parquet row group is decoded whole: no thin slices of every file

    def __init__(self, options: FileOptions) -> None:
        self.options = options
        self._codec = FileSplitCodec()
        self._store: FileStore | None = None
        self._schema: pa.Schema | None = None
        self._planning: PlanningView | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> FileSource:
        return cls(FileOptions.parse(options))

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self.options.bounded else Boundedness.CONTINUOUS_UNBOUNDED

    @property
    def split_codec(self) -> FileSplitCodec:
        return self._codec

    def store(self) -> FileStore:
        if self._store is None:
            self._store = FileStore(self.options)
        return self._store

    def schema(self) -> pa.Schema:
        """The rows' schema: the ``schema`` option, or the first file's (in path order)."""
        if self._schema is None:
            if self.options.schema_ddl is not None:
                self._schema = parse_ddl(self.options.schema_ddl)
            else:
                self._schema = self._inferred_schema()
        return self._schema

    def check_inputs(self, wait_s: float) -> None:
        """The path exists (``missing_path=fail``, the default), looked for again every
        second for up to ``wait_s``; an empty directory is fine (files may come)."""
        if self.options.missing_path == "wait":
            return
        store = self.store()
        deadline = time.monotonic() + wait_s
        while not store.root_exists():
            if time.monotonic() >= deadline:
                raise SourceError(
                    f"path {self.options.path} ({option_named('path')}) does not exist (waited {wait_s:.0f} s): "
                    f"check it, create the directory, or set {option_named('missing_path', 'wait')} to wait until "
                    "it is created"
                )
            time.sleep(CHECK_INTERVAL_S)

    def _inferred_schema(self) -> pa.Schema:
        """The first readable file's schema. A file that cannot be read is a bad file, not
        a bad setting: ``on_bad_file=fail`` stops here naming it, ``skip`` tries the next
        one (the reader skips and dead-letters the bad one when it gets to it)."""
        store = self.store()
        files = store.list_files()
        if not files and not store.root_exists():  # the path is wrong, not the schema
            raise SourceError(
                f"path {self.options.path} ({option_named('path')}) does not exist: check it (to read a path "
                f"created later, give {option_named('schema')}: there is no file to infer it from)"
            )
        if not files:
            raise ConfigError("schema", f"no file under {self.options.path} to infer it from: give the schema (DDL)")
        for entry in files:
            try:
                schema = store.file_schema(entry.path)
            except READ_ERRORS as exc:
                bad = BadFile(entry.path, f"{exc} (while inferring the schema from the first readable file)")
                if self.options.on_bad_file == "fail":
                    raise BadFileError(bad) from None
                log.warning(
                    "bad file %s: %s; the schema is inferred from the next file (on_bad_file=skip)", bad.path, exc
                )
                continue
            column = self.options.event_time_column
            if column is not None and schema.get_field_index(column) < 0:
                raise ConfigError("event_time_column", f"{column!r} is not a column of {entry.path}")
            return schema
        raise ConfigError(
            "schema", f"no readable file under {self.options.path} to infer it from: give the schema (DDL)"
        )

    def create_enumerator(self, context: SplitEnumeratorContext[FileSplit]) -> FileEnumerator:
        return FileEnumerator(context, self.options, self.store())

    def restore_enumerator(self, context: SplitEnumeratorContext[FileSplit], checkpoint: Any) -> FileEnumerator:
        return FileEnumerator.restore(context, self.options, self.store(), checkpoint)

    def create_reader(self, context: SourceReaderContext) -> FileSourceReader:
        return FileSourceReader(self.options, self.store(), self.schema, context)

    # -- position ranges (sluicegate.api.ranges) --------------------------------------

    def _view(self) -> PlanningView:
        if self._planning is None:
            self._planning = PlanningView(self.options, self.store, self.schema)
        return self._planning

    def split_position(self, split: FileSplit) -> int:
        return split.position

    def with_position(self, split: FileSplit, position: int) -> FileSplit:
        return split.copy(position)

    def split_end(self, split: FileSplit) -> int | None:
        return self._view().end(split)

    def batch_splits(self) -> list[FileSplit]:
        """The files there now, in the ``order`` option's order, each split with its end
        (bad files: ``on_bad_file``; skipped ones end where they start, logged)."""
        store = self.store()
        splits = splits_of_files(store, self.options, queue_order(tuple(store.list_files()), self.options.order))
        self.prepare_planning(splits)
        for skipped in self.take_skipped_input():  # no dead-letter topic without a coordinator: logged
            log.warning("batch read: skipped %s: %s", skipped.origin, skipped.reason)
        return splits

    def suggested_parallelism(self) -> int | None:
        """The driver machine's cores (Spark's file source has no such setting): in local mode
        the executors' cores; on a cluster give ``parallelism``."""
        return os.cpu_count() or 1

    def prepare_planning(self, splits: Sequence[FileSplit]) -> None:
        self._view().refresh(splits)

    def available_end(self, split: FileSplit, now_ms: int) -> int:
        end = self._view().end(split)
        return split.position if end is None else max(split.position, end)

    def take_skipped_input(self) -> list[SkippedInput]:
        return self._view().take_skipped()

    def arrow_schema(self) -> Any:
        return self.schema()

    def read_arrow(self, split: FileSplit, start: int, end: int, max_rows: int) -> Iterator[Any]:
        from .badfiles import BadFile, BadFileError, change_of

        store = self.store()
        change = change_of(split, store.info(split.path))
        if change is not None:
            raise BadFileError(BadFile(split.path, change))
        try:
            yield from store.batches(split, self.schema(), start, end, min(max_rows, RANGE_BATCH_ROWS))
        except BadFile as bad:
            raise BadFileError(bad) from None

    def read_range(self, split: FileSplit, start: int, end: int, max_rows: int) -> Iterator[RangeChunk]:
        """Rows as JSON-ready dicts and event times, for hosts without the connector's schema."""
        column = self.options.event_time_column
        for batch in self.read_arrow(split, start, end, max_rows):
            times = None if column is None else event_time_ms(batch.column(batch.schema.get_field_index(column)))
            yield RangeChunk(batch.to_pylist(), times)

    def event_time_at(self, split: FileSplit, position: int) -> int | None:
        return None
