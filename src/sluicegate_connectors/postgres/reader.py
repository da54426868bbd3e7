"""The ``postgres`` standalone reader: reads its chunks one after the other, then (the one
reader that gets it) the change stream.

A chunk's rows are read at once (``snapshot.read_chunk``, one chunk in memory) and
emitted in batches; each batch adds to the chunk's last piece, so a checkpoint in the
middle of a chunk holds how far it got and as of which point. A finished chunk is
reported to the enumerator only once a checkpoint that holds it finished is durable
(``chunk_done``, in ``notify_checkpoint_complete``), and the split is given up after
that: the report never names rows a failure could take back.

The stream waits until it knows every finished chunk (the enumerator sends them in
groups when asked), then emits each committed transaction's records; its position moves
at transaction ends, and the slot is confirmed only to positions a checkpoint holds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import psycopg

from sluicegate.api import InputStatus, ReadResult, Record, SourceReader, SourceReaderContext
from sluicegate.api.retries import repeated_failure_level

from .catalog import DatabaseUnreachable, TableInfo, connect, table_info
from .changes import ChangeDecoder, ChunkFilter, Transaction
from .events import CHUNK_DONE, CHUNKS, CHUNKS_RELEASED, CHUNKS_WANTED
from .options import PostgresOptions
from .snapshot import ChunkRows, read_chunk
from .split import ChunkSplit, PostgresSplit, StreamSplit, chunk_from_wire, chunk_to_wire
from .stream import ReplicationStream
from .values import RowMaker

log = logging.getLogger("sluicegate.connectors.postgres")

RETRY_S = 1.0
ASK_AGAIN_S = 10.0
POLL_MESSAGES = 5_000
"""Stream messages taken per batch at most (a batch's records are capped besides)."""


class PostgresReader(SourceReader[PostgresSplit]):
    def __init__(self, options: PostgresOptions, context: SourceReaderContext) -> None:
        self._options = options
        self._context = context
        self._tables: dict[str, TableInfo] = {}
        self._row_makers: dict[str, RowMaker] = {}
        self._chunks: OrderedDict[str, ChunkSplit] = OrderedDict()
        self._reading: tuple[str, ChunkRows, int] | None = None
        """The chunk being emitted: its id, its rows, how many are emitted."""
        self._done_in: dict[int, list[str]] = {}
        """Chunks finished in each checkpoint taken (not yet reported)."""
        self._to_finish: list[str] = []
        self._paused: set[str] = set()
        self._stream_split: StreamSplit | None = None
        self._stream: ReplicationStream | None = None
        self._filter: ChunkFilter | None = None
        self._asked_at: float | None = None
        self._released = False
        self._decoder: ChangeDecoder | None = None
        self._transaction: Transaction | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._durable_lsn: int | None = None
        """The stream's position in the last completed checkpoint."""
        self._stream_at: dict[int, tuple[int, bool]] = {}
        """Each checkpoint's stream position, and whether it still needed the chunks."""

    # -- splits ------------------------------------------------------------------------

    def add_splits(self, splits: Sequence[PostgresSplit]) -> None:
        for split in splits:
            if isinstance(split, ChunkSplit):
                self._chunks[split.split_id] = split.copy()
            else:
                self._stream_split = split.copy()
                self._durable_lsn = split.lsn  # a split is handed over at a durable position
                self._asked_at = None

    def remove_splits(self, split_ids: Sequence[str]) -> None:
        for split_id in split_ids:
            self._chunks.pop(split_id, None)
            if self._reading is not None and self._reading[0] == split_id:
                self._reading = None
            if self._stream_split is not None and self._stream_split.split_id == split_id:
                self._close_stream()
                self._stream_split = None

    def snapshot_state(self, checkpoint_id: int) -> list[PostgresSplit]:
        self._done_in[checkpoint_id] = [
            s.split_id for s in self._chunks.values() if s.done and s.split_id not in self._to_finish
        ]
        state: list[PostgresSplit] = [s.copy() for s in self._chunks.values()]
        if self._stream_split is not None:
            split = self._stream_split
            self._stream_at[checkpoint_id] = (split.lsn, split.filtered_until is not None)
            state.append(split.copy())
        return state

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for taken in [c for c in self._done_in if c <= checkpoint_id]:
            for split_id in self._done_in.pop(taken):
                chunk = self._chunks.get(split_id)
                if chunk is not None and split_id not in self._to_finish:
                    self._context.send_source_event({"type": CHUNK_DONE, "chunk": chunk_to_wire(chunk)})
                    self._to_finish.append(split_id)
        taken_streams = sorted(c for c in self._stream_at if c <= checkpoint_id)
        if taken_streams:
            lsn, filtering = self._stream_at[taken_streams[-1]]
            for c in taken_streams:
                del self._stream_at[c]
            self._durable_lsn = lsn
            if self._stream is not None:
                self._stream.confirm(lsn)
            if not filtering and not self._released:
                # also from a reader restarted past the chunks: the one before may have died first
                self._filter = None
                self._released = True
                self._context.send_source_event({"type": CHUNKS_RELEASED})

    def handle_source_event(self, event: Any) -> None:
        if not (isinstance(event, dict) and event.get("type") == CHUNKS):
            return
        if self._filter is None:
            self._filter = ChunkFilter({t: self._table(t).key_oids() for t in self._options.tables})
        for wire in event.get("chunks", []):
            self._filter.add(chunk_from_wire(wire))

    def pause_or_resume_splits(self, to_pause: Sequence[str], to_resume: Sequence[str]) -> None:
        self._paused = (self._paused | set(to_pause)) - set(to_resume)

    # -- reading -----------------------------------------------------------------------

    def next_batch(self, max_records: int) -> ReadResult:
        result = ReadResult()
        for split_id in self._to_finish:
            self._chunks.pop(split_id, None)
            result.finished_split_ids.append(split_id)
        self._to_finish = []
        if time.monotonic() < self._retry_at:
            return result
        try:
            more = self._read_chunks(max_records, result)
            if len(result.records) < max_records and self._stream_split is not None:
                more = self._read_stream(max_records - len(result.records), result) or more
        except (psycopg.OperationalError, DatabaseUnreachable) as exc:
            self._lost_connection(exc)
            more = False
        else:
            self._failures = 0
        result.status = InputStatus.MORE_AVAILABLE if more else InputStatus.NOTHING_AVAILABLE
        return result

    def _lost_connection(self, error: BaseException) -> None:
        """The server went away (restarted, a network failure): what was read stays emitted
        (the chunk's rows, the stream's position), and reading starts again from there."""
        self._failures += 1
        self._retry_at = time.monotonic() + RETRY_S
        self._reading = None
        self._close_stream()
        log.log(
            repeated_failure_level(self._failures),
            "lost PostgreSQL (%d in a row), reading on in %.0f s from where this reader was: %s",
            self._failures,
            RETRY_S,
            str(error).strip(),
        )

    def _read_chunks(self, max_records: int, result: ReadResult) -> bool:
        """Chunk rows into ``result``; whether a chunk is left to read."""
        while len(result.records) < max_records:
            if self._reading is None:
                chunk = next((s for s in self._chunks.values() if not s.done and s.split_id not in self._paused), None)
                if chunk is None:
                    return False
                rows = read_chunk(self._options, self._table(chunk.table), chunk.read_to or chunk.lo, chunk.hi)
                self._reading = (chunk.split_id, rows, 0)
            self._emit_chunk(max_records - len(result.records), result)
        return True

    def _emit_chunk(self, room: int, result: ReadResult) -> None:
        assert self._reading is not None
        split_id, rows, emitted = self._reading
        chunk = self._chunks[split_id]
        table = self._table(chunk.table)
        make_row = self._row_maker(table)
        end = min(len(rows.rows), emitted + room)
        for row in rows.rows[emitted:end]:
            value = make_row(row)
            value.update(_change_type="insert", _lsn=rows.point, _seq=0, _commit_timestamp=None, _table=table.name)
            result.records.append(Record(split_id, value))
        done = end == len(rows.rows)
        upto = chunk.hi if done else rows.keys[end - 1]
        self._chunks[split_id] = chunk.with_piece(upto, rows.point, done)
        self._reading = None if done else (split_id, rows, end)

    def _read_stream(self, room: int, result: ReadResult) -> bool:
        """Change records into ``result``; whether more may be there now."""
        split = self._stream_split
        assert split is not None
        if split.filtered_until is not None and (self._filter is None or self._filter.count < split.chunk_count):
            now = time.monotonic()
            if self._asked_at is None or now - self._asked_at >= ASK_AGAIN_S:
                # asked again while they do not all come: an answer to a reader attempt that
                # failed is dropped, and the enumerator's groups may be cut short by a restart
                self._context.send_source_event({"type": CHUNKS_WANTED})
                self._asked_at = now
            return False
        if self._transaction is None:
            self._transaction = self._next_transaction()
        idle = self._transaction is None and split.emitted_of_next == 0
        if idle and self._stream is not None and split.lsn == self._durable_lsn:
            # nothing emitted since the last checkpoint, which a host takes only when there is
            # something to take: the slot may still move past what the server has sent since
            self._stream.confirm(split.lsn)
        more = False
        while self._transaction is not None and room > 0:
            taken = self._emit_transaction(self._transaction, room, result)
            room -= taken
            more = True
            if self._transaction is None:
                self._transaction = self._next_transaction()
        return more

    def _next_transaction(self) -> Transaction | None:
        """The next committed transaction from the stream (None: none complete yet)."""
        split = self._stream_split
        assert split is not None
        stream = self._open_stream(split)
        decoder = self._decoder
        assert decoder is not None
        for message in stream.poll(POLL_MESSAGES):
            transaction = decoder.feed(message.message)
            if transaction is not None:
                return transaction
        return None

    def _emit_transaction(self, transaction: Transaction, room: int, result: ReadResult) -> int:
        split = self._stream_split
        assert split is not None
        start = split.emitted_of_next
        end = min(len(transaction.records), start + room)
        for value in transaction.records[start:end]:
            result.records.append(Record(split.split_id, value, transaction.commit_time_ms))
        if end == len(transaction.records):
            split.lsn, split.emitted_of_next = transaction.end_lsn, 0
            if self._decoder is not None and self._decoder.filtered_until is None:
                split.filtered_until = None
            self._transaction = None
        else:
            split.emitted_of_next = end
        return end - start

    def _open_stream(self, split: StreamSplit) -> ReplicationStream:
        if self._stream is None:
            keys = {t: self._table(t).key for t in self._options.tables}
            self._decoder = ChangeDecoder(keys, self._filter, split.filtered_until)
            self._transaction = None
            self._stream = ReplicationStream(self._options, split.lsn)
        return self._stream

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream = None
        self._decoder = None
        self._transaction = None

    def _row_maker(self, table: TableInfo) -> RowMaker:
        maker = self._row_makers.get(table.name)
        if maker is None:
            maker = self._row_makers[table.name] = RowMaker(table.columns, table.type_oids)
        return maker

    def _table(self, name: str) -> TableInfo:
        info = self._tables.get(name)
        if info is None:
            with connect(self._options) as conn:
                info = self._tables[name] = table_info(conn, name)
        return info

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._close_stream()
