"""Reading a PostgreSQL table's snapshot: the postgres connector against its floor and two
Arrow libraries, side by side in one run, on the same table (issue 55 item 5, first part).

    .venv/bin/python benchmarks/postgres_snapshot.py                  # 200,000 rows, 3 repetitions
    .venv/bin/python benchmarks/postgres_snapshot.py --rows 50000 --repetitions 5 --chunk-size 8192
    .venv/bin/python benchmarks/postgres_snapshot.py --only floor,adbc,connectorx-chunks  # some contenders

Starts a PostgreSQL server of its own (tests/support/postgres_server.py: ``initdb`` and
``pg_ctl`` on a free port, as the ``postgres`` user when run as root), creates a table of
``--rows`` rows of 13 column types (bigint key, int, numeric(12,2), text, varchar,
boolean, timestamptz, date, uuid, jsonb, bytea, text[], double precision; REPLICA
IDENTITY FULL), cuts it with the connector's ``chunk_bounds`` (once, as the enumerator
does; not timed) and stops the server at the end. The contenders, each run once per
repetition, in an order rotated by one at every repetition:

- ``connector``: what a reader does per chunk today: ``snapshot.read_chunk`` (a temporary
  replication slot that exports a snapshot, a second connection that reads the chunk in
  it with psycopg) for every chunk, then the reader's ``values.RowMaker`` for every row. One process,
  sequential.
- ``floor``: ``COPY (SELECT * FROM t) TO STDOUT (FORMAT binary)`` read through psycopg's
  ``cursor.copy`` as raw bytes, nothing decoded: what the server and the socket cost.
- ``adbc``: ADBC's PostgreSQL driver reading the same chunks (the connector's own chunk
  query, bounds as literals) with ``fetch_arrow_table`` on one connection held for the
  run, each chunk in a REPEATABLE READ transaction that first runs ``SET TRANSACTION
  SNAPSHOT`` of the snapshot a temporary slot exported, as ``read_chunk`` does. Timed: the
  Arrow read. ``adbc->records``, timed apart right after: the Arrow tables turned into the
  connector's record dicts (``to_pylist`` per column, jsonb parsed, then ``record_row``);
  ``adbc+records`` is the sum of both.
- ``adbc-conn-per-chunk``: the same, with a new ADBC connection per chunk (as
  ``read_chunk`` opens a new psycopg connection per chunk).
- ``connectorx-chunks``: connectorx reading the same chunks to Arrow (``read_sql``, one
  call per chunk, no snapshot: see below).
- ``connectorx-p1`` and ``connectorx-p4``: connectorx reading the whole table to Arrow with
  ``partition_on`` the key, ``partition_num`` 1 and 4 (4 connections, each with a snapshot
  of its own), for reference.

Before timing it checks that ADBC reads inside an imported snapshot (two snapshots in turn
on one connection, each leaving out a row committed after its export) and compares the
first chunk's records of ``adbc->records`` and of connectorx with the connector's. The
table gives rows/s per repetition, their median, the median's ratio to the floor's, the
ratio to the floor paired by repetition (benchmarks/paired.py) and the client process's
CPU seconds per million rows (connectorx's threads included, the server's not: the
steadier figure on a busy machine); below it, ``adbc`` over ``connectorx-chunks`` paired
by repetition and where the connector's and the conversion's time goes.

**ADBC or connectorx for the connector's chunk read: ADBC**, by measurement (2026-12-03,
2 cores, 200,000 rows, 25 chunks of 8,192; the README section has the tables):

- Faster per chunk. With one connection held, ADBC read the chunks to Arrow at 158k
  rows/s against connectorx's 140k on a machine at load ~1.3 (paired by repetition 2.0x and
  2.5x in two runs at load 4-15), with half the client CPU in every run (2.5-3.3 against
  5.4-6.2 CPU s per million rows),
  although every ADBC chunk also creates a temporary slot and imports its snapshot and
  connectorx's do not. connectorx opens connections of its own at every call (it cannot be
  handed one). ADBC's connect is slow too (~60 ms: it loads the server's type catalog), so a
  new ADBC connection per chunk halves its rate (``adbc-conn-per-chunk``): a reader must
  hold one. Give ADBC the bounds as literals: with bound parameters it does not read by
  COPY and took ~2x as long per chunk (a trial, not in the table).
- Exact. Only ADBC can read a chunk in the exported snapshot: with autocommit off the driver
  has begun a transaction (and begins the next at each commit), so ``SET TRANSACTION
  ISOLATION LEVEL REPEATABLE READ`` and ``SET TRANSACTION SNAPSHOT '...'`` through
  ``cursor.execute`` are the first statements in it (checked at every run). connectorx runs
  nothing but its query, in connections it opens.
- Exact values. connectorx reads numeric(12,2) as decimal128(38, 10) (``'79.19'`` becomes
  ``'79.1900000000'``; a numeric wider than 38 digits does not fit). ADBC gives numeric's own
  text, and its records after ``record_row`` equal the connector's.

Where the time goes: the Arrow read is ~1.3 s of the 200,000 rows; turning the Arrow tables
into the connector's record dicts takes ~10 s (``to_pylist`` ~4 s, ``record_row`` ~6 s),
nearly as long as the connector's whole read (~14 s: ``read_chunk`` ~6 s, ``record_row``
~8 s). ADBC pays only if the records stay Arrow (or are built column by column in Arrow),
not one Python dict per row.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

import adbc_driver_manager.dbapi as adbc_dbapi
import adbc_driver_postgresql.dbapi as adbc_pg
import connectorx as cx
import psycopg
import pyarrow as pa
from local_http import free_port
from paired import paired_ratios, paired_text
from postgres_server import PostgresServer

from sluicegate_connectors.postgres.catalog import TableInfo, connect, table_info
from sluicegate_connectors.postgres.options import PostgresOptions
from sluicegate_connectors.postgres.snapshot import _chunk_query, _export_snapshot, chunk_bounds, read_chunk
from sluicegate_connectors.postgres.split import Key
from sluicegate_connectors.postgres.values import RowMaker, record_row

TABLE = "public.bench"
CREATE = """
CREATE TABLE bench (
    id bigint PRIMARY KEY, n int, price numeric(12,2), name text, code varchar(32), ok boolean,
    seen timestamptz, day date, uid uuid, doc jsonb, blob bytea, tags text[], score double precision
)"""
FILL = """
INSERT INTO bench SELECT g, g %% 100000, (g * 7919 %% 10000000) / 100.0, 'customer name ' || md5(g::text),
    'code-' || (g %% 997), g %% 3 = 0, '2024-01-01 00:00:00+00'::timestamptz + g * interval '17 seconds',
    '2020-01-01'::date + (g %% 3000)::int, md5(g::text)::uuid,
    jsonb_build_object('g', g, 'kind', 'k' || (g %% 13), 'tags', jsonb_build_array(g %% 5, 'x')),
    decode(md5(g::text), 'hex'), ARRAY['tag' || (g %% 7), 'tag' || (g %% 11), 'common'], g / 7.0
FROM generate_series(%s::bigint, %s::bigint) g"""
CONTENDERS = (
    "connector",
    "floor",
    "adbc",
    "adbc-conn-per-chunk",
    "connectorx-chunks",
    "connectorx-p1",
    "connectorx-p4",
)
CONVERSION = "adbc->records"
TOTAL = "adbc+records"


@dataclass
class Run:
    rows: int
    seconds: float
    cpu_s: float
    parts: dict[str, float] = field(default_factory=dict)
    """Seconds of named parts of the run (the records, say)."""


@dataclass
class Bench:
    server: PostgresServer
    options: PostgresOptions
    table: TableInfo
    bounds: list[tuple[Key | None, Key | None]]
    uri: str
    chunk_sql: list[str] = field(default_factory=list)
    """The connector's chunk query of each chunk, bounds as literals (for ADBC and connectorx)."""
    arrow: list[pa.Table] = field(default_factory=list)
    """The last ``adbc`` run's chunks, for the conversion timed apart."""
    parts: dict[str, float] = field(default_factory=dict)
    """Seconds of named parts of the current run."""

    def add(self, part: str, since: float) -> float:
        now = time.perf_counter()
        self.parts[part] = self.parts.get(part, 0.0) + now - since
        return now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--chunk-size", type=int, default=8_192)
    parser.add_argument("--only", help="comma-separated contenders (default: all)")
    args = parser.parse_args()
    names = tuple(args.only.split(",")) if args.only else CONTENDERS
    for name in names:
        if name not in CONTENDERS:
            parser.error(f"unknown contender {name!r} (one of {', '.join(CONTENDERS)})")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    root = Path(tempfile.mkdtemp(prefix="sluicegate-pg-bench-"))
    os.chmod(root, 0o755)
    server = PostgresServer(root, free_port())
    started = time.monotonic()
    try:
        server.initialize()
        server.start()
        bench = prepare(server, args.rows, args.chunk_size)
        checks(bench)
        results = measure(bench, names, args.repetitions)
        report(results, args, time.monotonic() - started)
    finally:
        try:
            server.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def prepare(server: PostgresServer, rows: int, chunk_size: int) -> Bench:
    t0 = time.monotonic()
    with server.connect() as conn:
        conn.execute(CREATE)
        conn.execute("ALTER TABLE bench REPLICA IDENTITY FULL")
        for start in range(1, rows + 1, 100_000):
            conn.execute(FILL, (start, min(rows, start + 99_999)))
        conn.execute("VACUUM (FREEZE, ANALYZE) bench")
        size = conn.execute("SELECT pg_total_relation_size('bench')").fetchone()
        version = conn.execute("SHOW server_version").fetchone()
    options = PostgresOptions.parse(
        {"url": server.url, "user": "postgres", "dbtable": TABLE, "chunk_size": str(chunk_size)}
    )
    with connect(options) as conn:
        table = table_info(conn, TABLE)
        cuts: list[Key] = list(chunk_bounds(conn, table, chunk_size))
    edges: list[Key | None] = [None, *cuts, None]
    bounds = list(itertools.pairwise(edges))
    bench = Bench(server, options, table, bounds, f"postgresql://postgres@127.0.0.1:{server.port}/postgres")
    with connect(options) as conn:
        mogrify = psycopg.ClientCursor(conn).mogrify
        for lo, hi in bounds:
            query, params = _chunk_query(table, lo, hi)
            bench.chunk_sql.append(mogrify(query, params))
    assert size is not None and version is not None
    print(
        f"PostgreSQL {version[0]} on port {server.port}: {TABLE}, {rows:,} rows of {len(table.columns)} columns, "
        f"{int(str(size[0])) / 2**20:.0f} MiB, {len(bounds)} chunks of {chunk_size:,} "
        f"(made in {time.monotonic() - t0:.1f} s); load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    return bench


# --- the contenders: each returns the rows it read -------------------------------------------


def run_connector(bench: Bench) -> int:
    rows = 0
    for lo, hi in bench.bounds:
        t = time.perf_counter()
        chunk = read_chunk(bench.options, bench.table, lo, hi)
        t = bench.add("read_chunk", t)
        make_row = RowMaker(bench.table.columns, bench.table.type_oids)  # as the reader makes its records
        records = [make_row(row) for row in chunk.rows]
        bench.add("record_row", t)
        rows += len(records)
    return rows


def run_floor(bench: Bench) -> int:
    size = 0
    with bench.server.connect() as conn, conn.cursor() as cursor:
        with cursor.copy("COPY (SELECT * FROM bench) TO STDOUT (FORMAT binary)") as copy:
            for data in copy:
                size += len(data)
        rows = cursor.rowcount
    return rows


def adbc_chunk(bench: Bench, conn: adbc_dbapi.Connection, query: str) -> pa.Table:
    """One chunk through ADBC, as ``read_chunk`` reads it: in a REPEATABLE READ transaction
    that imports the snapshot a temporary slot exported. ``conn`` has autocommit off, so the
    driver has begun a transaction already (and begins the next at each commit): the two SET
    TRANSACTION statements are the first in it."""
    with connect(bench.options, replication=True) as exporter:
        _point, name = _export_snapshot(exporter)
        with conn.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute(f"SET TRANSACTION SNAPSHOT '{name}'")
            cursor.execute(query)
            table = cursor.fetch_arrow_table()
        conn.commit()
        return table


def run_adbc(bench: Bench) -> int:
    with adbc_pg.connect(bench.uri) as conn:
        bench.arrow = [adbc_chunk(bench, conn, query) for query in bench.chunk_sql]
    return sum(t.num_rows for t in bench.arrow)


def run_adbc_connect_per_chunk(bench: Bench) -> int:
    rows = 0
    for query in bench.chunk_sql:
        with adbc_pg.connect(bench.uri) as conn:
            rows += adbc_chunk(bench, conn, query).num_rows
    return rows


def arrow_records(
    table: pa.Table, columns: tuple[str, ...], json_columns: frozenset[str], bench: Bench | None = None
) -> list[dict[str, Any]]:
    """The connector's record values from an Arrow chunk: each column to Python (numeric is
    already its text, uuid a UUID, bytea bytes, timestamps aware datetimes), jsonb parsed
    (psycopg gives it parsed), then ``record_row`` as the connector does."""
    t = time.perf_counter()
    values = []
    for name in columns:
        column = table.column(name).to_pylist()
        if name in json_columns:
            column = [None if v is None else json.loads(v) for v in column]
        values.append(column)
    if bench is not None:
        t = bench.add("to_pylist", t)
    records = [record_row(columns, row) for row in zip(*values, strict=True)]
    if bench is not None:
        bench.add("record_row", t)
    return records


def json_columns(table: TableInfo) -> frozenset[str]:
    return frozenset(c for c, t in zip(table.columns, table.type_names, strict=True) if t in ("json", "jsonb"))


def run_conversion(bench: Bench) -> int:
    jsons = json_columns(bench.table)
    return sum(len(arrow_records(t, bench.table.columns, jsons, bench)) for t in bench.arrow)


def run_connectorx_chunks(bench: Bench) -> int:
    return sum(cx.read_sql(bench.uri, query, return_type="arrow").num_rows for query in bench.chunk_sql)


def run_connectorx(bench: Bench, partitions: int) -> int:
    table = cx.read_sql(
        bench.uri, "SELECT * FROM bench", return_type="arrow", partition_on="id", partition_num=partitions
    )
    return int(table.num_rows)


RUNNERS: dict[str, Callable[[Bench], int]] = {
    "connector": run_connector,
    "floor": run_floor,
    "adbc": run_adbc,
    "adbc-conn-per-chunk": run_adbc_connect_per_chunk,
    "connectorx-chunks": run_connectorx_chunks,
    "connectorx-p1": lambda bench: run_connectorx(bench, 1),
    "connectorx-p4": lambda bench: run_connectorx(bench, 4),
}


# --- checks before timing ----------------------------------------------------------------------


def checks(bench: Bench) -> None:
    """ADBC inside an imported snapshot, and the first chunk's records of each library against
    the connector's."""
    seen: list[int] = []
    with bench.server.connect() as admin, adbc_pg.connect(bench.uri) as conn:
        admin.execute("CREATE TABLE probe (id int)")
        for n in (1, 2):  # two chunks' transactions, one after the other on one ADBC connection
            admin.execute("INSERT INTO probe VALUES (%s)", (n,))
            with connect(bench.options, replication=True) as exporter:
                _point, name = _export_snapshot(exporter)
                admin.execute("INSERT INTO probe VALUES (%s)", (n + 10,))  # committed after the export
                with conn.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    cursor.execute(f"SET TRANSACTION SNAPSHOT '{name}'")
                    cursor.execute("SELECT count(*) FROM probe")
                    row = cursor.fetchone()
                    assert row is not None
                    seen.append(int(row[0]))
                conn.commit()
        with conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM probe")
            row = cursor.fetchone()
            assert row is not None
            seen.append(int(row[0]))
        conn.commit()
        admin.execute("DROP TABLE probe")
    ok = seen == [1, 3, 4]
    print(
        f"ADBC in an imported snapshot: {'yes' if ok else 'NO'} (rows seen in two snapshots in turn on one "
        f"connection, then after: {seen}; expected [1, 3, 4]: each snapshot leaves out the row committed after "
        "its export)",
        flush=True,
    )
    if not ok:
        raise SystemExit("ADBC did not read inside the exported snapshot")

    lo, hi = bench.bounds[0]
    columns = bench.table.columns
    expected = [record_row(columns, row) for row in read_chunk(bench.options, bench.table, lo, hi).rows]
    jsons = json_columns(bench.table)
    with adbc_pg.connect(bench.uri) as conn:
        first = adbc_chunk(bench, conn, bench.chunk_sql[0])
    sides = {
        "adbc->records": first,
        "connectorx->records": cx.read_sql(bench.uri, bench.chunk_sql[0], return_type="arrow"),
    }
    for side, arrow in sides.items():
        got = arrow_records(arrow, columns, jsons)
        differ = sorted({c for a, b in zip(got, expected, strict=True) for c in columns if a[c] != b[c]})
        if len(got) != len(expected):
            verdict = f"{len(got)} rows, not {len(expected)}"
        elif not differ:
            verdict = "equal to the connector's"
        else:
            example = next(a for a, b in zip(got, expected, strict=True) if a[differ[0]] != b[differ[0]])
            want = next(b for a, b in zip(got, expected, strict=True) if a[differ[0]] != b[differ[0]])
            verdict = f"differ in {', '.join(differ)} (e.g. {example[differ[0]]!r}, not {want[differ[0]]!r})"
        print(f"first chunk's records, {side}: {verdict}", flush=True)


# --- timing and the table ----------------------------------------------------------------------


def timed(bench: Bench, runner: Callable[[Bench], int]) -> Run:
    gc.collect()
    bench.parts = {}
    wall, cpu = time.perf_counter(), time.process_time()
    rows = runner(bench)
    return Run(rows, time.perf_counter() - wall, time.process_time() - cpu, bench.parts)


def measure(bench: Bench, names: tuple[str, ...], repetitions: int) -> dict[str, dict[int, Run]]:
    results: dict[str, dict[int, Run]] = {}
    for rep in range(1, repetitions + 1):
        turn = (rep - 1) % len(names)
        for name in names[turn:] + names[:turn]:
            run = timed(bench, RUNNERS[name])
            results.setdefault(name, {})[rep] = run
            progress(rep, repetitions, name, run)
            if name == "adbc":
                conversion = timed(bench, run_conversion)
                bench.arrow = []
                results.setdefault(CONVERSION, {})[rep] = conversion
                results.setdefault(TOTAL, {})[rep] = Run(
                    run.rows, run.seconds + conversion.seconds, run.cpu_s + conversion.cpu_s
                )
                progress(rep, repetitions, CONVERSION, conversion)
    counts = {run.rows for runs in results.values() for run in runs.values()}
    if len(counts) != 1:
        raise SystemExit(f"the contenders read different numbers of rows: {sorted(counts)}")
    return results


def progress(rep: int, repetitions: int, name: str, run: Run) -> None:
    print(
        f"  repetition {rep}/{repetitions}  {name:<20} {run.rows:>9,} rows in {run.seconds:7.2f} s"
        f"  {run.rows / run.seconds:>11,.0f} rows/s  CPU {run.cpu_s:6.2f} s  load {os.getloadavg()[0]:.2f}"
        + "".join(f"  {part} {seconds:.2f} s" for part, seconds in run.parts.items()),
        flush=True,
    )


def report(results: dict[str, dict[int, Run]], args: argparse.Namespace, elapsed: float) -> None:
    rates = {name: {rep: r.rows / r.seconds for rep, r in runs.items()} for name, runs in results.items()}
    floor = rates.get("floor")
    floor_median = statistics.median(floor.values()) if floor else None
    order = [n for n in ("floor", "adbc", CONVERSION, TOTAL, *CONTENDERS[3:], "connector") if n in rates]
    print()
    print(
        f"{args.rows:,} rows, chunks of {args.chunk_size:,}, {args.repetitions} repetition(s), "
        f"{elapsed:.0f} s in all, load average {os.getloadavg()[0]:.2f}"
    )
    header = f"{'contender':<20} | {'rows/s per repetition':<36} | {'median':>10} | {'x floor':>7} | "
    header += f"{'x floor, paired by repetition':<42} | CPU s/M rows"
    print(header)
    print("-" * len(header))
    for name in order:
        per_rep = rates[name]
        median = statistics.median(per_rep.values())
        ratio = f"{median / floor_median:.3f}" if floor_median else ""
        paired = paired_text(paired_ratios(per_rep, floor)) if floor and name != "floor" else ""
        runs = results[name].values()
        cpu = statistics.median(r.cpu_s / r.rows * 1e6 for r in runs)
        listed = ", ".join(f"{v:,.0f}" for _rep, v in sorted(per_rep.items()))
        print(f"{name:<20} | {listed:<36} | {median:>10,.0f} | {ratio:>7} | {paired:<42} | {cpu:8.2f}")
    if "adbc" in rates and "connectorx-chunks" in rates:
        print(
            "adbc / connectorx-chunks (the same chunks to Arrow), paired by repetition: "
            + paired_text(paired_ratios(rates["adbc"], rates["connectorx-chunks"]))
        )
    for name in order:
        runs = list(results[name].values())
        if runs[0].parts:
            shares = ", ".join(
                f"{part} {statistics.median(r.parts[part] for r in runs):.2f} s" for part in runs[0].parts
            )
            print(f"{name}: of {statistics.median(r.seconds for r in runs):.2f} s (medians), {shares}")


if __name__ == "__main__":
    sys.exit(main())
