"""The ``files`` enumerator: lists the source's files and hands their splits out
through a SplitAssigner (``pull`` by default: a reader gets splits when it asks).

Discovery lists the directory off the coordinator loop (``context.call_async``) and
reads the footers of new Parquet files (their row groups become splits); the result is
applied on the loop. It is a chain of one-shot calls, each scheduled by the previous
one's handler: every ``discovery_interval_ms``, or once for a bounded source (the
files present at start; then each reader gets NoMoreSplits once all are read). A
failed listing is retried after ``RETRY_MS``.

The checkpoint holds the pending splits and the files taken (``ProcessedFiles``:
bounded by ``max_file_age_ms`` and by forgetting deleted files), so a restored
enumerator never takes a finished file again; splits owned by readers are the
coordinator's to restore.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sluicegate.api import SplitDistributor, SplitEnumerator, SplitEnumeratorContext
from sluicegate.api.retries import repeated_failure_level

from .badfiles import BAD_FILE_EVENT
from .options import FileOptions
from .planning import RowGroup, plan_file
from .processed import ProcessedFiles
from .split import FileEntry, FileSplit, FileSplitCodec
from .storage import READ_ERRORS, FileStore

log = logging.getLogger("sluicegate.connectors.files")

RETRY_MS = 5_000


@dataclass(frozen=True)
class Discovery:
    """What one discovery found (computed off the loop)."""

    listed: tuple[str, ...]
    new: tuple[FileEntry, ...]
    splits: tuple[FileSplit, ...]
    changed: tuple[FileEntry, ...]
    too_old: int
    root_missing: bool = False
    """The path itself is not there (a typo, or a directory created later)."""


class FileEnumerator(SplitEnumerator[FileSplit]):
    def __init__(
        self,
        context: SplitEnumeratorContext[FileSplit],
        options: FileOptions,
        store: FileStore,
        pending: list[FileSplit] | None = None,
        processed: ProcessedFiles | None = None,
        first_done: bool = False,
    ) -> None:
        self._context = context
        self._options = options
        self._store = store
        self._codec = FileSplitCodec()
        self._distributor = SplitDistributor(
            context, options.assigner(), all_discovered=lambda: self._options.bounded and self._first_done
        )
        self._distributor.add_splits(pending or [])
        self._processed = processed or ProcessedFiles()
        self._first_done = first_done
        self._failures = 0
        self._root_missing = False
        self._closed = False
        self._discovering = False

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        if not (self._options.bounded and self._first_done):
            self._schedule_discovery(0)
        self._distribute()

    def close(self) -> None:
        self._closed = True

    def _schedule_discovery(self, delay_ms: int) -> None:
        self._discovering = True
        now_ms = self._context.current_time_ms()
        self._context.call_async(lambda: self._discover(now_ms), self._on_discovered, initial_delay_ms=delay_ms)

    # -- discovery (off the loop) -----------------------------------------------------

    def _discover(self, now_ms: int) -> Discovery:
        listing = self._store.list_files()
        # the bookkeeping is only read here (a copy's view): it changes on the loop alone
        processed = ProcessedFiles(dict(self._processed.entries), self._processed.horizon_ms)
        processed.reported_changed = set(self._processed.reported_changed)
        processed.advance(now_ms, self._options.max_file_age_ms)
        outcome = processed.consider(listing)
        splits = splits_of_files(self._store, self._options, queue_order(outcome.new, self._options.order))
        root_missing = not listing and not self._store.root_exists()
        return Discovery(
            tuple(e.path for e in listing), outcome.new, tuple(splits), outcome.changed, outcome.too_old, root_missing
        )

    # -- applying a discovery (on the loop) -------------------------------------------

    def _on_discovered(self, found: Discovery | None, error: BaseException | None) -> None:
        self._discovering = False
        if self._closed:
            return
        if error is not None or found is None:
            self._failures += 1
            self._context.metrics.counter("discovery_failures")
            log.log(
                repeated_failure_level(self._failures),
                "listing %s failed (%d in a row), retrying in %d s: %s",
                self._options.path,
                self._failures,
                RETRY_MS // 1000,
                error,
            )
            self._schedule_discovery(RETRY_MS)
            return
        self._failures = 0
        self._note_root(found.root_missing)
        self._processed.advance(self._context.current_time_ms(), self._options.max_file_age_ms)
        fresh = [e for e in found.new if e.path not in self._processed]
        fresh_paths = {e.path for e in fresh}
        self._processed.take(fresh)
        self._processed.forget_missing(found.listed)
        if found.changed:
            self._processed.mark_reported(found.changed)
            self._context.metrics.counter("files_changed_after_taken", len(found.changed))
            for entry in found.changed:
                log.warning("%s changed after it was taken for reading; it is not read again", entry.path)
        splits = [s for s in found.splits if s.path in fresh_paths]
        if fresh:
            log.info("discovered %d files (%d splits)", len(fresh), len(splits))
            self._context.metrics.counter("files_discovered", len(fresh))
        self._context.metrics.gauge("files_remembered", len(self._processed))
        self._distributor.add_splits(splits)
        self._first_done = True
        if not self._options.bounded:
            self._schedule_discovery(self._options.discovery_interval_ms)
        self._distribute()

    def _note_root(self, missing: bool) -> None:
        """Say when the path is not there, and when it appears: once per change, since an
        empty listing of a path that does not exist looks like a quiet directory."""
        if missing and not self._root_missing:
            log.warning(
                "path %s does not exist: nothing to read until it does (check the source's path option)",
                self._options.path,
            )
        elif self._root_missing and not missing:
            log.info("path %s exists now", self._options.path)
        self._root_missing = missing

    # -- events -----------------------------------------------------------------------

    def add_reader(self, subtask: int) -> None:
        self._distribute()

    def add_splits_back(self, splits: list[FileSplit], subtask: int) -> None:
        self._distributor.add_splits([s for s in splits if not s.finished])
        self._distribute()

    def handle_split_request(self, subtask: int, hostname: str | None) -> None:
        self._distribute(requester=subtask)

    def handle_source_event(self, subtask: int, event: Any) -> None:
        if isinstance(event, dict) and event.get("type") == BAD_FILE_EVENT:
            self._context.metrics.counter("bad_files")
            log.warning("subtask %d skipped bad file %s: %s", subtask, event.get("path"), event.get("reason"))

    def _distribute(self, requester: int | None = None) -> None:
        self._distributor.distribute(requester)

    # -- checkpoint -------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return {
            "pending": [self._codec.to_wire(s) for s in self._distributor.assigner.pending],
            "processed": self._processed.to_json(),
            "first_done": self._first_done,
        }

    @classmethod
    def restore(
        cls, context: SplitEnumeratorContext[FileSplit], options: FileOptions, store: FileStore, state: Any
    ) -> FileEnumerator:
        codec = FileSplitCodec()
        return cls(
            context,
            options,
            store,
            pending=[codec.from_wire(s) for s in state.get("pending", [])],
            processed=ProcessedFiles.from_json(state.get("processed", {})),
            first_done=bool(state.get("first_done", False)),
        )


def queue_order(entries: tuple[FileEntry, ...], order: str) -> list[FileEntry]:
    """The files of one listing in the order their splits are queued (``order`` option)."""
    if order == "modified":
        return sorted(entries, key=lambda e: (e.mtime_ms, e.path))
    if order == "latest_first":
        return sorted(entries, key=lambda e: (-e.mtime_ms, e.path))
    return sorted(entries, key=lambda e: e.path)


def splits_of_files(store: FileStore, options: FileOptions, entries: list[FileEntry]) -> list[FileSplit]:
    """The splits of listed files, in their order (a large Parquet file: one per range of
    its row groups, read from its footer)."""
    splits: list[FileSplit] = []
    for entry in entries:
        fmt = options.format_of(entry.path) or "parquet"
        splits += plan_file(entry, fmt, _row_groups(store, entry, fmt), options.split_size_bytes)
    return splits


def _row_groups(store: FileStore, entry: FileEntry, fmt: str) -> list[RowGroup] | None:
    if fmt != "parquet":
        return None
    try:
        return store.row_groups(entry.path)
    except READ_ERRORS as exc:
        # not decided here: its reader meets the same error and applies on_bad_file
        log.warning("%s: the Parquet footer does not read (%s); its reader decides (on_bad_file)", entry.path, exc)
        return None
