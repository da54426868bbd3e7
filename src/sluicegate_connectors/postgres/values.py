"""Column values: PostgreSQL's text form into Python (psycopg's loaders, the same types a
query gives), and Python values into what a record carries (JSON-ready, exact)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from psycopg.adapt import Transformer
from psycopg.pq import Format


class TextValues:
    """Turns pgoutput's text values of given type OIDs into Python values, as psycopg
    loads query results (arrays, json and every built-in type; an unknown type as text)."""

    def __init__(self) -> None:
        self._transformer = Transformer()
        self._loaders: dict[int, Any] = {}

    def load(self, type_oid: int, text: str) -> Any:
        loader = self._loaders.get(type_oid)
        if loader is None:
            loader = self._loaders[type_oid] = self._transformer.get_loader(type_oid, Format.TEXT)
        return loader.load(text.encode())


def record_value(value: Any) -> Any:
    """A column's Python value as a record carries it: JSON types as they are, numeric as
    its exact text, bytea as PostgreSQL's hex text (``\\x0aff``), times in ISO 8601,
    uuids as text, arrays element by element."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [record_value(v) for v in value]
    if isinstance(value, dict):
        return {k: record_value(v) for k, v in value.items()}
    return str(value)


def record_row(names: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    return {name: record_value(value) for name, value in zip(names, values, strict=True)}
