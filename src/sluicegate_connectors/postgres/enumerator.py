"""The ``postgres`` enumerator: prepares the database, cuts the tables into chunks, hands the
chunks out (``pull`` by default), and once every chunk is read, the change stream.

1. Preparing (off the loop): each table is checked (catalog.py), the publication and the
   slot are created where missing. The slot comes first, before any chunk is read, so the
   WAL of every change after it is kept until the stream has read it.
2. Cutting (off the loop): each table's keys in one pass, a bound every ``chunk_size``.
3. Chunks finish through ``chunk_done`` events (and chunks that come back finished).
4. The stream split starts at the slot's position and filters against the finished
   chunks until it passes the greatest of their points; the finished chunks are sent to
   its reader in groups when it asks, and forgotten once it says it is past them.

The checkpoint holds the progress of each step and the account of every chunk (chunk_book.py:
bounds once per table, pending and finished chunks as indexes, small at 300,000 chunks);
chunks owned by readers are the coordinator's to restore.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sluicegate.api import SplitDistributor, SplitEnumerator, SplitEnumeratorContext
from sluicegate.api.errors import SourceError
from sluicegate.api.retries import repeated_failure_level

from .catalog import DatabaseUnreachable, connect, create_slot, ensure_publication, slot_position, table_info
from .chunk_book import ChunkBook
from .events import CHUNK_DONE, CHUNK_GROUP, CHUNKS, CHUNKS_RELEASED, CHUNKS_WANTED
from .options import PostgresOptions
from .snapshot import chunk_bounds
from .split import ChunkSplit, Key, PostgresSplit, PostgresSplitCodec, StreamSplit, chunk_from_wire, chunk_to_wire

log = logging.getLogger("sluicegate.connectors.postgres")

RETRY_MS = 5_000


@dataclass
class Progress:
    slot_lsn: int | None = None
    """Where the stream starts; None: the database is not prepared yet."""
    cut: bool = False
    stream_started: bool = False
    released: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "slot_lsn": self.slot_lsn,
            "cut": self.cut,
            "stream_started": self.stream_started,
            "released": self.released,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Progress:
        lsn = data.get("slot_lsn")
        return cls(
            None if lsn is None else int(lsn),
            bool(data.get("cut")),
            bool(data.get("stream_started")),
            bool(data.get("released")),
        )


class PostgresEnumerator(SplitEnumerator[PostgresSplit]):
    def __init__(
        self,
        context: SplitEnumeratorContext[PostgresSplit],
        options: PostgresOptions,
        progress: Progress | None = None,
        pending: list[PostgresSplit] | None = None,
        book: ChunkBook | None = None,
    ) -> None:
        self._context = context
        self._options = options
        self._progress = progress or Progress()
        self._book = book or ChunkBook()
        assert options.assigner is not None
        self._distributor = SplitDistributor(context, options.assigner(), all_discovered=self._all_discovered)
        self._distributor.add_splits(pending or [])
        self._failures = 0
        self._closed = False

    def _all_discovered(self) -> bool:
        return self._options.bounded and self._progress.cut

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        # a streaming source checks at every start that its slot is still there (and fails
        # loudly if it was dropped): a source that only snapshots prepares once
        if self._progress.slot_lsn is None or self._options.streams:
            self._context.call_async(self._prepare, self._on_prepared)
        elif not self._progress.cut:
            self._cut_later(0)
        self._distributor.distribute()

    def close(self) -> None:
        self._closed = True

    def _prepare(self) -> int:
        """Off the loop: the tables checked, the publication and the slot there; the slot's
        position (0 for a snapshot, which needs no slot)."""
        with connect(self._options) as conn:
            for table in self._options.tables:
                table_info(conn, table)
            if not self._options.streams:
                return 0
            ensure_publication(conn, self._options)
            position = slot_position(conn, self._options.slot)
            if position is not None:
                return position
            if self._progress.slot_lsn is not None:
                raise SourceError(
                    f"replication slot {self._options.slot} (`slot`) was dropped: the changes since "
                    f"{self._progress.slot_lsn} are lost to it. It is not created again (that would skip them): "
                    "start a new source (a new slot) to read the tables afresh"
                )
            return create_slot(conn, self._options.slot)

    def _on_prepared(self, position: int | None, error: BaseException | None) -> None:
        if self._closed:
            return
        if isinstance(error, SourceError) and not isinstance(error, DatabaseUnreachable):
            raise error  # a step that raises stops the source, loudly, until it is fixed
        if error is not None or position is None:
            self._failed("preparing the database", error)
            self._context.call_async(self._prepare, self._on_prepared, initial_delay_ms=RETRY_MS)
            return
        self._failures = 0
        if self._progress.slot_lsn is None:
            self._progress.slot_lsn = position
            log.info("prepared %s (changes from %s)", ", ".join(self._options.tables), position)
        if not self._options.snapshots:
            self._progress.cut = True
            self._start_stream_if_ready()
        elif not self._progress.cut:
            self._cut_later(0)

    def _cut_later(self, delay_ms: int) -> None:
        self._context.call_async(self._cut, self._on_cut, initial_delay_ms=delay_ms)

    def _cut(self) -> dict[str, list[Key]]:
        """Off the loop: every table's chunk bounds."""
        with connect(self._options) as conn:
            return {
                table: list(chunk_bounds(conn, table_info(conn, table), self._options.chunk_size))
                for table in self._options.tables
            }

    def _on_cut(self, bounds: dict[str, list[Key]] | None, error: BaseException | None) -> None:
        if self._closed:
            return
        if error is not None or bounds is None:
            self._failed("cutting the tables into chunks", error)
            self._cut_later(RETRY_MS)
            return
        self._failures = 0
        chunks = [chunk for table, table_bounds in bounds.items() for chunk in self._book.cut(table, table_bounds)]
        self._progress.cut = True
        log.info("cut %s into %d chunks", ", ".join(self._options.tables), len(chunks))
        self._context.metrics.gauge("chunks", len(chunks))
        self._distributor.add_splits(chunks)
        self._distributor.distribute()

    def _failed(self, what: str, error: BaseException | None) -> None:
        self._failures += 1
        self._context.metrics.counter("database_failures")
        log.log(
            repeated_failure_level(self._failures),
            "%s failed (%d in a row), retrying in %d s: %s",
            what,
            self._failures,
            RETRY_MS // 1000,
            error,
        )

    # -- chunks finishing, then the stream ------------------------------------------------

    def _chunk_finished(self, chunk: ChunkSplit) -> None:
        if self._book.finish(chunk):
            self._context.metrics.gauge("chunks_done", self._book.done_count)
        self._start_stream_if_ready()

    def _start_stream_if_ready(self) -> None:
        progress = self._progress
        if not self._options.streams or progress.stream_started or not progress.cut or progress.slot_lsn is None:
            return
        done = self._book.done_count
        if done < self._book.chunk_count:
            return
        stream = StreamSplit(lsn=progress.slot_lsn, filtered_until=self._book.greatest_point(), chunk_count=done)
        progress.stream_started = True
        log.info("every chunk is read (%d): streaming changes from %s", done, progress.slot_lsn)
        self._distributor.add_splits([stream])
        self._distributor.distribute()

    # -- events ---------------------------------------------------------------------------

    def add_reader(self, subtask: int) -> None:
        self._distributor.distribute()

    def add_splits_back(self, splits: list[PostgresSplit], subtask: int) -> None:
        for split in splits:
            if isinstance(split, ChunkSplit) and split.done:
                self._chunk_finished(split)
            else:
                self._distributor.add_splits([split])
        self._distributor.distribute()

    def handle_split_request(self, subtask: int, hostname: str | None) -> None:
        self._distributor.distribute(requester=subtask)

    def handle_source_event(self, subtask: int, event: Any) -> None:
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == CHUNK_DONE:
            self._chunk_finished(chunk_from_wire(event["chunk"]))
        elif kind == CHUNKS_WANTED:
            group: list[Any] = []
            for chunk in self._book.finished():
                group.append(chunk_to_wire(chunk))
                if len(group) == CHUNK_GROUP:
                    self._context.send_event_to_source_reader(subtask, {"type": CHUNKS, "chunks": group})
                    group = []
            if group:
                self._context.send_event_to_source_reader(subtask, {"type": CHUNKS, "chunks": group})
        elif kind == CHUNKS_RELEASED and not self._progress.released:
            self._progress.released = True
            log.info("the stream is past every chunk: %d finished chunks forgotten", self._book.done_count)
            self._book.forget_finished()

    # -- checkpoint -----------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> Any:
        pending = self._distributor.assigner.pending
        codec = PostgresSplitCodec()
        return {
            "progress": self._progress.to_json(),
            "chunks": self._book.to_json(s for s in pending if isinstance(s, ChunkSplit)),
            "pending_stream": [codec.to_wire(s) for s in pending if isinstance(s, StreamSplit)],
        }

    @classmethod
    def restore(
        cls, context: SplitEnumeratorContext[PostgresSplit], options: PostgresOptions, state: Any
    ) -> PostgresEnumerator:
        codec = PostgresSplitCodec()
        book, chunks = ChunkBook.from_json(state.get("chunks", {}))
        pending: list[PostgresSplit] = [*chunks, *(codec.from_wire(s) for s in state.get("pending_stream", []))]
        return cls(context, options, Progress.from_json(state.get("progress", {})), pending=pending, book=book)
