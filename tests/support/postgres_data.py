"""Tables, a writer and the oracle of the postgres connector's tests over real processes.

``database`` makes a database of its own with two tables filled (``items``: a bigint key
and a column of most types, some rows with out-of-line TOASTed text; ``orders``: a
composite key of varchar and int); ``Writer`` changes them in small transactions of every
kind; ``table_state`` and ``output_state`` are the oracle: the last row of each key in OUT
(by ``_lsn`` and ``_seq``, pre-images left out, a delete removing the key) must equal
``SELECT *`` of the table.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from kafka_data import COORDINATOR_TIMEOUTS, READER_TIMING, OutputReader, option_args
from postgres_server import PostgresServer
from processes import Proc, ProcessGroup

from sluicegate_connectors.postgres.values import record_row

ROWS_ENV = "SLUICEGATE_TEST_PG_ITEMS"
"""How many rows ``items`` starts with: 40,000 in the suite; the issue's proof at scale is
``SLUICEGATE_TEST_PG_ITEMS=1000000 pytest tests/integration/test_postgres_readers.py``."""
READERS = 3
ITEMS = int(os.environ.get(ROWS_ENV, "40000"))
ORDERS = 8_000
CHUNK = 700 if ITEMS <= 100_000 else 8_192
TABLES = {"public.items": ("id",), "public.orders": ("customer", "n")}
META = ("_change_type", "_lsn", "_seq", "_commit_timestamp", "_table")


@pytest.fixture
def database(postgres: PostgresServer, unique_source: str) -> Iterator[str]:
    """A database of its own, with the two tables filled (the test stops its processes before
    it is dropped: a slot a reader streams cannot be dropped)."""
    name = unique_source.replace("-", "_").replace(".", "_").lower()[:40]
    with postgres.connect() as admin:
        admin.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(conninfo_of(postgres, name), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, name text, price numeric(12,2), ok boolean, tags text[],"
            " doc jsonb, blob bytea, seen timestamptz, day date, uid uuid, big text)"
        )
        conn.execute(
            "CREATE TABLE orders (customer varchar(20), n int, total numeric, note text, PRIMARY KEY (customer, n))"
        )
        for table in ("items", "orders"):
            conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        conn.execute(
            "INSERT INTO items SELECT g, 'item ' || g, g * 0.25, g %% 2 = 0, ARRAY['t' || (g %% 7), NULL],"
            " jsonb_build_object('g', g, 'even', g %% 2 = 0), decode(lpad(to_hex(g), 8, '0'), 'hex'),"
            " '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 minute', '2024-01-01'::date + (g %% 365),"
            " md5(g::text)::uuid, CASE WHEN g %% 500 = 0 THEN (SELECT string_agg(md5(g::text || i), '')"
            " FROM generate_series(1, 300) i) END FROM generate_series(1, %s) g",
            (ITEMS,),
        )
        conn.execute(
            "INSERT INTO orders SELECT chr(65 + g %% 26) || chr(97 + (g / 26) %% 26) || 'é', g, g * 1.5, NULL"
            " FROM generate_series(1, %s) g",
            (ORDERS,),
        )
    yield name
    with postgres.connect() as admin:
        for (slot,) in admin.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)):
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


class Writer(threading.Thread):
    """Small transactions of every kind, all along, until stopped."""

    def __init__(self, conninfo: str) -> None:
        super().__init__(daemon=True)
        self._conninfo = conninfo
        self._stopping = threading.Event()
        self.transactions = 0
        self.reconnects = 0
        self._next_id = ITEMS + 1
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(7)
        try:
            while not self._stopping.is_set():
                try:
                    self._write(rng)
                except psycopg.OperationalError:  # the server restarted: connect again
                    self.reconnects += 1
                    time.sleep(0.2)
                except psycopg.IntegrityError:  # a new id whose commit was lost to a restart yet made
                    self._next_id += 1_000
        except BaseException as exc:
            self.error = exc

    def _write(self, rng: random.Random) -> None:
        with psycopg.connect(self._conninfo, autocommit=True) as conn:
            while not self._stopping.is_set():
                with conn.transaction():
                    next_id = self._one(conn, rng, self._next_id)
                self._next_id = next_id  # only once committed: an id of a lost transaction is free
                self.transactions += 1
                time.sleep(0.003)

    def _one(self, conn: psycopg.Connection[Any], rng: random.Random, next_id: int) -> int:
        kind = rng.randrange(8)
        some = rng.randrange(1, next_id)
        if kind == 0:
            conn.execute("INSERT INTO items (id, name, tags, doc) VALUES (%s, 'new', '{}', '[1]')", (next_id,))
            return next_id + 1
        if kind == 1:
            conn.execute("DELETE FROM items WHERE id = %s", (some,))
        elif kind == 2:  # a large value left as it is: the post-image must still carry it
            big = rng.randrange(1, ITEMS // 500) * 500
            conn.execute("UPDATE items SET price = price + 1 WHERE id = %s", (big,))
        elif kind == 3:  # one key twice in one transaction
            conn.execute("UPDATE items SET name = 'first' WHERE id = %s", (some,))
            conn.execute("UPDATE items SET name = 'second', ok = NOT ok WHERE id = %s", (some,))
        elif kind == 4:  # a key changed: a delete of the old key and an insert of the new one
            conn.execute("UPDATE items SET id = %s WHERE id = %s", (next_id, some))
            return next_id + 1
        elif kind == 5:
            conn.execute(
                "UPDATE orders SET total = total + 1, note = 'n' || %s WHERE customer = %s AND n = %s",
                (some, f"{chr(65 + some % 26)}{chr(97 + (some // 26) % 26)}é", some % ORDERS),
            )
        elif kind == 6:
            conn.execute("INSERT INTO orders VALUES (%s, %s, 1, 'later') ON CONFLICT DO NOTHING", (f"Zz{some}", some))
        else:
            conn.execute("UPDATE items SET seen = now(), tags = tags || 'x'::text WHERE id = %s", (some,))
        return next_id

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)
        assert self.error is None, f"the writer failed: {self.error!r}"


def table_state(conninfo: str) -> dict[tuple[str, tuple[Any, ...]], dict[str, Any]]:
    state = {}
    with psycopg.connect(conninfo) as conn:
        for table, key in TABLES.items():
            cursor = conn.execute(f"SELECT * FROM {table}")
            names = [c.name for c in cursor.description or []]
            for row in cursor:
                value = record_row(names, row)
                state[(table, tuple(value[k] for k in key))] = value
    return state


def output_state(rows: list[dict[str, Any]]) -> dict[tuple[str, tuple[Any, ...]], dict[str, Any]]:
    last: dict[tuple[str, tuple[Any, ...]], dict[str, Any]] = {}
    for row in rows:
        value = row["value"]
        if value["_change_type"] == "update_preimage":
            continue
        key = (value["_table"], tuple(value[k] for k in TABLES[value["_table"]]))
        known = last.get(key)
        if known is None or (value["_lsn"], value["_seq"]) >= (known["_lsn"], known["_seq"]):
            last[key] = value
    return {
        k: {c: v for c, v in value.items() if c not in META}
        for k, value in last.items()
        if value["_change_type"] != "delete"
    }


def streamed(row: dict[str, Any]) -> bool:
    return bool(row["split_id"] == "changes")


def held_twice(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Streamed changes that committed before the point of their key's snapshot row: the
    snapshot holds them already, so the stream must leave them out."""
    points = {}
    for row in rows:
        value = row["value"]
        if row["split_id"] != "changes":
            points[(value["_table"], tuple(value[k] for k in TABLES[value["_table"]]))] = value["_lsn"]
    held = []
    for row in rows:
        value = row["value"]
        key = (value["_table"], tuple(value[k] for k in TABLES[value["_table"]]))
        if row["split_id"] == "changes" and key in points and value["_lsn"] < points[key]:
            held.append((*key, value["_lsn"], points[key]))
    return held


def wait_for_table_state(output: OutputReader, conninfo: str, timeout_s: float) -> dict[Any, Any]:
    """The tables' state now (the writer stopped), once OUT shows it; fails naming what differs."""
    expected = table_state(conninfo)
    deadline = time.monotonic() + timeout_s
    while problems := differences(expected, output_state(output.rows)):
        assert time.monotonic() < deadline, "OUT never showed the tables' state:\n" + "\n".join(problems)
        if not output.drain():
            time.sleep(0.3)
    return expected


def written_twice(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Changes (a key's change type at one ``_lsn`` and ``_seq``) in OUT more than once."""
    changes = Counter(
        (v["_table"], *(v[k] for k in TABLES[v["_table"]]), v["_lsn"], v["_seq"], v["_change_type"])
        for v in (r["value"] for r in rows)
    )
    return [c for c, n in changes.items() if n > 1]


def differences(expected: dict[Any, Any], found: dict[Any, Any]) -> list[str]:
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected]
    wrong = [k for k in expected if k in found and expected[k] != found[k]]
    problems = []
    if missing:
        problems.append(f"{len(missing)} keys missing, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} keys that are not in the table, e.g. {extra[:3]}")
    if wrong:
        problems.append(f"{len(wrong)} keys differ, e.g. {[(expected[k], found[k]) for k in wrong[:2]]}")
    return problems


def coordinator(procs: ProcessGroup, source: str, options: dict[str, str]) -> Proc:
    args = [
        *("coordinator", "--source", source, "--connector", "postgres", "--max-parallelism", str(READERS)),
        *option_args(options),
        *COORDINATOR_TIMEOUTS,
    ]
    proc = procs.start(f"coordinator-{len(procs.procs)}", args)
    proc.wait_for_log("is serving", timeout_s=90)
    return proc


def reader(procs: ProcessGroup, source: str, subtask: int, options: dict[str, str], out: str, *extra: str) -> Proc:
    """A reader process; ``extra``: more flags (``--max-parallelism N``: it coordinates the
    source itself where no coordinator is deployed)."""
    args = [
        *("reader", "--source", source, "--subtask", str(subtask), "--connector", "postgres", *extra),
        *("--output", f"kafka:{out}", "--output-format", "envelope", "--max-batch", "500"),
        *option_args(options),
        *READER_TIMING,
    ]
    return procs.start(f"reader-{subtask}-{len(procs.procs)}", args)


def conninfo_of(postgres: PostgresServer, database: str) -> str:
    return postgres.conninfo.replace("dbname=postgres", f"dbname={database}")


def source_options(postgres: PostgresServer, database: str, **more: str) -> dict[str, str]:
    """The connector options that read both tables of ``database``."""
    return {
        "url": f"jdbc:postgresql://127.0.0.1:{postgres.port}/{database}",
        "user": "postgres",
        "dbtable": "items,orders",
        "chunk_size": str(CHUNK),
        **more,
    }
