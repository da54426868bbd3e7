"""The coordinator's state records: small parts inline, large parts in content-defined
chunks named by a manifest, stale chunks tombstoned, every record within 1 MB."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.coordinator import state_store
from sluicegate.coordinator.state_store import (
    STATE_RECORD_MAX_BYTES,
    MissingChunkError,
    StateTooLargeError,
    StateWriter,
    merge_records,
)

SOURCE = "orders"


def splits(n: int, first: int = 0) -> list[dict[str, Any]]:
    return [
        {"split_id": f"seq-{k:07d}", "start": k * 1000, "end": (k + 1) * 1000, "position": k * 1000}
        for k in range(first, first + n)
    ]


class Topic:
    """A compacted state topic: every record written, merged as a successor reads it."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []

    def commit(self, records: list[tuple[bytes, bytes | None]]) -> None:
        assert all(value is None or len(value) <= STATE_RECORD_MAX_BYTES for _, value in records)
        self.records += records

    def live_keys(self) -> set[bytes]:
        latest: dict[bytes, bytes | None] = {}
        for key, value in self.records:
            assert key is not None
            latest[key] = value
        return {key for key, value in latest.items() if value is not None}

    def read(self) -> dict[str, Any]:
        return merge_records(SOURCE, self.records).parts


def written(records: list[tuple[bytes, bytes | None]]) -> list[bytes]:
    return [key for key, value in records if value is not None]


def tombstoned(records: list[tuple[bytes, bytes | None]]) -> list[bytes]:
    return [key for key, value in records if value is None]


def test_a_small_part_is_one_record() -> None:
    records = StateWriter(SOURCE, {}).encode({"meta": {"epoch": 1}, "slot/0": {"owned": splits(3)}})
    assert written(records) == [b"orders/meta", b"orders/slot/0"]
    assert merge_records(SOURCE, records).parts == {"meta": {"epoch": 1}, "slot/0": {"owned": splits(3)}}


def test_a_large_part_is_chunked_and_reads_back_whole() -> None:
    part = {"unassigned": splits(100_000)}  # ~8 MB of JSON
    topic = Topic()
    records = StateWriter(SOURCE, {}).encode({"enumerator": part})
    topic.commit(records)
    chunks = [key for key in written(records) if b"#" in key]
    assert len(chunks) > 8
    assert all(key.startswith(b"orders/enumerator#") for key in chunks)
    assert topic.read() == {"enumerator": part}


def test_a_change_in_the_middle_rewrites_only_the_chunks_around_it() -> None:
    owned = splits(100_000)
    writer, topic = StateWriter(SOURCE, {}), Topic()
    first = writer.encode({"slot/3": {"owned": owned}})
    topic.commit(first)
    owned[50_000] = {**owned[50_000], "position": owned[50_000]["position"] + 123_456}
    del owned[70_000]
    second = writer.encode({"slot/3": {"owned": owned}})
    topic.commit(second)
    chunk_count = sum(b"#" in key for key in written(first))
    new_chunks = [key for key in written(second) if b"#" in key]
    assert 1 <= len(new_chunks) <= 4, f"{len(new_chunks)} of {chunk_count} chunks rewritten"
    assert len(tombstoned(second)) == len(new_chunks)
    written_bytes = sum(len(v) for _, v in second if v is not None)
    assert written_bytes < sum(len(v) for _, v in first if v is not None) / 5
    assert topic.read() == {"slot/3": {"owned": owned}}


def test_chunks_of_a_part_that_shrinks_back_inline_are_tombstoned() -> None:
    writer, topic = StateWriter(SOURCE, {}), Topic()
    topic.commit(writer.encode({"enumerator": {"unassigned": splits(50_000)}, "meta": {"epoch": 1}}))
    assert any(b"#" in key for key in topic.live_keys())
    topic.commit(writer.encode({"enumerator": {"unassigned": splits(2)}}))
    assert topic.live_keys() == {b"orders/enumerator", b"orders/meta"}
    assert topic.read() == {"enumerator": {"unassigned": splits(2)}, "meta": {"epoch": 1}}


def test_a_successors_writer_continues_from_the_stored_chunks() -> None:
    topic = Topic()
    topic.commit(StateWriter(SOURCE, {}).encode({"enumerator": {"unassigned": splits(50_000)}}))
    stored = merge_records(SOURCE, topic.records)
    successor = StateWriter.restored(SOURCE, stored)
    records = successor.encode({"enumerator": {"unassigned": splits(49_999, first=1)}})  # the first split went
    topic.commit(records)
    assert sum(b"#" in key for key in written(records)) <= 2
    assert topic.read() == {"enumerator": {"unassigned": splits(49_999, first=1)}}
    named = set(merge_records(SOURCE, topic.records).chunks["enumerator"])
    assert {key for key in topic.live_keys() if b"#" in key} == {f"orders/enumerator#{d}".encode() for d in named}


def test_a_part_that_encodes_as_last_written_is_left_out_and_meta_always_goes() -> None:
    writer, topic = StateWriter(SOURCE, {}), Topic()
    topic.commit(writer.encode({"meta": {"epoch": 1}, "enumerator": {"listed": []}, "slot/0": {"live": True}}))
    again = writer.encode({"meta": {"epoch": 1}, "enumerator": {"listed": []}, "slot/0": {"live": True}})
    assert written(again) == [b"orders/meta"], "meta is every commit's mark; the equal parts are left out"
    changed = writer.encode({"meta": {"epoch": 1}, "enumerator": {"listed": ["a"]}, "slot/0": {"live": True}})
    assert sorted(written(changed)) == [b"orders/enumerator", b"orders/meta"]
    topic.commit(again + changed)
    assert topic.read() == {"meta": {"epoch": 1}, "enumerator": {"listed": ["a"]}, "slot/0": {"live": True}}


def test_an_unchanged_chunked_part_writes_nothing_and_a_changed_one_its_chunks() -> None:
    writer, topic = StateWriter(SOURCE, {}), Topic()
    topic.commit(writer.encode({"enumerator": {"unassigned": splits(50_000)}}))
    assert writer.encode({"enumerator": {"unassigned": splits(50_000)}}) == []
    records = writer.encode({"enumerator": {"unassigned": splits(49_999, first=1)}})
    topic.commit(records)
    assert b"orders/enumerator" in written(records)
    assert topic.read() == {"enumerator": {"unassigned": splits(49_999, first=1)}}


def test_a_restored_writer_writes_an_inline_part_it_did_not_write_itself() -> None:
    topic = Topic()
    topic.commit(StateWriter(SOURCE, {}).encode({"slot/0": {"live": True}}))
    successor = StateWriter.restored(SOURCE, merge_records(SOURCE, topic.records))
    assert written(successor.encode({"slot/0": {"live": True}})) == [b"orders/slot/0"]


def test_records_of_other_sources_are_ignored() -> None:
    records = StateWriter("other", {}).encode({"meta": {"epoch": 9}, "enumerator": {"u": splits(20_000)}})
    assert merge_records(SOURCE, records).parts == {}


def test_a_missing_chunk_is_an_error_naming_the_part() -> None:
    records = StateWriter(SOURCE, {}).encode({"enumerator": {"unassigned": splits(50_000)}})
    damaged = [(key, value) for key, value in records if not key.startswith(b"orders/enumerator#")][:1]
    damaged += [(key, value) for key, value in records if key == b"orders/enumerator"]
    with pytest.raises(MissingChunkError, match="enumerator"):
        merge_records(SOURCE, damaged)


def test_a_record_above_the_limit_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_store, "STATE_RECORD_MAX_BYTES", 100)
    with pytest.raises(StateTooLargeError, match=r"orders/meta is \d+ bytes, above the limit of 100"):
        StateWriter(SOURCE, {}).encode({"meta": {"padding": "x" * 200}})


EDITS = st.lists(st.tuples(st.sampled_from(["set", "insert", "delete"]), st.floats(0, 1)), max_size=6)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 40_000), min_size=1, max_size=4), edits=EDITS, seed=st.integers(0, 2**32))
def test_any_sequence_of_commits_reads_back_as_the_last_one(
    sizes: list[int], edits: list[tuple[str, float]], seed: int
) -> None:
    rnd = random.Random(seed)
    writer, topic = StateWriter(SOURCE, {}), Topic()
    for size in sizes:
        items = splits(size)
        for op, where in edits:
            i = int(where * len(items))
            if op == "set" and items:
                items[min(i, len(items) - 1)] = {"split_id": "x", "position": rnd.randrange(10**12)}
            elif op == "insert":
                items.insert(i, {"split_id": "y", "noise": "z" * rnd.randrange(100)})
            elif op == "delete" and items:
                del items[min(i, len(items) - 1)]
        topic.commit(writer.encode({"enumerator": {"unassigned": items}, "meta": {"n": len(items)}}))
        assert topic.read() == {"enumerator": {"unassigned": items}, "meta": {"n": len(items)}}
        stored = merge_records(SOURCE, topic.records)
        named = {f"orders/enumerator#{d}".encode() for d in stored.chunks.get("enumerator", [])}
        assert {key for key in topic.live_keys() if b"#" in key} == named  # no stale chunk survives
