"""The connector test kit on ``files``: each batch of data is a new file (Parquet, CSV
and JSON Lines in turn) in a directory the source lists every 200 ms, so every scenario
also sees files found while running."""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sluicegate.api import Record
from sluicegate.testing import ConnectorTestKit, KitEnv, RunConfig

ROWS = 40
FILES = 6
SUFFIXES = (".parquet", ".csv", ".jsonl")


class TestFilesKit(ConnectorTestKit):
    connector = "files"
    random_schedules = 5
    run_config = RunConfig(checkpoint_every=5)
    """Pull assignment hands the first files out at 1 s (a dry reader asks once a second),
    round 10 + 2; with a checkpoint every 4 rounds a reader's first read would always be
    checkpointed at once, and the kit's "killed before its first checkpoint" never happens."""

    def source_options(self, env: KitEnv) -> dict[str, str]:
        root = env.directory / "in"
        root.mkdir(exist_ok=True)
        return {
            "path": str(root),
            "schema": "id BIGINT, ts TIMESTAMP",
            "event_time_column": "ts",
            "discovery_interval_ms": "200",
            "assignment_grace_ms": "1000",
        }

    def write_data(self, env: KitEnv, batch: int) -> list[Hashable]:
        """Batch k is FILES new files of ROWS rows; file f's event times start f minutes later.
        Several files, so that with pull assignment each reader asks for and gets some."""
        root = env.directory / "in"
        root.mkdir(exist_ok=True)
        written: list[Hashable] = []
        for f in range(FILES * batch, FILES * (batch + 1)):
            ids = list(range(f * ROWS, (f + 1) * ROWS))
            table = pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "ts": pa.array([f * 60_000 + i for i in range(ROWS)], pa.timestamp("ms", tz="UTC")),
                }
            )
            name = f"{f:04d}{SUFFIXES[f % 3]}"
            staging = root / f".{name}"
            if name.endswith(".parquet"):
                pq.write_table(table, staging, row_group_size=ROWS // 4)
            elif name.endswith(".csv"):
                pacsv.write_csv(table, staging)
            else:
                staging.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in table.to_pylist()))
            os.rename(staging, root / name)
            written += ids
        return written

    def alignment_options(self, env: KitEnv) -> dict[str, str]:
        return {}  # the files' event times are a minute apart already: later files run ahead

    def record_key(self, record: Record) -> Hashable:
        key: int = record.value["id"]
        return key

    def row_key(self, row: Mapping[str, Any]) -> Hashable:
        key: int = row["value"]["id"]
        return key
