"""A reader checkpoint on ``NS.S.reader-state`` whatever its size (reader/state.py): one
record when it fits, else pieces and a head; restoring joins them back, a compacted
partition keeping only the latest value of each key."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.reader.state import ReaderCheckpoint, StateRecordError, StateRecords, piece_key, state_key


def _checkpoint(checkpoint_id: int, n: int) -> ReaderCheckpoint:
    splits: list[dict[str, Any]] = [
        {"split_id": f"orders-{k}", "topic": "orders", "partition": k, "position": checkpoint_id * 100 + k}
        for k in range(n)
    ]
    return ReaderCheckpoint("orders", 3, checkpoint_id, applied_seq=5, splits=splits, epoch=2, attempt=4)


class Partition:
    """A compacted partition as a reader sees it: records in offset order, latest per key."""

    def __init__(self) -> None:
        self.log: list[tuple[bytes, bytes | None]] = []

    def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        self.log += records

    def latest(self, key: bytes, before: int | None = None) -> tuple[int, bytes | None] | None:
        end = len(self.log) if before is None else before
        for offset in range(end - 1, -1, -1):
            if self.log[offset][0] == key:
                return offset, self.log[offset][1]
        return None

    def restore(self, subtask: int) -> ReaderCheckpoint | None:
        """What the reader host's restore does (over read_latest)."""
        offset, raw = self.latest(state_key(subtask)) or (0, None)
        if raw is None:
            return None
        checkpoint, pieces = ReaderCheckpoint.decode_head(raw)
        found = [self.latest(piece_key(subtask, i), before=offset) for i in range(pieces)]
        return checkpoint.joined([f[1] if f else None for f in found]) if pieces else checkpoint

    def keys(self) -> set[bytes]:
        latest: dict[bytes, bytes | None] = {}
        for key, value in self.log:
            latest[key] = value
        return {k for k, v in latest.items() if v is not None}


def test_a_checkpoint_that_fits_is_one_record_as_before() -> None:
    writer = StateRecords(3)
    cp = _checkpoint(1, 10)
    assert writer.encode(cp) == [(b"3", cp.encode())]
    assert ReaderCheckpoint.decode(cp.encode()) == cp


def test_a_large_checkpoint_goes_in_pieces_that_fit_and_restores_whole() -> None:
    writer = StateRecords(3, max_record_bytes=4_000)
    partition = Partition()
    cp = _checkpoint(1, 300)
    records = writer.encode(cp)
    assert len(records) > 3 and records[-1][0] == b"3", "the head comes last"
    assert all(value is not None and len(value) <= 4_000 for _, value in records)
    partition.write(records)
    assert partition.restore(3) == cp
    with pytest.raises(StateRecordError, match="pieces"):
        ReaderCheckpoint.decode(records[-1][1] or b"")


def test_later_checkpoints_overwrite_and_a_smaller_one_tombstones_the_pieces_it_no_longer_needs() -> None:
    writer = StateRecords(3, max_record_bytes=4_000)
    partition = Partition()
    for checkpoint_id, n in ((1, 300), (2, 500), (3, 120), (4, 5)):
        partition.write(writer.encode(_checkpoint(checkpoint_id, n)))
        writer.committed()
        assert partition.restore(3) == _checkpoint(checkpoint_id, n)
    assert partition.keys() == {b"3"}, "one record, and no piece left over"


def test_a_checkpoint_whose_transaction_aborted_leaves_the_committed_pieces_to_tombstone() -> None:
    """The host encodes, the transaction aborts (nothing of it is on the topic), and the next
    checkpoint is small: it must tombstone the pieces the last *committed* one left."""
    writer = StateRecords(3, max_record_bytes=4_000)
    partition = Partition()
    partition.write(writer.encode(_checkpoint(1, 500)))
    writer.committed()
    writer.encode(_checkpoint(2, 120))  # fewer pieces; its transaction aborted: not written
    partition.write(writer.encode(_checkpoint(3, 5)))
    writer.committed()
    assert partition.restore(3) == _checkpoint(3, 5)
    assert partition.keys() == {b"3"}, "pieces of checkpoint 1 left on the topic"


def test_a_restarted_writer_knows_how_many_pieces_the_restored_head_had() -> None:
    partition = Partition()
    partition.write(StateRecords(3, max_record_bytes=4_000).encode(_checkpoint(1, 300)))
    restored = partition.restore(3)
    assert restored is not None
    head = partition.latest(b"3")
    assert head is not None and head[1] is not None
    writer = StateRecords(3, pieces_written=ReaderCheckpoint.decode_head(head[1])[1], max_record_bytes=4_000)
    partition.write(writer.encode(_checkpoint(2, 5)))
    assert partition.keys() == {b"3"}


def test_a_head_whose_pieces_are_missing_or_of_another_checkpoint_is_unreadable() -> None:
    writer = StateRecords(3, max_record_bytes=4_000)
    first = writer.encode(_checkpoint(1, 300))
    second = writer.encode(_checkpoint(2, 300))
    head, pieces = ReaderCheckpoint.decode_head(second[-1][1] or b"")
    with pytest.raises(StateRecordError, match="another checkpoint"):
        head.joined([value for _, value in first[:pieces]])
    with pytest.raises(StateRecordError, match="missing"):
        head.joined([None] * pieces)
