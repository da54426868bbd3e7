"""From pgoutput messages to change records (pure: no connection).

A record is the row's columns plus Delta Change Data Feed's vocabulary: ``_change_type``
(``insert``, ``update_preimage``, ``update_postimage``, ``delete``), ``_lsn`` (where the
transaction committed; a snapshot row carries its chunk's point), ``_seq`` (the change's
place in its transaction), ``_commit_timestamp`` and ``_table``. The last row of a key by
(``_lsn``, ``_seq``), pre-images left out, is the key's state. An update that changes
the key is a delete of the old key and an insert of the new one.

While the stream is still within reach of the snapshot (before ``filtered_until``), a
change is emitted only if its transaction committed at or after the point of the chunk
piece that holds its key (``ChunkFilter``): the snapshot holds the others already.
"""

from __future__ import annotations

import bisect
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluicegate.api.errors import SourceError

from .pgoutput import UNCHANGED_TOAST, Begin, Commit, Delete, Insert, Message, Relation, Truncate, Update, Value
from .split import ChunkSplit, Key
from .values import TextValues

log = logging.getLogger("sluicegate.connectors.postgres")


def commit_timestamp(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


@dataclass
class _TableChunks:
    key_oids: tuple[int, ...]
    his: list[tuple[Any, ...]] = field(default_factory=list)
    """The finite upper bounds, loaded, sorted."""
    pieces: list[list[tuple[tuple[Any, ...] | None, int]]] = field(default_factory=list)
    """The pieces of the chunk with each bound; then those of the open last chunk."""
    open_pieces: list[tuple[tuple[Any, ...] | None, int]] | None = None
    chunks: int = 0


class ChunkFilter:
    """The finished chunks of every table: which WAL position a key's snapshot row is as of."""

    def __init__(self, key_oids: Mapping[str, tuple[int, ...]], values: TextValues | None = None) -> None:
        self._tables = {name: _TableChunks(oids) for name, oids in key_oids.items()}
        self._values = values or TextValues()
        self.count = 0

    def _load(self, table: _TableChunks, key: Key) -> tuple[Any, ...]:
        return tuple(self._values.load(oid, text) for oid, text in zip(table.key_oids, key, strict=True))

    def add(self, chunk: ChunkSplit) -> None:
        table = self._tables.get(chunk.table)
        if table is None:
            raise SourceError(f"a finished chunk of {chunk.table}, which this source does not read")
        pieces = [(None if p.upto is None else self._load(table, p.upto), p.point) for p in chunk.pieces]
        if chunk.hi is None:
            table.open_pieces = pieces
        else:
            hi = self._load(table, chunk.hi)
            at = bisect.bisect_left(table.his, hi)
            if at < len(table.his) and table.his[at] == hi:
                return  # known already (a report sent again)
            table.his.insert(at, hi)
            table.pieces.insert(at, pieces)
        table.chunks += 1
        self.count += 1

    def point_of(self, table_name: str, key: Sequence[str]) -> int:
        """The point of the snapshot row of ``key``; SourceError if no finished chunk holds it
        (a change is never dropped for want of its chunk)."""
        table = self._tables.get(table_name)
        if table is None:
            raise SourceError(f"a change of {table_name}, which this source does not read")
        loaded = self._load(table, tuple(key))
        at = bisect.bisect_left(table.his, loaded)
        pieces = table.pieces[at] if at < len(table.his) else table.open_pieces
        if pieces is None:
            raise SourceError(f"a change of {table_name} key {tuple(key)} falls in no finished chunk")
        for upto, point in pieces:
            if upto is None or loaded <= upto:
                return point
        raise SourceError(f"a change of {table_name} key {tuple(key)} falls in no finished piece of its chunk")


@dataclass
class Transaction:
    records: list[dict[str, Any]]
    end_lsn: int
    commit_time_ms: int


class ChangeDecoder:
    """Feeds on decoded messages and gives each committed transaction's records."""

    def __init__(
        self, keys: Mapping[str, tuple[str, ...]], chunks: ChunkFilter | None, filtered_until: int | None
    ) -> None:
        self._keys = dict(keys)
        """Each table read and its primary key's columns (with replica identity FULL every
        column is flagged as part of the identity: the flags cannot tell the key)."""
        self._relations: dict[int, Relation] = {}
        self._converters_of: dict[int, list[tuple[str, Callable[[str], Any]]]] = {}
        self._values = TextValues()
        self._chunks = chunks
        self._filtered_until = filtered_until
        self._begin: Begin | None = None
        self._records: list[dict[str, Any]] = []
        self._seq = 0

    @property
    def filtered_until(self) -> int | None:
        """Changes committed before this are still checked against the chunks (None: none)."""
        return self._filtered_until

    def feed(self, message: Message) -> Transaction | None:
        if isinstance(message, Relation):
            self._relation(message)
        elif isinstance(message, Begin):
            self._begin, self._records, self._seq = message, [], 0
        elif isinstance(message, Commit):
            return self._commit(message)
        elif isinstance(message, Insert | Update | Delete):
            self._change(message)
        elif isinstance(message, Truncate):
            names = ", ".join(self._relations[r].qualified_name for r in message.relation_ids if r in self._relations)
            raise SourceError(
                f"TRUNCATE of {names}: it removes rows without a change per row, which this source cannot carry "
                "(start the source again with a new slot to read the tables afresh)"
            )
        return None

    def _relation(self, relation: Relation) -> None:
        known = self._relations.get(relation.relation_id)
        if known is not None and known.columns != relation.columns:
            log.warning(
                "table %s has new columns: %s (its changes carry them from here on)",
                relation.qualified_name,
                ", ".join(c.name for c in relation.columns),
            )
        self._relations[relation.relation_id] = relation
        self._converters_of.pop(relation.relation_id, None)

    def _converters(self, relation: Relation) -> list[tuple[str, Callable[[str], Any]]]:
        converters = self._converters_of.get(relation.relation_id)
        if converters is None:
            converters = [(c.name, self._values.record_converter(c.type_oid)) for c in relation.columns]
            self._converters_of[relation.relation_id] = converters
        return converters

    def _commit(self, commit: Commit) -> Transaction:
        records, self._records, self._begin = self._records, [], None
        if self._filtered_until is not None and commit.commit_lsn >= self._filtered_until:
            self._filtered_until = None  # past every chunk's point: nothing to check from here
        return Transaction(records, commit.end_lsn, commit.commit_time_ms)

    def _change(self, change: Insert | Update | Delete) -> None:
        relation = self._relations.get(change.relation_id)
        if relation is None or self._begin is None:
            raise SourceError("pgoutput: a change before its relation or transaction (a protocol error)")
        key = self._keys.get(relation.qualified_name)
        if key is None:
            return
        seq = self._seq
        self._seq += 1
        if isinstance(change, Insert):
            self._emit(relation, "insert", change.new, seq)
        elif isinstance(change, Delete):
            self._emit(relation, "delete", change.old, seq)
        else:
            new = _filled(relation, change.new, change.old)
            old = change.old
            if old is None or change.old_is_key:
                raise SourceError(
                    f"an update of {relation.qualified_name} without its old row: run ALTER TABLE "
                    f"{relation.qualified_name} REPLICA IDENTITY FULL"
                )
            if _key_text(relation, key, old) != _key_text(relation, key, new):
                self._emit(relation, "delete", old, seq)
                self._emit(relation, "insert", new, seq)
            else:
                self._emit(relation, "update_preimage", old, seq)
                self._emit(relation, "update_postimage", new, seq)

    def _emit(self, relation: Relation, change_type: str, values: Sequence[Value], seq: int) -> None:
        begin = self._begin
        assert begin is not None
        if self._chunks is not None and self._filtered_until is not None and begin.final_lsn < self._filtered_until:
            key = self._keys[relation.qualified_name]
            point = self._chunks.point_of(relation.qualified_name, _key_text(relation, key, values))
            if begin.final_lsn < point:
                return  # the chunk's snapshot holds this change already
        row: dict[str, Any] = {}
        for (name, convert), value in zip(self._converters(relation), values, strict=True):
            if value is UNCHANGED_TOAST:
                raise SourceError(f"{relation.qualified_name}.{name}: a large value the server did not send")
            row[name] = None if value is None else convert(str(value))
        row.update(
            _change_type=change_type,
            _lsn=begin.final_lsn,
            _seq=seq,
            _commit_timestamp=commit_timestamp(begin.commit_time_ms),
            _table=relation.qualified_name,
        )
        self._records.append(row)


def _key_text(relation: Relation, key: Sequence[str], values: Sequence[Value]) -> tuple[str, ...]:
    by_name = {c.name: v for c, v in zip(relation.columns, values, strict=True)}
    return tuple(str(by_name[k]) for k in key)


def _filled(relation: Relation, new: tuple[Value, ...], old: tuple[Value, ...] | None) -> tuple[Value, ...]:
    """The new row with each out-of-line value the update left unchanged taken from the old
    row (replica identity FULL sends it there), so the post-image never shows NULL for it."""
    if UNCHANGED_TOAST not in new:
        return new
    if old is None:
        raise SourceError(
            f"an update of {relation.qualified_name} left a large value unchanged and the old row is not sent: "
            f"run ALTER TABLE {relation.qualified_name} REPLICA IDENTITY FULL"
        )
    return tuple(o if n is UNCHANGED_TOAST else n for n, o in zip(new, old, strict=True))
