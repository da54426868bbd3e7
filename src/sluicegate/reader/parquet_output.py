"""``parquet:DIR``: records written to Parquet files that appear with the checkpoint that
holds their positions, whole and once.

A file cannot join a Kafka transaction, so each checkpoint commits in two steps, as a
two-phase-commit sink does:

1. before the transaction: the records since the last checkpoint are closed into one
   file under ``DIR/_pending/`` and fsynced; its name goes into the checkpoint record
   (``ReaderCheckpoint.output_files``);
2. after the transaction commits: the file is renamed to ``DIR/NAME`` (atomic on one
   file system) and the directory fsynced.

A crash between the two leaves a committed checkpoint naming a file still pending: the
next reader of the subtask restores that checkpoint and finishes the rename
(``recover``). A crash before the transaction commits leaves a pending file no committed
checkpoint names: ``recover`` deletes it, and its records are read again from the last
checkpoint into a new file. Readers of DIR see only ``part-*.parquet`` files there:
never a partial one, never one whose records another file also holds.

Names: ``part-SSSSS-<random>.parquet`` (SSSSS the subtask), so subtasks share DIR and
each one's recovery touches only its own pending files.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sluicegate.api.reader import Record
from sluicegate.reader.output import Output
from sluicegate.reader.records import OUTPUT_SCHEMA

log = logging.getLogger("sluicegate.reader")

PENDING = "_pending"


class ParquetOutput(Output):
    exactly_once = True

    def __init__(self, directory: str | os.PathLike[str], subtask: int) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.pending_dir = self.directory / PENDING
        self.prefix = f"part-{subtask:05d}-"
        self._writer: pq.ParquetWriter | None = None
        self._name: str | None = None
        """The file being written (under _pending/), not flushed yet."""
        self._staged: list[str] = []
        """Files flushed for the checkpoint being committed."""

    async def open(self) -> None:
        self.pending_dir.mkdir(parents=True, exist_ok=True)

    async def write(self, subtask: int, records: Sequence[Record]) -> None:
        raise TypeError("parquet:DIR writes records, not the JSON envelope")

    async def write_batch(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        if self._writer is None:
            self._name = f"{self.prefix}{uuid.uuid4().hex}.parquet"
            self._writer = pq.ParquetWriter(self.pending_dir / self._name, OUTPUT_SCHEMA)
        self._writer.write_batch(batch)
        self.records_pending += batch.num_rows

    async def flush(self) -> None:
        """Step 1: close the file being written and make it durable under _pending/."""
        writer, name = self._writer, self._name
        if writer is None or name is None:
            return
        self._writer = self._name = None
        writer.close()
        await asyncio.to_thread(_fsync, self.pending_dir / name)
        self._staged.append(name)

    def staged(self) -> tuple[str, ...]:
        return tuple(self._staged)

    def committed(self) -> None:
        """Step 2: the checkpoint naming the staged files is committed: make them visible."""
        for name in self._staged:
            self._publish(name)
        if self._staged:
            _fsync_dir(self.directory)
        self._staged = []
        super().committed()

    def discarded(self) -> None:
        """The checkpoint was not committed: its files go, their records are read again."""
        self._abandon_open_file()
        for name in self._staged:
            (self.pending_dir / name).unlink(missing_ok=True)
        self._staged = []
        super().discarded()

    async def recover(self, staged: tuple[str, ...]) -> None:
        """At start: finish publishing what the restored checkpoint names; delete this
        subtask's other pending files (a crashed attempt's, never committed)."""
        await self.open()
        for name in staged:
            self._publish(name)
        left = [p for p in self.pending_dir.glob(f"{self.prefix}*.parquet") if p.name not in staged]
        for path in left:
            path.unlink(missing_ok=True)
        if staged or left:
            _fsync_dir(self.directory)
            log.info(
                "parquet output: %d files of the restored checkpoint published, %d uncommitted files deleted",
                len(staged),
                len(left),
            )

    async def close(self) -> None:
        self._abandon_open_file()  # not part of any checkpoint: its records are read again

    def _publish(self, name: str) -> None:
        pending, final = self.pending_dir / name, self.directory / name
        if pending.exists():
            pending.rename(final)
        elif not final.exists():
            log.warning("parquet output: %s is neither pending nor published (deleted by hand?)", name)

    def _abandon_open_file(self) -> None:
        if self._writer is not None and self._name is not None:
            self._writer.close()
            (self.pending_dir / self._name).unlink(missing_ok=True)
        self._writer = self._name = None


def _fsync(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
