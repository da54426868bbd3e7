"""Reading a table's rows: cutting it into chunks, and reading a chunk exactly, without locks.

A chunk is read in the snapshot that a temporary replication slot exports when it is
created. That snapshot holds exactly the transactions that committed before the slot's
consistent point, so the point is both the low and the high watermark of the read: a
change is one the chunk already holds if and only if its transaction committed before it,
and there is nothing between the two to reconcile (Flink CDC takes a low and a high WAL
position around the read and replays the changes between them into the chunk). The slot
is dropped with its connection, also when the reader is killed.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from sluicegate.api.errors import SourceError

from .catalog import TableInfo, connect
from .lsn import parse_lsn
from .options import PostgresOptions
from .split import Key

_slot_numbers = itertools.count()


@dataclass(frozen=True)
class ChunkRows:
    point: int
    """The WAL position the rows are as of."""
    rows: list[tuple[Any, ...]]
    """The table's columns, in key order."""
    keys: list[Key]
    """Each row's key as text."""


def chunk_bounds(conn: psycopg.Connection[tuple[object, ...]], table: TableInfo, chunk_size: int) -> Iterator[Key]:
    """Every ``chunk_size``-th key of the table in key order, read in one pass (a cursor on
    the server): the upper bounds of all chunks but the last, which is open."""
    keys = sql.SQL(", ").join(_key_text_columns(table))
    query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
        keys, table.identifier, sql.SQL(", ").join(table.key_terms())
    )
    with conn.transaction(), conn.cursor(name="sluicegate_chunk_bounds") as cursor:
        cursor.itersize = 50_000
        cursor.execute(query)
        for n, row in enumerate(cursor, start=1):
            if n % chunk_size == 0:
                yield tuple(str(v) for v in row)


def read_chunk(options: PostgresOptions, table: TableInfo, lo: Key | None, hi: Key | None) -> ChunkRows:
    """The rows with ``lo < key <= hi`` (None: unbounded), in key order, as of the consistent
    point of a temporary slot created for the read."""
    with connect(options, replication=True) as exporter, connect(options) as conn:
        point, snapshot = _export_snapshot(exporter)
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            query, params = _chunk_query(table, lo, hi)
            rows: list[tuple[Any, ...]] = []
            keys: list[Key] = []
            width = len(table.columns)
            with conn.cursor(
                binary=True
            ) as cursor:  # binary: an eighth less CPU a row (benchmarks/postgres_snapshot.py)
                cursor.execute(query, params)
                for row in cursor:
                    rows.append(tuple(row[:width]))
                    keys.append(tuple(str(v) for v in row[width:]))
    return ChunkRows(point, rows, keys)


def _export_snapshot(exporter: psycopg.Connection[tuple[object, ...]]) -> tuple[int, str]:
    name = f"sluicegate_chunk_{os.getpid()}_{next(_slot_numbers)}"
    result = exporter.pgconn.exec_(
        f"CREATE_REPLICATION_SLOT {name} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')".encode()
    )
    if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
        message = (result.error_message or b"").decode(errors="replace").strip()
        raise SourceError(f"cannot create a temporary replication slot to read a chunk: {message}")
    point, snapshot = result.get_value(0, 1), result.get_value(0, 2)
    assert point is not None and snapshot is not None
    return parse_lsn(point.decode()), snapshot.decode()


def _chunk_query(table: TableInfo, lo: Key | None, hi: Key | None) -> tuple[sql.Composed, list[str]]:
    terms = sql.SQL(", ").join(table.key_terms())
    values = sql.SQL(", ").join(table.key_values())
    where: list[sql.Composable] = []
    params: list[str] = []
    if lo is not None:
        where.append(sql.SQL("({}) > ({})").format(terms, values))
        params += lo
    if hi is not None:
        where.append(sql.SQL("({}) <= ({})").format(terms, values))
        params += hi
    condition: sql.Composable = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL("")
    columns = sql.SQL(", ").join([sql.Identifier(c) for c in table.columns] + _key_text_columns(table))
    query = sql.SQL("SELECT {} FROM {}{} ORDER BY {}").format(columns, table.identifier, condition, terms)
    return query, params


def _key_text_columns(table: TableInfo) -> list[sql.Composable]:
    """The key's columns as text, named apart: an output column named as the key column would
    be what ``ORDER BY`` sorts (as text: '10' before '9')."""
    return [
        sql.SQL("{}::text AS {}").format(sql.Identifier(k), sql.Identifier(f"_sluicegate_key_{n}"))
        for n, k in enumerate(table.key)
    ]
