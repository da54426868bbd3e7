"""Tests read readers' jsonl outputs while the readers write them: only complete lines
count (a half-written last line read as corrupt JSON failed a test)."""

from __future__ import annotations

from pathlib import Path

from sluicegate.testing.processes import output_records


def test_a_half_written_last_line_is_not_a_record_yet(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"value": 1}\n{"value": 2}\n{"val')
    assert [r["value"] for r in output_records(out)] == [1, 2]
    out.write_bytes(b'{"value": 1}\n{"value": 2}\n{"value": 3}\n')
    assert [r["value"] for r in output_records(out, tmp_path / "not-yet.jsonl")] == [1, 2, 3]
