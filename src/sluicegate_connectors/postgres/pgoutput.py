"""Decoding the messages of PostgreSQL's ``pgoutput`` plugin, protocol version 1
(https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html).

Pure: bytes in, dataclasses out. A column value stays the text PostgreSQL sent (its
type's output function), ``None`` for NULL, or ``UNCHANGED_TOAST`` where an update
left an out-of-line value as it was and the server did not send it again
(``values.py`` turns text into Python values; ``stream.py`` fills unchanged values).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sluicegate.api.errors import SourceError

POSTGRES_EPOCH_MS: Final = 946_684_800_000
"""2000-01-01 in Unix ms: pgoutput's timestamps count microseconds from there."""


class _Unchanged:
    """An out-of-line (TOASTed) value an update did not change, not sent again."""

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST: Final = _Unchanged()
Value = str | None | _Unchanged


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    in_key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    relation_id: int
    schema: str
    name: str
    replica_identity: str
    """``d`` default, ``n`` nothing, ``f`` full, ``i`` index."""
    columns: tuple[Column, ...]

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    """Where the transaction's commit record is: what a snapshot taken at a WAL position
    before it cannot see."""
    commit_time_ms: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    """The end of the commit record: streaming from here skips this transaction."""
    commit_time_ms: int


@dataclass(frozen=True, slots=True)
class Insert:
    relation_id: int
    new: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Update:
    relation_id: int
    old: tuple[Value, ...] | None
    """The old row (replica identity full) or its key (a key that changed); None otherwise."""
    old_is_key: bool
    new: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Delete:
    relation_id: int
    old: tuple[Value, ...]
    old_is_key: bool


@dataclass(frozen=True, slots=True)
class Truncate:
    relation_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Ignored:
    """A message the connector has no use for (origin, type, logical message)."""

    kind: str


Message = Relation | Begin | Commit | Insert | Update | Delete | Truncate | Ignored


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def byte(self) -> str:
        value = self.data[self.at : self.at + 1].decode("ascii")
        self.at += 1
        return value

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        value = self.data[self.at : end].decode()
        self.at = end + 1
        return value

    def tuple_data(self) -> tuple[Value, ...]:
        values: list[Value] = []
        for _ in range(self.take(">h")):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED_TOAST)
            elif kind == "t":
                length = self.take(">i")
                values.append(self.data[self.at : self.at + length].decode())
                self.at += length
            else:
                raise SourceError(f"pgoutput: a column value of kind {kind!r} (only text format is asked for)")
        return tuple(values)


def decode(data: bytes) -> Message:
    """One pgoutput message (the payload of an XLogData message)."""
    cursor = _Cursor(data)
    kind = cursor.byte()
    decoder = _DECODERS.get(kind)
    if decoder is None:
        return Ignored(kind)
    return decoder(cursor)


def _begin(c: _Cursor) -> Begin:
    final_lsn = c.take(">Q")
    return Begin(final_lsn, _time_ms(c.take(">q")), c.take(">I"))


def _commit(c: _Cursor) -> Commit:
    c.take(">b")  # flags: unused
    commit_lsn = c.take(">Q")
    end_lsn = c.take(">Q")
    return Commit(commit_lsn, end_lsn, _time_ms(c.take(">q")))


def _relation(c: _Cursor) -> Relation:
    relation_id = c.take(">I")
    schema = c.string()
    name = c.string()
    identity = chr(c.take(">b"))
    columns = []
    for _ in range(c.take(">h")):
        flags = c.take(">b")
        column_name = c.string()
        type_oid = c.take(">I")
        c.take(">i")  # type modifier: unused
        columns.append(Column(column_name, type_oid, bool(flags & 1)))
    return Relation(relation_id, schema, name, identity, tuple(columns))


def _insert(c: _Cursor) -> Insert:
    relation_id = c.take(">I")
    c.byte()  # 'N'
    return Insert(relation_id, c.tuple_data())


def _update(c: _Cursor) -> Update:
    relation_id = c.take(">I")
    marker = c.byte()
    old: tuple[Value, ...] | None = None
    old_is_key = False
    if marker in ("K", "O"):
        old, old_is_key = c.tuple_data(), marker == "K"
        marker = c.byte()
    return Update(relation_id, old, old_is_key, c.tuple_data())


def _delete(c: _Cursor) -> Delete:
    relation_id = c.take(">I")
    marker = c.byte()
    return Delete(relation_id, c.tuple_data(), marker == "K")


def _truncate(c: _Cursor) -> Truncate:
    count = c.take(">i")
    c.take(">b")  # options (cascade, restart identity): unused
    return Truncate(tuple(c.take(">I") for _ in range(count)))


def _time_ms(postgres_us: int) -> int:
    return POSTGRES_EPOCH_MS + postgres_us // 1000


_DECODERS: dict[str, Callable[[_Cursor], Message]] = {
    "B": _begin,
    "C": _commit,
    "R": _relation,
    "I": _insert,
    "U": _update,
    "D": _delete,
    "T": _truncate,
}
