"""Row ranges of splits read into Arrow, for hosts that plan what to read (Spark).

Executor side: ``read_arrow`` reads rows ``[start, end)`` of a split straight from the
file into record batches of the source's schema (Parquet: only the row groups that
hold them), with no Python per row. A file that does not read, or changed since it
was listed, fails the task naming it: the rows were planned and must be read as
planned.

Driver side (``PlanningView``): a split's end is its row count. The listing knows it
for Parquet; for CSV and JSON Lines the driver counts the rows once (reading the file)
in ``prepare_planning``, which also checks each split's file once against its listing.
A bad file found there follows ``on_bad_file``: ``fail`` stops the query
(``available_end`` raises BadFileError), ``skip`` ends the split where it is (counted
and logged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import pyarrow as pa

from sluicegate.api.ranges import SkippedInput

from .badfiles import BadFile, BadFileError, change_of
from .options import FileOptions
from .split import FileSplit
from .storage import FileStore

log = logging.getLogger("sluicegate.connectors.files")

MAX_REMEMBERED = 100_000


class PlanningView:
    def __init__(self, options: FileOptions, store: Callable[[], FileStore], schema: Callable[[], pa.Schema]) -> None:
        self.options = options
        self._store = store
        self._schema = schema
        self._ends: dict[str, int] = {}
        """split id -> its end, for splits whose row count the listing did not know or
        that were skipped as bad."""
        self._checked: set[str] = set()
        self._failed: dict[str, BadFile] = {}
        self._skipped: list[SkippedInput] = []
        self.bad_files = 0

    def refresh(self, splits: Sequence[FileSplit]) -> None:
        for split in splits:
            if split.split_id in self._checked:
                continue
            try:
                change = change_of(split, self._store().info(split.path))
                if change is not None:
                    raise BadFile(split.path, change)
                if split.rows is None:
                    self._ends[split.split_id] = self._store().count_rows(split, self._schema())
            except BadFile as bad:
                self._on_bad_file(split, bad)
            self._checked.add(split.split_id)
        if len(self._checked) > MAX_REMEMBERED:
            live = {s.split_id for s in splits}
            self._checked &= live
            self._ends = {k: v for k, v in self._ends.items() if k in live}

    def _on_bad_file(self, split: FileSplit, bad: BadFile) -> None:
        if self.options.on_bad_file == "fail":
            self._failed[split.split_id] = bad
            return
        self.bad_files += 1
        log.warning("skipped bad file %s: %s (on_bad_file=skip)", bad.path, bad.reason)
        self._skipped.append(SkippedInput("bad-file", self._url(bad.path), split.position, bad.reason))
        self._ends[split.split_id] = split.position

    def take_skipped(self) -> list[SkippedInput]:
        skipped, self._skipped = self._skipped, []
        return skipped

    def _url(self, path: str) -> str:
        return self._store().url(path)

    def end(self, split: FileSplit) -> int | None:
        bad = self._failed.get(split.split_id)
        if bad is not None:
            raise BadFileError(bad)
        known = self._ends.get(split.split_id)
        return known if known is not None else split.rows
