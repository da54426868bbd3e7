"""The files the enumerator has taken (pure): what a listing adds, with bounded memory.

Every file taken (split, whatever became of it since) is remembered by path with the
size and modification time it had, so a restarted enumerator never takes a finished
file again. Two rules keep the set from growing without bound:

- ``max_file_age_ms``: a horizon trails the clock by that age; files modified before
  it are neither taken nor remembered (one number stands for all of them);
- a remembered file that two listings in a row no longer show was deleted (or moved
  away) and is forgotten. Two, not one: an object store's listing may briefly miss
  an object, and a file forgotten while it still exists would be read again.

A remembered file that a listing shows with another size or modification time changed
after it was taken: it is reported (the policy for bad files decides), never re-read.
Once its take is behind the horizon it is no longer remembered, so a file rewritten
later at the same path is a new file and is taken (Spark's file source does the same:
its seen-files map forgets by age too). Bounded memory cannot tell the two apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .split import FileEntry


@dataclass(frozen=True)
class ListingOutcome:
    new: tuple[FileEntry, ...]
    """Files to take now, in path order."""
    changed: tuple[FileEntry, ...]
    """Files taken earlier that now have another size or modification time."""
    too_old: int
    """Files left out for being older than the horizon."""


@dataclass
class ProcessedFiles:
    entries: dict[str, tuple[int, int]] = field(default_factory=dict)
    """path -> (size, mtime_ms) when taken."""
    horizon_ms: int = 0
    """Files modified before this are taken as processed (``max_file_age_ms``)."""
    missing_once: set[str] = field(default_factory=set)
    reported_changed: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, path: object) -> bool:
        return path in self.entries

    def advance(self, now_ms: int, max_file_age_ms: int) -> None:
        """Move the horizon (never back) and forget the files behind it."""
        if max_file_age_ms <= 0:
            return
        self.horizon_ms = max(self.horizon_ms, now_ms - max_file_age_ms)
        for path in [p for p, (_, mtime) in self.entries.items() if mtime < self.horizon_ms]:
            self._forget(path)

    def consider(self, listing: Iterable[FileEntry]) -> ListingOutcome:
        """What a listing adds (nothing is taken yet: ``take`` does that)."""
        new, changed, too_old = [], [], 0
        for entry in sorted(listing, key=lambda e: e.path):
            taken = self.entries.get(entry.path)
            if taken is None:
                if entry.mtime_ms < self.horizon_ms:
                    too_old += 1
                else:
                    new.append(entry)
            elif taken != (entry.size, entry.mtime_ms) and entry.path not in self.reported_changed:
                changed.append(entry)
        return ListingOutcome(tuple(new), tuple(changed), too_old)

    def take(self, entries: Iterable[FileEntry]) -> None:
        for entry in entries:
            self.entries[entry.path] = (entry.size, entry.mtime_ms)

    def mark_reported(self, entries: Iterable[FileEntry]) -> None:
        self.reported_changed.update(e.path for e in entries)

    def forget_missing(self, listed: Iterable[str]) -> list[str]:
        """Forget the remembered files absent from this listing and the one before;
        returns them."""
        present = set(listed)
        missing = {p for p in self.entries if p not in present}
        gone = sorted(missing & self.missing_once)
        self.missing_once = missing - set(gone)
        for path in gone:
            self._forget(path)
        return gone

    def _forget(self, path: str) -> None:
        self.entries.pop(path, None)
        self.missing_once.discard(path)
        self.reported_changed.discard(path)

    # -- checkpoint ---------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [[p, size, mtime] for p, (size, mtime) in sorted(self.entries.items())],
            "horizon_ms": self.horizon_ms,
            "missing_once": sorted(self.missing_once),
            "reported_changed": sorted(self.reported_changed),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessedFiles:
        return cls(
            entries={str(p): (int(size), int(mtime)) for p, size, mtime in data.get("files", [])},
            horizon_ms=int(data.get("horizon_ms", 0)),
            missing_once={str(p) for p in data.get("missing_once", [])},
            reported_changed={str(p) for p in data.get("reported_changed", [])},
        )
