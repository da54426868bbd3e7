"""Per-split state of a stateful function (reader/split_state.py) and the stateful forms of
the user's function (reader/processing.py)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from test_processing import kafka_batch

from sluicegate.api.errors import ConfigError
from sluicegate.reader.processing import BatchState, ErrorHandling, ErrorPolicy, is_stateful, processor_for
from sluicegate.reader.records import Message, messages
from sluicegate.reader.split_state import (
    SavedState,
    SplitStateMismatch,
    SplitStates,
    SplitStateUnsaveable,
    StateWrite,
)


def wire(split_id: str, position: int) -> dict[str, Any]:
    return {"split_id": split_id, "position": position}


def committed_records(writes: list[StateWrite]) -> list[tuple[str, bytes | None]]:
    return [(w.split_id, None if w.saved is None else w.saved.encode()) for w in writes]


def test_a_new_split_starts_empty_and_an_untouched_empty_state_writes_nothing() -> None:
    states = SplitStates()
    states.load("a", wire("a", 0))
    assert states.state("a") == {}
    assert states.plan([wire("a", 10)], []) == []


def test_a_changed_state_is_written_with_its_split_position_and_read_back_by_the_next_owner() -> None:
    first = SplitStates()
    first.load("a", wire("a", 0))
    first.state("a")["count"] = 3
    writes = first.plan([wire("a", 3)], [])
    assert [(w.split_id, w.saved) for w in writes] == [("a", SavedState(wire("a", 3), {"count": 3}))]
    first.committed(gone=[])

    successor = SplitStates()
    successor.saw(committed_records(writes))
    successor.load("a", wire("a", 3))
    assert successor.state("a") == {"count": 3}


def test_an_unchanged_state_is_written_again_only_when_its_split_moved() -> None:
    states = SplitStates()
    states.load("a", wire("a", 0))
    states.state("a")["n"] = 1
    states.plan([wire("a", 1)], [])
    states.committed(gone=[])
    assert states.plan([wire("a", 1)], []) == []  # nothing changed
    moved = states.plan([wire("a", 5)], [])  # e.g. transaction markers: no record, a new position
    assert [w.saved for w in moved] == [SavedState(wire("a", 5), {"n": 1})]


def test_a_state_saved_at_another_position_is_refused_not_merged() -> None:
    states = SplitStates()
    states.saw([("a", SavedState(wire("a", 7), {"n": 7}).encode())])
    with pytest.raises(SplitStateMismatch, match=r"split a arrived as .*position.*3.* saved with .*7"):
        states.load("a", wire("a", 3))


def test_a_finished_split_is_deleted_and_a_given_back_one_leaves_the_working_set() -> None:
    states = SplitStates()
    for sid in ("a", "b"):
        states.load(sid, wire(sid, 0))
        states.state(sid)["n"] = 1
    writes = states.plan([wire("b", 4)], finished=["a"])
    assert {(w.split_id, w.saved is None) for w in writes} == {("a", True), ("b", False)}
    states.committed(gone=["a", "b"])
    assert not states.is_loaded("a") and not states.is_loaded("b")
    successor = SplitStates()
    successor.saw(committed_records(writes))
    successor.load("a", wire("a", 99))  # deleted: no position to hold it to
    assert successor.state("a") == {}


def test_a_discarded_checkpoint_goes_back_to_the_committed_state() -> None:
    states = SplitStates()
    states.load("a", wire("a", 0))
    states.state("a")["n"] = 1
    states.plan([wire("a", 1)], [])
    states.committed(gone=[])
    states.state("a")["n"] = 2  # processed, then the checkpoint failed
    states.plan([wire("a", 2)], [])
    states.discard()
    assert not states.is_loaded("a")
    states.load("a", wire("a", 1))
    assert states.state("a") == {"n": 1}


def test_a_state_json_cannot_hold_fails_naming_the_split() -> None:
    states = SplitStates()
    states.load("a", wire("a", 0))
    states.state("a")["when"] = object()
    with pytest.raises(SplitStateUnsaveable, match="split a cannot be saved as JSON"):
        states.plan([wire("a", 1)], [])


# -- stateful functions -------------------------------------------------------------------


def count_per_key(message: Message, state: dict[str, Any]) -> Message:
    key = (message.key or b"-").decode()
    state[key] = state.get(key, 0) + 1
    return message.replace(value={"key": key, "seen": state[key]})


def keys_per_split(batch: pa.RecordBatch, state: BatchState) -> pa.RecordBatch:
    for split_id in state.split_ids:
        state[split_id]["rows"] = state[split_id].get("rows", 0) + 1
    return batch


def test_a_second_parameter_makes_a_function_stateful() -> None:
    assert is_stateful(count_per_key) and is_stateful(keys_per_split)
    assert not is_stateful(lambda message: message)
    assert not is_stateful(lambda message, extra=1: message)
    with pytest.raises(ConfigError, match="takes 3 arguments"):
        is_stateful(lambda a, b, c: a)


def test_a_stateful_record_function_gets_the_state_of_each_record_split() -> None:
    processor = processor_for(count_per_key)
    assert processor.stateful
    batch = kafka_batch([b"x"] * 4)
    states = {"orders-3": {"k1": 10}}
    processed = processor.apply(batch, BatchState(["orders-3"] * 4, states))
    seen = [m.json()["seen"] for m in messages(processed.batch)]
    assert seen == [1, 11, 2, 1]  # keys None, k1, None, k3: counted per key in the split's state
    assert states["orders-3"] == {"-": 2, "k1": 11, "k3": 1}


def test_a_stateful_batch_function_gets_each_row_split_and_retry_passes_the_state_again() -> None:
    calls: list[int] = []

    def flaky(batch: pa.RecordBatch, state: BatchState) -> pa.RecordBatch:
        calls.append(batch.num_rows)
        if len(calls) == 1:
            raise RuntimeError("lookup down")
        return keys_per_split(batch, state)

    processor = processor_for(flaky, ErrorHandling(ErrorPolicy.RETRY, 2, sleep=lambda _s: None))
    states: dict[str, dict[str, Any]] = {"orders-3": {}, "orders-4": {}}
    processor.apply(kafka_batch([b"a", b"b", b"c"]), BatchState(["orders-3", "orders-4", "orders-3"], states))
    assert calls == [3, 3]
    assert states == {"orders-3": {"rows": 2}, "orders-4": {"rows": 1}}


def test_skip_is_refused_for_a_stateful_batch_function() -> None:
    with pytest.raises(ConfigError, match=r"--on-process-error.*stateful batch function"):
        processor_for(keys_per_split, ErrorHandling(ErrorPolicy.SKIP))
