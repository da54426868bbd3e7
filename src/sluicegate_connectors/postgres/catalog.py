"""What the connector asks of the database before it reads: the tables' columns and primary
keys, whether their replica identity lets an update carry its old row, and the
publication and slot the changes come through. Each check fails naming the table and
the statement that fixes it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql

from sluicegate.api.errors import SourceError

from .lsn import parse_lsn
from .options import PostgresOptions

log = logging.getLogger("sluicegate.connectors.postgres")

TEXT_TYPES = frozenset({25, 1043, 1042})
"""text, varchar, char: compared with the "C" collation (byte order, which is Python's
order of the same strings) wherever chunks are cut or read."""
KEY_TYPES = TEXT_TYPES | frozenset({20, 21, 23, 26, 1700, 2950, 1082, 1114, 1184, 17, 16})
"""Key types whose order in Python (as psycopg loads them) is PostgreSQL's: integers,
oid, numeric, uuid, date, timestamp(tz), bytea, boolean and the text types."""


class DatabaseUnreachable(SourceError):
    """The server did not answer: worth trying again, unlike the other SourceErrors here."""


@dataclass(frozen=True)
class TableInfo:
    name: str
    """``schema.table``"""
    columns: tuple[str, ...]
    type_oids: tuple[int, ...]
    type_names: tuple[str, ...]
    key: tuple[str, ...]
    """The primary key's columns, in the key's order."""

    @property
    def identifier(self) -> sql.Composable:
        return table_identifier(self.name)

    def key_types(self) -> tuple[str, ...]:
        return tuple(self.type_names[self.columns.index(k)] for k in self.key)

    def key_oids(self) -> tuple[int, ...]:
        return tuple(self.type_oids[self.columns.index(k)] for k in self.key)

    def key_terms(self) -> list[sql.Composable]:
        """The key's columns as chunks compare them (text in the "C" collation)."""
        return [
            sql.SQL('{} COLLATE "C"').format(sql.Identifier(k)) if oid in TEXT_TYPES else sql.Identifier(k)
            for k, oid in zip(self.key, self.key_oids(), strict=True)
        ]

    def key_values(self) -> list[sql.Composable]:
        """Placeholders for a key given as text, cast to the key's types."""
        terms: list[sql.Composable] = []
        for type_name, oid in zip(self.key_types(), self.key_oids(), strict=True):
            collate = ' COLLATE "C"' if oid in TEXT_TYPES else ""
            terms.append(sql.SQL("%s::{}{}").format(sql.SQL(type_name), sql.SQL(collate)))
        return terms


def table_identifier(name: str) -> sql.Identifier:
    """``schema.table`` quoted for SQL."""
    schema, _, table = name.partition(".")
    return sql.Identifier(schema, table)


def connect(options: PostgresOptions, replication: bool = False) -> psycopg.Connection[tuple[object, ...]]:
    """A connection in autocommit; SourceError naming ``url`` if the server does not answer."""
    conninfo = options.conninfo + (" replication=database" if replication else "")
    try:
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=options.connect_timeout_s)
    except psycopg.OperationalError as exc:
        raise DatabaseUnreachable(f"cannot connect to PostgreSQL (`url`): {str(exc).strip()}") from None


def table_info(conn: psycopg.Connection[tuple[object, ...]], name: str) -> TableInfo:
    """The table's columns and key; SourceError naming it if it is missing, has no primary
    key, a key type chunks cannot be cut by, or a replica identity other than FULL."""
    row = conn.execute("SELECT oid, relreplident FROM pg_class WHERE oid = to_regclass(%s)", (name,)).fetchone()
    if row is None:
        raise SourceError(f"table {name} (`dbtable`) does not exist")
    oid, identity = row
    columns = conn.execute(
        "SELECT attname, atttypid, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid,),
    ).fetchall()
    key = [
        str(r[0])
        for r in conn.execute(
            "SELECT a.attname FROM pg_index i"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indrelid = %s AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)",
            (oid,),
        ).fetchall()
    ]
    info = TableInfo(
        name,
        tuple(str(c[0]) for c in columns),
        tuple(int(str(c[1])) for c in columns),
        tuple(str(c[2]) for c in columns),
        tuple(key),
    )
    _check_table(info, str(identity))
    return info


def _check_table(info: TableInfo, identity: str) -> None:
    if not info.key:
        raise SourceError(
            f"table {info.name} has no primary key: its rows cannot be cut into chunks or its changes told apart "
            f"(add one: ALTER TABLE {info.name} ADD PRIMARY KEY (...))"
        )
    odd = [
        f"{k} ({t})"
        for k, t, oid in zip(info.key, info.key_types(), info.key_oids(), strict=True)
        if oid not in KEY_TYPES
    ]
    if odd:
        raise SourceError(f"table {info.name}: chunks cannot be cut by primary key column {', '.join(odd)}")
    if identity != "f":
        kind = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}.get(identity, identity)
        raise SourceError(
            f"table {info.name} has REPLICA IDENTITY {kind}: an update would carry neither its old row "
            "(update_preimage) nor the old value of a large column it did not change; "
            f"run ALTER TABLE {info.name} REPLICA IDENTITY FULL"
        )


def ensure_publication(conn: psycopg.Connection[tuple[object, ...]], options: PostgresOptions) -> None:
    """The publication, created for the tables if missing; one that exists must publish them."""
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (options.publication,)).fetchone()
    tables = [table_identifier(t) for t in options.tables]
    if exists is None:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(options.publication), sql.SQL(", ").join(tables)
            )
        )
        log.info("created publication %s for %s", options.publication, ", ".join(options.tables))
        return
    published = {
        f"{r[0]}.{r[1]}"
        for r in conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (options.publication,)
        )
    }
    missing = [t for t in options.tables if t not in published]
    if missing:
        raise SourceError(
            f"publication {options.publication} (`publication`) does not publish {', '.join(missing)}: "
            f"run ALTER PUBLICATION {options.publication} ADD TABLE {', '.join(missing)}"
        )


def slot_position(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> int | None:
    """The slot's confirmed position; None if there is no such slot. SourceError if it is not a
    pgoutput slot of this database."""
    row = conn.execute(
        "SELECT plugin, database = current_database(), confirmed_flush_lsn::text"
        " FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    plugin, here, confirmed = row
    if plugin != "pgoutput" or not here:
        raise SourceError(f"replication slot {slot} (`slot`) is not a pgoutput slot of this database (plugin {plugin})")
    return parse_lsn(str(confirmed))


def create_slot(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> int:
    """A new logical slot; its consistent point (changes committed from there on are streamed)."""
    row = conn.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,)).fetchone()
    assert row is not None
    log.info("created replication slot %s at %s", slot, row[0])
    return parse_lsn(str(row[0]))
