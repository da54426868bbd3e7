"""Split planning from a listing (pure): which files are new, and how a file becomes splits.

A file is one split, except a Parquet file larger than ``split_size_bytes``: its row
groups are grouped, in order, into ranges of about that many (compressed) bytes, one
split each (a row group is never cut, as Spark and Flink plan Parquet). With
``split_size_bytes`` 0 every file is one split (Spark's ``readPath=jvm`` reads whole files
and cuts large ones into tasks itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .split import FileEntry, FileSplit


@dataclass(frozen=True, slots=True)
class RowGroup:
    rows: int
    bytes: int


def group_ranges(groups: Sequence[RowGroup], split_size_bytes: int) -> list[tuple[int, int]]:
    """Consecutive ``[first, end)`` ranges of row groups of about ``split_size_bytes`` each."""
    ranges: list[tuple[int, int]] = []
    first, size = 0, 0
    for index, group in enumerate(groups):
        size += group.bytes
        if size >= split_size_bytes:
            ranges.append((first, index + 1))
            first, size = index + 1, 0
    if first < len(groups):
        ranges.append((first, len(groups)))
    return ranges


def plan_file(entry: FileEntry, fmt: str, groups: Sequence[RowGroup] | None, split_size_bytes: int) -> list[FileSplit]:
    """The splits of one file; ``groups`` are its Parquet row groups (None: not known,
    e.g. not Parquet or a footer that did not read: one split, read to its end)."""
    if groups is None:
        return [FileSplit(entry.path, entry.size, entry.mtime_ms, fmt)]
    ranges = group_ranges(groups, split_size_bytes) if 0 < split_size_bytes < entry.size else []
    if len(ranges) <= 1:
        return [FileSplit(entry.path, entry.size, entry.mtime_ms, fmt, rows=sum(g.rows for g in groups))]
    return [
        FileSplit(
            entry.path,
            entry.size,
            entry.mtime_ms,
            fmt,
            first_group=first,
            end_group=end,
            rows=sum(g.rows for g in groups[first:end]),
        )
        for first, end in ranges
    ]
