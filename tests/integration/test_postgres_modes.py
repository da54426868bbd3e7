"""The ``postgres`` connector's startup modes over real processes: ``snapshot`` is a bounded
source (every row once, the readers exit 0, no slot is made) and ``latest-offset`` reads
only the changes committed after the slot is created (no row of the snapshot)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import psycopg
import pytest
from kafka_data import READER_TIMING, option_args
from postgres_data import ITEMS, ORDERS, conninfo_of, database, source_options
from postgres_server import PostgresServer, postgres
from processes import Proc, ProcessGroup

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(180)]
__all__ = ["database", "postgres"]


def jsonl_reader(
    procs: ProcessGroup, source: str, subtask: int, options: dict[str, str], out: Path, readers: int
) -> Proc:
    args = [
        *("reader", "--source", source, "--subtask", str(subtask), "--connector", "postgres"),
        *("--coordinator", "auto", "--max-parallelism", str(readers), "--output", f"jsonl:{out}"),
        *option_args(options),
        *READER_TIMING,
    ]
    return procs.start(f"reader-{subtask}", args)


def rows_of(*paths: Path) -> list[dict[str, object]]:
    return [orjson.loads(line)["value"] for path in paths if path.exists() for line in path.read_bytes().splitlines()]


def test_a_snapshot_is_bounded_reads_every_row_once_and_makes_no_slot(
    procs: ProcessGroup, unique_source: str, postgres: PostgresServer, database: str, tmp_path: Path
) -> None:
    options = source_options(postgres, database, startup_mode="snapshot", slot="never_made")
    outs = [tmp_path / f"out-{s}.jsonl" for s in range(2)]
    readers = [jsonl_reader(procs, unique_source, s, options, outs[s], 2) for s in range(2)]
    for proc in readers:
        assert proc.wait(120) == 0, proc.tail()
    rows = rows_of(*outs)
    keys = [(r["_table"], r.get("id"), r.get("customer"), r.get("n")) for r in rows]
    assert len(keys) == len(set(keys)) == ITEMS + ORDERS
    assert {r["_change_type"] for r in rows} == {"insert"}
    with psycopg.connect(conninfo_of(postgres, database)) as conn:
        slots = conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'never_made'").fetchone()
    assert slots == (0,)


def test_latest_offset_reads_only_what_is_committed_after_the_slot_is_made(
    procs: ProcessGroup, unique_source: str, postgres: PostgresServer, database: str, tmp_path: Path
) -> None:
    options = source_options(
        postgres, database, startup_mode="latest-offset", slot="latest_here", publication="latest_here"
    )
    out = tmp_path / "out.jsonl"
    proc = jsonl_reader(procs, unique_source, 0, options, out, 1)
    try:
        proc.wait_for_log("streaming changes of slot", timeout_s=60)
        with psycopg.connect(conninfo_of(postgres, database), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO items (id, name) SELECT g, 'late' FROM generate_series(%s, %s) g", (ITEMS + 1, ITEMS + 5)
            )
            conn.execute("DELETE FROM orders WHERE n = 1")
        deadline = time.monotonic() + 30
        while len(rows_of(out)) < 6:
            assert time.monotonic() < deadline and proc.returncode is None, proc.tail()
            time.sleep(0.2)
        with psycopg.connect(conninfo_of(postgres, database), autocommit=True) as conn:
            # only a table the source does not read changes now: the slot still moves on, so
            # the server need not keep that WAL for it
            conn.execute("CREATE TABLE elsewhere (n int)")
            conn.execute("INSERT INTO elsewhere SELECT generate_series(1, 1000)")
            written = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
            deadline = time.monotonic() + 60
            while True:
                row = conn.execute(
                    "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                    (options["slot"],),
                ).fetchone()
                if row is not None and written is not None and row[0] >= written[0]:
                    break
                assert time.monotonic() < deadline, f"the slot stayed at {row} below {written}"
                time.sleep(0.2)
    finally:
        procs.stop_all()
    rows = rows_of(out)
    assert sorted((r["_change_type"], r.get("id"), r.get("n")) for r in rows) == sorted(
        [("insert", i, None) for i in range(ITEMS + 1, ITEMS + 6)] + [("delete", None, 1)]
    )
