"""The SQL: what the enumerator and the readers ask the database. Blocking I/O."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluicegate.api import ConfigError
from sluicegate.api.options import int_option

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TableOptions:
    database: str
    table: str
    key: str = "id"
    keys_per_split: int = 1000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> TableOptions:
        known = {"database", "table", "key", "keys_per_split", "assigner", "assignment_grace_ms"}
        for option in options:
            if option not in known:
                raise ConfigError(option, f"unknown option of sqltable (known: {', '.join(sorted(known))})")
        if not options.get("database"):
            raise ConfigError("database", "is required: the path of the SQLite file")
        table = options.get("table", "")
        key = options.get("key", "id")
        for setting, name in (("table", table), ("key", key)):
            if not _NAME.fullmatch(name):  # names go into SQL text: identifiers only
                raise ConfigError(setting, f"must be a plain SQL identifier, got {name!r}")
        keys_per_split = int_option(options, "keys_per_split", 1000, minimum=1)
        return cls(options["database"], table, key, keys_per_split)

    def connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(f"file:{self.database}?mode=ro", uri=True, check_same_thread=False)
        connection.row_factory = sqlite3.Row
        return connection

    def key_bounds(self) -> tuple[int, int] | None:
        """The smallest and the largest key (None: the table is empty)."""
        with self.connect() as connection:
            low, high = connection.execute(f"SELECT MIN({self.key}), MAX({self.key}) FROM {self.table}").fetchone()
        return None if low is None else (int(low), int(high))

    def rows(self, connection: sqlite3.Connection, start: int, end: int, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` rows with ``start <= key < end``, in key order."""
        query = f"SELECT * FROM {self.table} WHERE {self.key} >= ? AND {self.key} < ? ORDER BY {self.key} LIMIT ?"
        return [dict(row) for row in connection.execute(query, (start, end, limit))]
