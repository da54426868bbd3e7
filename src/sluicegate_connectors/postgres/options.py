"""The options of the ``postgres`` connector, parsed once and checked at start.

Names follow Spark's JDBC source where they mean the same (``url``, ``dbtable``,
``user``, ``password``, ``fetchsize``); the change-capture ones follow Flink CDC's
(``slot``, ``publication``, ``startup_mode``, ``chunk_size``). docs/postgres.md is
the guide. ``password`` is never logged or shown.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sluicegate.api.assigners import ASSIGNMENT_OPTIONS, SplitAssigner, assigner_from_options
from sluicegate.api.errors import ConfigError
from sluicegate.api.options import choice_option, int_option, unknown_option

STARTUP_MODES = ("initial", "snapshot", "latest-offset")
"""``initial``: every row of the tables, then their changes (Flink CDC's default);
``snapshot``: the rows only (a bounded source); ``latest-offset``: changes from the
moment the slot is created."""
DEFAULT_CHUNK_SIZE = 8_192
DEFAULT_FETCH_SIZE = 10_000
DEFAULT_CONNECT_TIMEOUT_S = 15
LOCAL = ("user", "password", "fetchsize", "connect_timeout", *ASSIGNMENT_OPTIONS)
KNOWN = {"url", "dbtable", "slot", "publication", "startup_mode", "chunk_size", *LOCAL}
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TABLE = re.compile(r"^(?:(?P<schema>[A-Za-z_][A-Za-z0-9_$]*)\.)?(?P<name>[A-Za-z_][A-Za-z0-9_$]*)$")


@dataclass(frozen=True)
class PostgresOptions:
    conninfo: str
    """A libpq connection string (``url`` given as ``jdbc:postgresql://`` or ``postgresql://``)."""
    tables: tuple[str, ...]
    """``schema.table``, in the order given."""
    slot: str
    publication: str
    startup_mode: str = "initial"
    chunk_size: int = DEFAULT_CHUNK_SIZE
    fetch_size: int = DEFAULT_FETCH_SIZE
    connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S
    assigner: Callable[[], SplitAssigner[Any]] | None = None

    @property
    def bounded(self) -> bool:
        return self.startup_mode == "snapshot"

    @property
    def snapshots(self) -> bool:
        return self.startup_mode != "latest-offset"

    @property
    def streams(self) -> bool:
        return self.startup_mode != "snapshot"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> PostgresOptions:
        for key in options:
            if key not in KNOWN:
                raise unknown_option(key, KNOWN, "the postgres connector")
        if "url" not in options:
            raise ConfigError("url", "is required (e.g. jdbc:postgresql://localhost:5432/shop)")
        if "dbtable" not in options:
            raise ConfigError("dbtable", "is required: a table, or several separated by commas (schema.table)")
        tables = parse_tables(options["dbtable"])
        default_name = "sluicegate_" + hashlib.sha256(",".join(tables).encode()).hexdigest()[:10]
        return cls(
            conninfo=conninfo_of(options["url"], options.get("user"), options.get("password")),
            tables=tables,
            slot=_name(options, "slot", default_name),
            publication=_name(options, "publication", default_name),
            startup_mode=choice_option(options, "startup_mode", STARTUP_MODES),
            chunk_size=int_option(options, "chunk_size", DEFAULT_CHUNK_SIZE, 1),
            fetch_size=int_option(options, "fetchsize", DEFAULT_FETCH_SIZE, 1),
            connect_timeout_s=int_option(options, "connect_timeout", DEFAULT_CONNECT_TIMEOUT_S, 1),
            assigner=assigner_from_options(options, "pull"),
        )


def parse_tables(text: str) -> tuple[str, ...]:
    tables: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        match = _TABLE.match(part)
        if match is None:
            raise ConfigError("dbtable", f"{part!r} is not a table name (schema.table, letters, digits and _)")
        qualified = f"{match.group('schema') or 'public'}.{match.group('name')}"
        if qualified in tables:
            raise ConfigError("dbtable", f"{qualified} is named twice")
        tables.append(qualified)
    return tuple(tables)


def conninfo_of(url: str, user: str | None, password: str | None) -> str:
    """A libpq connection URL from Spark's JDBC form (``jdbc:postgresql://host:port/db?k=v``)
    or libpq's own (``postgresql://...``), with ``user`` and ``password`` added."""
    raw = url.strip().removeprefix("jdbc:")
    parts = urlsplit(raw)
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
        raise ConfigError("url", f"must be jdbc:postgresql://host:port/database, got {url!r}")
    extra = []
    if user is not None:
        extra.append(f"user={_quoted(user)}")
    if password is not None:
        extra.append(f"password={_quoted(password)}")
    port = f" port={parts.port}" if parts.port else ""
    database = parts.path.lstrip("/") or "postgres"
    query = " ".join(_jdbc_parameter(p) for p in parts.query.split("&") if p)
    words = [f"host={_quoted(parts.hostname)}{port}", f"dbname={_quoted(database)}", query, *extra]
    if parts.username and user is None:
        words.append(f"user={_quoted(parts.username)}")
    if parts.password and password is None:
        words.append(f"password={_quoted(parts.password)}")
    return " ".join(w for w in words if w)


def _jdbc_parameter(pair: str) -> str:
    key, _, value = pair.partition("=")
    return f"{key}={_quoted(value)}"


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _name(options: Mapping[str, str], key: str, default: str) -> str:
    value = options.get(key, default).strip()
    if not _NAME.match(value):
        raise ConfigError(key, f"must be lower-case letters, digits and _ (at most 63), got {value!r}")
    return value
