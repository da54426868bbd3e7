"""Bad files: corrupt, unreadable, not of the schema, or changed after they were listed.

``BadFile`` is what reading raises for any of them, naming the file and why. What
happens next is the ``on_bad_file`` policy: ``fail`` stops the reader with
``BadFileError`` (a SourceError: the host stops with its message), ``skip`` ends the
file's split, counts it, logs it and dead-letters it (the file's URL and the reason).
"""

from __future__ import annotations

from sluicegate.api.errors import SourceError

from .split import FileEntry, FileSplit

BAD_FILE_EVENT = "bad_file"
"""The source event a reader sends the enumerator for a skipped file (it counts them)."""


class BadFile(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class BadFileError(SourceError):
    """A bad file with ``on_bad_file=fail``."""

    def __init__(self, bad: BadFile) -> None:
        super().__init__(f"bad file {bad.path}: {bad.reason} (on_bad_file=fail; skip it with on_bad_file=skip)")
        self.path = bad.path
        self.reason = bad.reason


def change_of(split: FileSplit, now: FileEntry | None) -> str | None:
    """Why the file of ``split`` is not the file that was listed (None: it is)."""
    if now is None:
        return "the file is gone (deleted after it was listed)"
    if now.size != split.size:
        grew = "grew" if now.size > split.size else "shrank"
        return f"the file {grew} after it was listed ({split.size} -> {now.size} bytes)"
    if now.mtime_ms != split.mtime_ms:
        return f"the file was modified after it was listed (mtime {split.mtime_ms} -> {now.mtime_ms} ms)"
    return None
