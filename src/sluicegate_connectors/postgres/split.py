"""The splits of the ``postgres`` connector.

- A ``ChunkSplit`` is a range of one table's primary key, ``(lo, hi]`` (None: open), read
  once as a snapshot. It is read in *pieces*: each piece is the rows of a key range as
  of one WAL position (the consistent point of the snapshot it was read in). A chunk
  read without interruption is one piece; a reader stopped in the middle leaves the
  pieces it emitted, and the next reader continues after the last key in a snapshot
  of its own. A change is later streamed for a key only if its transaction committed
  at or after the point of the piece that holds the key (``ChunkFilter``).
- The ``StreamSplit`` is the one split that reads the slot's changes. Its position is a
  transaction boundary (the end of the last commit emitted) and the number of records
  of the next transaction already emitted (a checkpoint may fall inside one).

Keys travel as PostgreSQL text, one string per key column, so that they mean the same in
SQL (cast to the column's type) and, loaded by psycopg, in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sluicegate.api.split import WireSplit

Key = tuple[str, ...]
STREAM_SPLIT_ID = "changes"


@dataclass(frozen=True, slots=True)
class Piece:
    """The rows of a chunk with keys up to ``upto`` (after the previous piece's), as of
    WAL position ``point``. ``upto`` None: to the chunk's end."""

    upto: Key | None
    point: int


@dataclass(slots=True)
class ChunkSplit:
    table: str
    index: int
    lo: Key | None
    """Exclusive lower bound; None: from the table's first key."""
    hi: Key | None
    """Inclusive upper bound; None: to the table's last key, and any added later."""
    pieces: list[Piece] = field(default_factory=list)
    done: bool = False
    """Every row of the range is emitted (the last piece reaches ``hi``)."""

    @property
    def split_id(self) -> str:
        return f"{self.table}#{self.index}"

    @property
    def read_to(self) -> Key | None:
        """The last key emitted; None: nothing yet (read from ``lo``)."""
        return self.pieces[-1].upto if self.pieces else None

    def copy(self) -> ChunkSplit:
        return replace(self, pieces=list(self.pieces))

    def with_piece(self, upto: Key | None, point: int, done: bool) -> ChunkSplit:
        """This chunk with rows up to ``upto`` emitted as of ``point`` (joined to the last
        piece when that has the same point)."""
        pieces = list(self.pieces)
        if pieces and pieces[-1].point == point:
            pieces[-1] = Piece(upto, point)
        else:
            pieces.append(Piece(upto, point))
        return replace(self, pieces=pieces, done=done)


@dataclass(slots=True)
class StreamSplit:
    lsn: int
    """Stream from here: the end of the last commit whose changes were all emitted."""
    emitted_of_next: int = 0
    """Records of the transaction after ``lsn`` already emitted."""
    filtered_until: int | None = None
    """Changes committed before this WAL position may be ones a chunk's snapshot already
    holds, and are checked against the finished chunks; None: no chunk to check."""
    chunk_count: int = 0
    """How many finished chunks the reader must know before it streams."""

    @property
    def split_id(self) -> str:
        return STREAM_SPLIT_ID

    def copy(self) -> StreamSplit:
        return replace(self)


PostgresSplit = ChunkSplit | StreamSplit


def _key_wire(key: Key | None) -> list[str] | None:
    return None if key is None else list(key)


def _key_of(data: Any) -> Key | None:
    return None if data is None else tuple(str(v) for v in data)


def chunk_to_wire(split: ChunkSplit) -> WireSplit:
    return {
        "split_id": split.split_id,
        "table": split.table,
        "index": split.index,
        "lo": _key_wire(split.lo),
        "hi": _key_wire(split.hi),
        "pieces": [[_key_wire(p.upto), p.point] for p in split.pieces],
        "done": split.done,
    }


def chunk_from_wire(data: Mapping[str, Any]) -> ChunkSplit:
    return ChunkSplit(
        table=str(data["table"]),
        index=int(data["index"]),
        lo=_key_of(data.get("lo")),
        hi=_key_of(data.get("hi")),
        pieces=[Piece(_key_of(upto), int(point)) for upto, point in data.get("pieces", [])],
        done=bool(data.get("done", False)),
    )


class PostgresSplitCodec:
    def to_wire(self, split: PostgresSplit) -> WireSplit:
        if isinstance(split, ChunkSplit):
            return chunk_to_wire(split)
        return {
            "split_id": STREAM_SPLIT_ID,
            "lsn": split.lsn,
            "emitted_of_next": split.emitted_of_next,
            "filtered_until": split.filtered_until,
            "chunk_count": split.chunk_count,
        }

    def from_wire(self, data: Mapping[str, Any]) -> PostgresSplit:
        if data["split_id"] != STREAM_SPLIT_ID:
            return chunk_from_wire(data)
        until = data.get("filtered_until")
        return StreamSplit(
            lsn=int(data["lsn"]),
            emitted_of_next=int(data.get("emitted_of_next", 0)),
            filtered_until=None if until is None else int(until),
            chunk_count=int(data.get("chunk_count", 0)),
        )
