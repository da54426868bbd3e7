"""``parquet:DIR``: files appear with the checkpoint that holds their positions, whole and
once (reader/parquet_output.py); the checkpoint record carries the staged names."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.reader.output import OutputSpec, open_output
from sluicegate.reader.parquet_output import PENDING, ParquetOutput
from sluicegate.reader.records import OUTPUT_SCHEMA
from sluicegate.reader.state import ReaderCheckpoint, StateRecordError


def batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "key": [None] * len(values),
            "value": values,
            "headers": [None] * len(values),
            "timestamp": [None] * len(values),
        },
        schema=OUTPUT_SCHEMA,
    )


def visible(directory: Path) -> list[bytes]:
    """What a reader of DIR sees: the values of every published file."""
    return sorted(v for f in directory.glob("part-*.parquet") for v in pq.read_table(f).column("value").to_pylist())


def pending(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / PENDING).iterdir())


def output(directory: Path, subtask: int = 3) -> ParquetOutput:
    out = ParquetOutput(directory, subtask)
    asyncio.run(out.open())
    return out


def test_records_appear_when_their_checkpoint_commits(tmp_path: Path) -> None:
    out = output(tmp_path)
    asyncio.run(out.write_batch(batch([b"a", b"b"])))
    asyncio.run(out.write_batch(batch([b"c"])))
    assert visible(tmp_path) == [] and out.staged() == ()
    asyncio.run(out.flush())  # step 1: staged, durable, still invisible
    (name,) = out.staged()
    assert name.startswith("part-00003-") and pending(tmp_path) == [name] and visible(tmp_path) == []
    out.committed()  # step 2
    assert visible(tmp_path) == [b"a", b"b", b"c"] and pending(tmp_path) == []
    assert out.records_written == 3 and out.staged() == ()
    asyncio.run(out.flush())  # nothing written since: no file
    assert out.staged() == ()


def test_a_checkpoint_that_fails_leaves_no_file(tmp_path: Path) -> None:
    out = output(tmp_path)
    asyncio.run(out.write_batch(batch([b"a"])))
    asyncio.run(out.flush())
    asyncio.run(out.write_batch(batch([b"b"])))  # a file still being written, too
    out.discarded()
    assert visible(tmp_path) == [] and pending(tmp_path) == [] and out.records_written == 0


def test_recovery_publishes_what_the_checkpoint_names_and_deletes_the_rest(tmp_path: Path) -> None:
    crashed = output(tmp_path)
    asyncio.run(crashed.write_batch(batch([b"committed"])))
    asyncio.run(crashed.flush())
    named = crashed.staged()  # in the committed checkpoint; the process died before renaming
    asyncio.run(crashed.write_batch(batch([b"never committed"])))
    asyncio.run(crashed.flush())  # staged for a checkpoint that never committed
    other = output(tmp_path, subtask=4)  # another subtask's pending file is not ours to delete
    asyncio.run(other.write_batch(batch([b"theirs"])))
    asyncio.run(other.flush())

    restarted = ParquetOutput(tmp_path, 3)
    asyncio.run(restarted.recover(named))
    assert visible(tmp_path) == [b"committed"]
    assert pending(tmp_path) == list(other.staged())
    asyncio.run(restarted.recover(named))  # again (a second crash): nothing changes
    assert visible(tmp_path) == [b"committed"]


def test_the_checkpoint_record_carries_the_staged_names() -> None:
    checkpoint = ReaderCheckpoint("orders", 3, 7, 12, output_files=("part-00003-ab.parquet",))
    assert ReaderCheckpoint.decode(checkpoint.encode()) == checkpoint
    plain = ReaderCheckpoint("orders", 3, 7, 12)
    assert "output_files" not in plain.to_json()  # records written before it existed read back the same
    assert ReaderCheckpoint.decode(plain.encode()).output_files == ()
    with pytest.raises(StateRecordError, match="output_files"):
        ReaderCheckpoint.from_json({**plain.to_json(), "output_files": "x"})


def test_the_spec_is_checked(tmp_path: Path) -> None:
    spec = OutputSpec.parse(f"parquet:{tmp_path}/out")
    assert (spec.kind, spec.format) == ("parquet", "record")
    assert isinstance(open_output(spec, lambda: None, 0), ParquetOutput)
    with pytest.raises(ConfigError, match="--output-format"):
        OutputSpec.parse(f"parquet:{tmp_path}/out", "envelope")
    with pytest.raises(ConfigError, match="local directory"):
        OutputSpec.parse("parquet:s3://bucket/out")
    with pytest.raises(ConfigError, match="does not exist"):
        OutputSpec.parse(f"parquet:{tmp_path}/no/such/out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        OutputSpec.parse(f"parquet:{tmp_path}/file")


def test_a_sink_of_the_users_own_is_made_per_subtask_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from record_functions import ValuesFile

    monkeypatch.setenv("SLUICEGATE_TEST_SINK_DIR", str(tmp_path))
    spec = OutputSpec.parse("sink:record_functions:ValuesFile")
    sink = open_output(spec, lambda: None, 2)
    assert isinstance(sink, ValuesFile) and not sink.exactly_once
    asyncio.run(sink.write_batch(batch([b"a", b"b"])))
    asyncio.run(sink.flush())
    sink.committed()
    assert (tmp_path / "values-2.txt").read_bytes() == b"a\nb\n" and sink.records_written == 2
    with pytest.raises(TypeError, match="not the JSON envelope"):
        asyncio.run(sink.write(2, []))
    with pytest.raises(ConfigError, match=r"returned a object, not a sluicegate\.Sink"):
        open_output(OutputSpec.parse("sink:record_functions:not_a_sink"), lambda: None, 0)
    with pytest.raises(ConfigError, match=r"--output.*cannot import 'no_such_sink_module'"):
        open_output(OutputSpec.parse("sink:no_such_sink_module:Make"), lambda: None, 0)
    with pytest.raises(ConfigError, match="--output-format"):
        OutputSpec.parse("sink:record_functions:ValuesFile", "envelope")
