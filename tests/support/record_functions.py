"""Functions that reader processes of the tests run (``--process record_functions:NAME``;
tests/support is on their PYTHONPATH)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from sluicegate.reader.output import Sink
from sluicegate.reader.records import Message


def as_envelope(record: Message) -> Message:
    """The record rewritten as the JSON envelope the exactly-once checks read
    (kafka_data.check_exactly_once): the output is then this function applied to every
    input record, which the check verifies record by record."""
    return record.replace(value=orjson.dumps(envelope_row(record)))


PACE_EVERY = 1000
PACE_S = 0.06
_paced = {"records": 0}


def as_envelope_paced(record: Message) -> Message:
    """``as_envelope``, no faster than PACE_EVERY records per PACE_S in a process (~17,000
    records/s): a copy that lasts seconds on any machine, for a test that must find readers
    still reading when it kills them."""
    _paced["records"] += 1
    if _paced["records"] % PACE_EVERY == 0:
        time.sleep(PACE_S)
    return as_envelope(record)


def counted_envelope(record: Message, state: dict[str, Any]) -> Message:
    """``as_envelope`` with ``seen``: how many records of its split the function has seen,
    this one included, kept in the split's state. With the state saved and handed on
    exactly once, the n-th record of a partition says n whoever read it; a state lost
    restarts the count, one applied twice skips ahead."""
    state["seen"] = state.get("seen", 0) + 1
    row = envelope_row(record)
    row["seen"] = state["seen"]
    return record.replace(value=orjson.dumps(row))


def envelope_row(record: Message) -> dict[str, Any]:
    key, value = record.key, record.value
    return {
        "subtask": None,
        "split_id": f"{record.topic}-{record.partition}",
        "value": {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp_ms,
            "key": None if key is None else key.decode(),
            "value": None if value is None else value.decode(),
        },
        "event_time_ms": record.timestamp_ms,
    }


def slowly(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Each batch unchanged, 50 ms later: a reader that a test can kill while it runs."""
    time.sleep(0.05)
    return batch


class ValuesFile(Sink):
    """A user's sink: each record's value on a line of ``values-<subtask>.txt`` in
    ``$SLUICEGATE_TEST_SINK_DIR``, appended at each checkpoint (at-least-once)."""

    def __init__(self, subtask: int) -> None:
        super().__init__()
        self.path = Path(os.environ["SLUICEGATE_TEST_SINK_DIR"]) / f"values-{subtask}.txt"
        self.lines: list[bytes] = []

    async def write_batch(self, batch: pa.RecordBatch) -> None:
        self.lines += [v or b"" for v in batch.column("value").to_pylist()]
        self.records_pending += batch.num_rows

    async def flush(self) -> None:
        with self.path.open("ab") as handle:
            handle.write(b"".join(line + b"\n" for line in self.lines))
        self.lines = []


def not_a_sink(subtask: int) -> object:
    return object()
