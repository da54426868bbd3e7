"""The reader checkpoint record kept on ``NS.S.reader-state`` (compacted; partition
and key = subtask).

It is what a restarted reader of the subtask restores: the splits with their
positions as of its last durable checkpoint, the ``seq`` of the last applied
``AddSplits``/``NoMoreSplits``, the checkpoint id, and the highest coordinator
epoch and the attempt it had. It is written in the same Kafka transaction as
the ``CheckpointAck`` that announces it, so the two are visible together or not
at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from sluicegate.api.split import WireSplit

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
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise StateRecordError(f"reader-state record is not JSON: {exc}") from None
        return cls.from_json(data)


def _int(data: dict[str, Any], key: str) -> int:
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise StateRecordError(f"{key!r} must be an integer, got {value!r}")
    return value


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise StateRecordError(f"'output_files' must be a list of file names, got {value!r}")
    return tuple(value)
