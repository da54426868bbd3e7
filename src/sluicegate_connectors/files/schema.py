"""The rows' schema: a DDL string (``id BIGINT, name STRING, ts TIMESTAMP``) in Arrow,
and the rule that makes a file's table conform to it.

Every file is read into the same schema: its columns are picked by name and cast to
the schema's types. A file without one of the columns, or whose values do not cast,
does not match the schema (a bad file, see ``badfiles.py``).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from sluicegate.api.errors import ConfigError

_SIMPLE: dict[str, Any] = {
    "string": pa.string(),
    "varchar": pa.string(),
    "text": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "bool": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


class SchemaMismatch(ValueError):
    """A file's columns are not the schema's."""


def parse_ddl(ddl: str, setting: str = "schema") -> pa.Schema:
    """``name TYPE, ...`` (Spark's simple types and DECIMAL(p,s)) as an Arrow schema."""
    fields = []
    for part in _split_top_level(ddl):
        words = part.strip().split(None, 1)
        if len(words) != 2:
            raise ConfigError(setting, f"expected 'name TYPE' in {part.strip()!r}")
        name, type_text = words[0].strip("`"), words[1].strip().lower()
        decimal = _DECIMAL.match(type_text)
        if decimal:
            arrow_type = pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
        elif type_text in _SIMPLE:
            arrow_type = _SIMPLE[type_text]
        else:
            known = ", ".join(sorted(_SIMPLE))
            raise ConfigError(setting, f"unknown type {words[1]!r} of column {name!r} (known: {known}, decimal(p,s))")
        fields.append(pa.field(name, arrow_type))
    if not fields:
        raise ConfigError(setting, "names no column")
    if len({f.name for f in fields}) != len(fields):
        raise ConfigError(setting, "names a column twice")
    return pa.schema(fields)


def _split_top_level(ddl: str) -> list[str]:
    """Split at commas outside parentheses (DECIMAL(10, 2) holds one)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in ddl:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += (char == "(") - (char == ")")
        current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def conform(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch | pa.Table:
    """``table`` with exactly the schema's columns, in its order and types; SchemaMismatch
    names the column that is missing or does not cast."""
    if table.schema.equals(schema):
        return table
    columns = []
    for field in schema:
        index = table.schema.get_field_index(field.name)
        if index < 0:
            raise SchemaMismatch(f"column {field.name!r} is missing (the file has {table.schema.names})")
        column = table.column(index)
        if not column.type.equals(field.type):
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatch(
                    f"column {field.name!r} ({column.type}) does not cast to {field.type}: {exc}"
                ) from None
        columns.append(column)
    if isinstance(table, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays(columns, schema=schema)
