"""The reader checkpoint record kept on ``NS.S.reader-state`` (compacted; partition
and key = subtask).

It is what a restarted reader of the subtask restores: the splits with their
positions as of its last durable checkpoint, the ``seq`` of the last applied
``AddSplits``/``NoMoreSplits``, the checkpoint id, and the highest coordinator
epoch and the attempt it had. It is written in the same Kafka transaction as
the ``CheckpointAck`` that announces it, so the two are visible together or not
at all.

A checkpoint too large for one record (a reader of 15,000 Kafka partitions holds over a
megabyte of positions) goes in pieces, in the same transaction: its splits cut in records
keyed ``<subtask>#<i>``, then the *head*, keyed ``<subtask>`` as always, with no splits and
``pieces: n``. Restoring reads the head, then the latest piece records before it
(``StateRecords``; docs/protocol.md, "Topics").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from sluicegate.api.split import WireSplit
from sluicegate.protocol.codec import encode_key
from sluicegate.protocol.pieces import MAX_RECORD_BYTES, in_pieces

STATE_VERSION = 1


class StateRecordError(ValueError):
    """A reader-state record that cannot be read back."""


@dataclass(frozen=True)
class ReaderCheckpoint:
    source: str
    subtask: int
    checkpoint_id: int
    applied_seq: int
    splits: list[WireSplit] = field(default_factory=list)
    epoch: int = 0
    """The highest coordinator epoch the reader had seen."""
    attempt: int | None = None
    """The attempt that wrote this checkpoint (informational)."""
    no_more_splits: bool = False
    """Whether NoMoreSplits was applied (informational: a new attempt waits for a new one)."""
    output_files: tuple[str, ...] = ()
    """Files a ``parquet:`` output staged for this checkpoint: committed with it, made
    visible just after; a reader restored from it finishes that (reader/output.py)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "v": STATE_VERSION,
            "source": self.source,
            "subtask": self.subtask,
            "checkpoint_id": self.checkpoint_id,
            "applied_seq": self.applied_seq,
            "splits": self.splits,
            "epoch": self.epoch,
            "attempt": self.attempt,
            "no_more_splits": self.no_more_splits,
            **({"output_files": list(self.output_files)} if self.output_files else {}),
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.to_json())

    @classmethod
    def from_json(cls, data: Any) -> ReaderCheckpoint:
        if not isinstance(data, dict):
            raise StateRecordError("a reader-state record must be a JSON object")
        if data.get("v") != STATE_VERSION:
            raise StateRecordError(f"unknown reader-state version {data.get('v')!r}")
        try:
            splits = data["splits"]
            if not isinstance(splits, list) or not all(
                isinstance(s, dict) and isinstance(s.get("split_id"), str) for s in splits
            ):
                raise StateRecordError("'splits' must be a list of objects with a string 'split_id'")
            checkpoint = cls(
                source=str(data["source"]),
                subtask=_int(data, "subtask"),
                checkpoint_id=_int(data, "checkpoint_id"),
                applied_seq=_int(data, "applied_seq"),
                splits=list(splits),
                epoch=_int(data, "epoch"),
                attempt=None if data.get("attempt") is None else _int(data, "attempt"),
                no_more_splits=bool(data.get("no_more_splits", False)),
                output_files=_names(data.get("output_files", [])),
            )
        except KeyError as exc:
            raise StateRecordError(f"reader-state record has no {exc.args[0]!r}") from None
        return checkpoint

    @classmethod
    def decode(cls, raw: bytes) -> ReaderCheckpoint:
        """A checkpoint written in one record."""
        checkpoint, pieces = cls.decode_head(raw)
        if pieces:
            raise StateRecordError(f"the checkpoint is in {pieces} pieces: restore it with StateRecords")
        return checkpoint

    @classmethod
    def decode_head(cls, raw: bytes) -> tuple[ReaderCheckpoint, int]:
        """The record under the subtask's key, and in how many pieces its splits are (0: none,
        the record is the whole checkpoint)."""
        data = _json(raw)
        pieces = data.get("pieces", 0) if isinstance(data, dict) else 0
        if not isinstance(pieces, int) or isinstance(pieces, bool) or pieces < 0:
            raise StateRecordError(f"'pieces' must be a count, got {pieces!r}")
        return cls.from_json(data), pieces

    def joined(self, pieces: list[bytes | None]) -> ReaderCheckpoint:
        """This head with its splits from ``pieces`` (the values of ``<subtask>#0``, ``#1``
        ..., each the latest before the head)."""
        splits: list[WireSplit] = []
        for i, raw in enumerate(pieces):
            if raw is None:
                raise StateRecordError(f"piece {i} of checkpoint {self.checkpoint_id} is missing")
            data = _json(raw)
            if not isinstance(data, dict) or (data.get("checkpoint_id"), data.get("piece")) != (self.checkpoint_id, i):
                raise StateRecordError(f"piece {i} of checkpoint {self.checkpoint_id} belongs to another checkpoint")
            splits.extend(data.get("splits") or [])
        return ReaderCheckpoint.from_json({**self.to_json(), "splits": splits})


def state_key(subtask: int) -> bytes:
    """The key of a subtask's checkpoint record (its head, when in pieces): the subtask's
    key, as on every per-subtask topic."""
    return encode_key(subtask)


def piece_key(subtask: int, piece: int) -> bytes:
    return f"{subtask}#{piece}".encode()


@dataclass
class StateRecords:
    """The records one subtask's checkpoints are written as: one record when it fits, else
    its pieces and then its head. Remembers how many pieces the last checkpoint had, so
    that the piece records a smaller checkpoint no longer needs are tombstoned (compaction
    then removes them)."""

    subtask: int
    pieces_written: int = 0
    """Piece records the last committed checkpoint left on the topic."""
    max_record_bytes: int = MAX_RECORD_BYTES
    _pieces_encoded: int = 0
    """Pieces of the last checkpoint encoded: written once ``committed()`` says so (an
    aborted transaction wrote nothing, and left the committed pieces where they were)."""

    def encode(self, checkpoint: ReaderCheckpoint) -> list[tuple[bytes, bytes | None]]:
        whole = checkpoint.encode()
        if len(whole) <= self.max_record_bytes:
            records: list[tuple[bytes, bytes | None]] = [(state_key(self.subtask), whole)]
            pieces = 0
        else:
            cut = in_pieces(checkpoint.splits, self.max_record_bytes)
            records = [
                (
                    piece_key(self.subtask, i),
                    orjson.dumps({"checkpoint_id": checkpoint.checkpoint_id, "piece": i, "splits": piece}),
                )
                for i, piece in enumerate(cut)
            ]
            head = {**checkpoint.to_json(), "splits": [], "pieces": len(cut)}
            records.append((state_key(self.subtask), orjson.dumps(head)))
            pieces = len(cut)
        records += [(piece_key(self.subtask, i), None) for i in range(pieces, self.pieces_written)]
        self._pieces_encoded = pieces
        return records

    def committed(self) -> None:
        """The transaction with the last ``encode``'s records committed."""
        self.pieces_written = self._pieces_encoded


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StateRecordError(f"reader-state record is not JSON: {exc}") from None


def _int(data: dict[str, Any], key: str) -> int:
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise StateRecordError(f"{key!r} must be an integer, got {value!r}")
    return value


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise StateRecordError(f"'output_files' must be a list of file names, got {value!r}")
    return tuple(value)
