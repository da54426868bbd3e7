"""The enumerator's account of every chunk, kept small enough to checkpoint at every step.

A table of 2.5 billion rows is 300,000 chunks. As one object each (bounds, pieces) the
account was 47 MB of JSON, and the coordinator writes its enumerator's state at every
commit: 3 s a commit. Here each chunk is its index in its table. The bounds are kept once
per table (chunk ``i`` is ``(bounds[i-1], bounds[i]]``, open at both ends of the table),
the pending chunks as runs of indexes, and a finished chunk as its index and point. Only
what is rare takes more room: a chunk that came back half read, or one finished in
several pieces.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .split import ChunkSplit, Key, chunk_from_wire, chunk_to_wire


@dataclass
class ChunkBook:
    bounds: dict[str, list[Key]] = field(default_factory=dict)
    """Each table's chunk bounds: chunk ``i`` holds keys in ``(bounds[i-1], bounds[i]]``."""
    done: dict[str, dict[int, int]] = field(default_factory=dict)
    """Finished chunks read in one piece: table -> index -> point."""
    done_in_pieces: dict[str, ChunkSplit] = field(default_factory=dict)
    """Finished chunks read in several pieces, by split id."""

    def cut(self, table: str, bounds: Sequence[Key]) -> list[ChunkSplit]:
        """Record a table's bounds; its chunks, in key order."""
        self.bounds[table] = list(bounds)
        self.done.setdefault(table, {})
        return [self.chunk(table, i) for i in range(len(bounds) + 1)]

    def chunk(self, table: str, index: int) -> ChunkSplit:
        bounds = self.bounds[table]
        lo = bounds[index - 1] if index > 0 else None
        hi = bounds[index] if index < len(bounds) else None
        return ChunkSplit(table, index, lo, hi)

    @property
    def chunk_count(self) -> int:
        return sum(len(b) + 1 for b in self.bounds.values())

    @property
    def done_count(self) -> int:
        return sum(len(d) for d in self.done.values()) + len(self.done_in_pieces)

    def finish(self, chunk: ChunkSplit) -> bool:
        """Record a finished chunk; False if it was known already (a report sent again)."""
        if chunk.split_id in self.done_in_pieces or chunk.index in self.done.get(chunk.table, {}):
            return False
        if len(chunk.pieces) == 1 and chunk.pieces[0].upto == chunk.hi:
            self.done.setdefault(chunk.table, {})[chunk.index] = chunk.pieces[0].point
        else:
            self.done_in_pieces[chunk.split_id] = chunk.copy()
        return True

    def finished(self) -> Iterator[ChunkSplit]:
        """Every finished chunk, with its pieces."""
        for table, points in self.done.items():
            for index, point in points.items():
                chunk = self.chunk(table, index)
                yield chunk.with_piece(chunk.hi, point, done=True)
        yield from (c.copy() for c in self.done_in_pieces.values())

    def greatest_point(self) -> int | None:
        points = [p for d in self.done.values() for p in d.values()]
        points += [p.point for c in self.done_in_pieces.values() for p in c.pieces]
        return max(points) if points else None

    def forget_finished(self) -> None:
        self.done = {table: {} for table in self.bounds}
        self.done_in_pieces = {}

    # -- checkpoint -------------------------------------------------------------------

    def to_json(self, pending: Iterable[ChunkSplit]) -> dict[str, Any]:
        """The account, with the chunks still to hand out (those half read with their pieces)."""
        runs: dict[str, list[int]] = {}
        partial = []
        for chunk in sorted(pending, key=lambda c: (c.table, c.index)):
            if chunk.pieces:
                partial.append(chunk_to_wire(chunk))
            else:
                _extend_runs(runs.setdefault(chunk.table, []), chunk.index)
        return {
            "bounds": {t: [list(k) for k in b] for t, b in self.bounds.items()},
            "pending": runs,
            "pending_partial": partial,
            "done": {t: [[i, p] for i, p in d.items()] for t, d in self.done.items()},
            "done_in_pieces": [chunk_to_wire(c) for c in self.done_in_pieces.values()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> tuple[ChunkBook, list[ChunkSplit]]:
        """The account and the pending chunks, in table and key order."""
        book = cls(
            bounds={t: [tuple(str(v) for v in k) for k in b] for t, b in data.get("bounds", {}).items()},
            done={t: {int(i): int(p) for i, p in d} for t, d in data.get("done", {}).items()},
            done_in_pieces={c.split_id: c for c in map(chunk_from_wire, data.get("done_in_pieces", []))},
        )
        pending = [
            book.chunk(table, index)
            for table, run_list in data.get("pending", {}).items()
            for start, end in zip(run_list[::2], run_list[1::2], strict=True)
            for index in range(start, end)
        ]
        pending += [chunk_from_wire(w) for w in data.get("pending_partial", [])]
        return book, sorted(pending, key=lambda c: (c.table, c.index))


def _extend_runs(runs: list[int], index: int) -> None:
    """``runs`` holds ``[start, end)`` pairs flat; add ``index`` (indexes come in order)."""
    if runs and runs[-1] == index:
        runs[-1] = index + 1
    else:
        runs += [index, index + 1]
