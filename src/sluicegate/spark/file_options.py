"""Spark's file source options, read with Spark's meaning (issue 19 item 5): a
``readStream.format("parquet").schema(s).load(path)`` query becomes
``readStream.format("sluicegate").option("format", "parquet").schema(s).load(path)``.

``read_spark_file_options`` takes the options of a query that reads the ``files``
connector by Spark's names (lower-cased keys, as Spark hands them over; ``path`` is what
``load(path)`` gives) and returns the connector's own options, the trigger limit and
notes to log once. The reference is Spark's Structured Streaming guide ("File source")
and its generic file source and CSV options; docs/files.md's migration table says
where sluicegate differs and why. Every Spark file option is either read with its
meaning or refused by name: none is ignored in silence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import int_option
from sluicegate.spark.kafka_options import duration_ms

CONNECTOR = "files"
STREAM_DISCOVERY_INTERVAL_MS = 1_000
"""How often a Spark-style files stream lists its path (Spark lists it for every batch)."""

FORMATS = {"parquet": "parquet", "csv": "csv", "json": "jsonl", "jsonl": "jsonl"}
"""Spark's ``format`` -> the connector's (Spark's json reads JSON Lines, one object a line)."""

CSV = {
    "header": "csv_header",
    "sep": "csv_delimiter",
    "delimiter": "csv_delimiter",
    "quote": "csv_quote",
    "escape": "csv_escape",
    "nullValue": "csv_null_value",
    "encoding": "csv_encoding",
    "charset": "csv_encoding",
}
"""Spark's CSV options -> the connector's."""

ACCEPTED_AS_DEFAULT = {"fileNameOnly": "false", "cleanSource": "off", "mergeSchema": "false", "inferSchema": "true"}
"""Spark options whose value here can only be this one: accepted with it, refused with
another (``REFUSED`` says why)."""

REFUSED = {
    "fileNameOnly": "files are told apart by their whole path",
    "cleanSource": "processed files are not archived or deleted yet: clean them up outside the query",
    "sourceArchiveDir": "processed files are not archived yet (cleanSource)",
    "maxBytesPerTrigger": "not supported yet: limit batches with maxFilesPerTrigger or maxRecordsPerTrigger",
    "modifiedBefore": "not supported: Spark reads it in batch queries only; filter on a column instead",
    "modifiedAfter": "not supported: Spark reads it in batch queries only; filter on a column instead",
    "mergeSchema": "every file is read into the query's one schema: give the schema (.schema(...))",
    "inferSchema": "CSV column types are inferred from the first file; give .schema(...) for others",
    "ignoreMissingFiles": "a file that goes away is a bad file: set ignoreCorruptFiles=true to skip such files",
    "multiLine": "JSON and CSV records are one a line",
    "mode": "bad records fail their file: ignoreCorruptFiles=true skips the file",
    "comment": "not supported for CSV here",
    "dateFormat": "dates are parsed as ISO 8601 (yyyy-MM-dd)",
    "timestampFormat": "timestamps are parsed as ISO 8601",
}
"""Spark options with no equivalent here: refused, naming them (with ``ACCEPTED_AS_DEFAULT``,
only another value than that one)."""

SPARK_NAMES = (
    "path",
    "format",
    "maxFilesPerTrigger",
    "latestFirst",
    "maxFileAge",
    "pathGlobFilter",
    "recursiveFileLookup",
    "ignoreCorruptFiles",
    *CSV,
    *REFUSED,
)
"""Every Spark file source option this module reads."""


@dataclass(frozen=True)
class SparkFileOptions:
    """What a query's Spark file options mean here."""

    connector_options: Mapping[str, str]
    max_files_per_trigger: int | None = None
    notes: tuple[str, ...] = ()


def names_a_path(opts: Mapping[str, str]) -> bool:
    """Whether a query reads files Spark's way: ``load(path)`` (or ``option("path", ...)``)."""
    return "path" in opts


def is_spark_file_option(key: str) -> bool:
    return key in {n.lower() for n in SPARK_NAMES}


def read_spark_file_options(
    opts: Mapping[str, str], legacy: Mapping[str, str], schema_ddl: str | None
) -> SparkFileOptions:
    """``opts``: the query's options, lower-cased keys; ``legacy``: its ``option.*``
    connector options; ``schema_ddl``: the query's schema as DDL (``.schema(...)``, or the
    one the source inferred), which becomes the connector's ``schema``. Raises ConfigError
    naming an option."""
    given = {name: opts[name.lower()] for name in SPARK_NAMES if name.lower() in opts}
    connector = dict(legacy)
    if "path" in connector:
        raise ConfigError("path", "and option.path both name what to read: keep load(path)")
    connector["path"] = given["path"]
    for name, why in REFUSED.items():
        if name in given and given[name].strip().lower() != ACCEPTED_AS_DEFAULT.get(name, "").lower():
            raise ConfigError(name, f"is not supported here ({why})")
    fmt = given.get("format", "parquet").strip().lower()  # Spark's spark.sql.sources.default
    if fmt not in FORMATS:
        raise ConfigError("format", f"must be parquet, csv or json (JSON Lines), got {given['format']!r}")
    connector["format"] = FORMATS[fmt]
    if schema_ddl and "schema" not in connector:
        connector["schema"] = schema_ddl
    # Spark's file stream lists the directory again for every batch: a stream reads the files
    # that come, not only those present at its start (a batch query is planned once anyway)
    connector.setdefault("discovery_interval_ms", str(STREAM_DISCOVERY_INTERVAL_MS))
    connector["order"] = "latest_first" if _flag(given, "latestFirst") else "modified"  # Spark's: oldest first
    connector["glob"] = _glob(given)
    if "maxFileAge" in given:
        connector["max_file_age_ms"] = str(duration_ms("maxFileAge", given["maxFileAge"]))
    if "ignoreCorruptFiles" in given:
        connector["on_bad_file"] = "skip" if _flag(given, "ignoreCorruptFiles") else "fail"
    for spark_name, ours in CSV.items():
        if spark_name in given:
            connector[ours] = given[spark_name]
    if connector["format"] == "csv":
        connector.setdefault("csv_header", "false")  # Spark's default: the first row is data
    max_files = int_option(given, "maxFilesPerTrigger", None, 1) if "maxFilesPerTrigger" in given else None
    notes = []
    if "maxFileAge" in given:
        notes.append(
            "maxFileAge counts from the query's clock, not from the newest file as in Spark, and applies "
            "to the first batch too"
        )
    return SparkFileOptions(connector, max_files, tuple(notes))


def _flag(given: Mapping[str, str], name: str) -> bool:
    value = given.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(name, f"must be true or false, got {given[name]!r}")
    return value == "true"


def _glob(given: Mapping[str, str]) -> str:
    """Spark reads the files directly under ``path`` (every level with
    ``recursiveFileLookup``) whose names match ``pathGlobFilter``."""
    name = given.get("pathGlobFilter", "*").strip() or "*"
    if "/" in name:
        raise ConfigError("pathGlobFilter", f"matches file names, not paths: {name!r} has a /")
    return f"**/{name}" if _flag(given, "recursiveFileLookup") else name


def schema_ddl(schema: Any) -> str:
    """A Spark StructType as the connector's DDL (``name TYPE, ...``; its parser names a type
    it does not read)."""
    return ", ".join(f"`{field.name}` {field.dataType.simpleString()}" for field in schema.fields)


def derived_source_name(path: str) -> str:
    """A source name from the path read, the same on every restart."""
    return f"files-{hashlib.sha256(path.strip().encode()).hexdigest()[:12]}"
