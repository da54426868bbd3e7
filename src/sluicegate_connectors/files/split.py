"""A split of the ``files`` connector is one file, or for a large Parquet file a range
of its row groups; its position is the next row to read, counted from the split's start.

A split carries the file's size and modification time as listed, so that a reader
sees when the file changed after it was listed (a bad file, see ``badfiles.py``), and
its row count when the listing knew it (Parquet footers): planning hosts need the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sluicegate.api.split import WireSplit


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A file as a listing shows it."""

    path: str
    size: int
    mtime_ms: int


@dataclass(slots=True)
class FileSplit:
    path: str
    """The path on the source's filesystem (no protocol)."""
    size: int
    mtime_ms: int
    format: str
    first_group: int = 0
    end_group: int | None = None
    """Parquet row groups ``[first_group, end_group)``; None: the whole file."""
    rows: int | None = None
    """Rows of the split, when known from the listing (Parquet); None: read to the end."""
    position: int = 0
    """The next row to read, from the split's start."""

    @property
    def split_id(self) -> str:
        if self.end_group is None:
            return self.path
        return f"{self.path}#rg{self.first_group}-{self.end_group}"

    @property
    def finished(self) -> bool:
        return self.rows is not None and self.position >= self.rows

    @property
    def entry(self) -> FileEntry:
        return FileEntry(self.path, self.size, self.mtime_ms)

    def copy(self, position: int | None = None) -> FileSplit:
        return replace(self, position=self.position if position is None else position)


class FileSplitCodec:
    def to_wire(self, split: FileSplit) -> WireSplit:
        wire: WireSplit = {
            "split_id": split.split_id,
            "path": split.path,
            "size": split.size,
            "mtime_ms": split.mtime_ms,
            "format": split.format,
            "position": split.position,
        }
        if split.end_group is not None:
            wire["first_group"] = split.first_group
            wire["end_group"] = split.end_group
        if split.rows is not None:
            wire["rows"] = split.rows
        return wire

    def from_wire(self, data: Mapping[str, Any]) -> FileSplit:
        end_group = data.get("end_group")
        rows = data.get("rows")
        return FileSplit(
            path=str(data["path"]),
            size=int(data["size"]),
            mtime_ms=int(data["mtime_ms"]),
            format=str(data["format"]),
            first_group=int(data.get("first_group", 0)),
            end_group=None if end_group is None else int(end_group),
            rows=None if rows is None else int(rows),
            position=int(data.get("position", 0)),
        )
