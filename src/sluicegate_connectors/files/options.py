"""The options of the ``files`` connector, parsed once and checked at start.

Every bad or unknown option raises ConfigError naming it. Options ``storage.<name>``
go to the fsspec filesystem as keyword arguments (for s3fs: ``storage.endpoint_url``,
``storage.key``, ``storage.secret``, ...); their values are never logged or shown.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sluicegate.api.assigners import (
    ASSIGNER_OPTION,
    GRACE_OPTION,
    REBALANCE_OPTION,
    PullAssigner,
    SplitAssigner,
    assigner_from_options,
)
from sluicegate.api.errors import ConfigError
from sluicegate.api.options import choice_option, int_option, unknown_option

from .schema import parse_ddl

STORAGE_PREFIX = "storage."
FORMATS = ("parquet", "csv", "jsonl")
EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024
BadFilePolicy = Literal["fail", "skip"]
ORDERS = ("path", "modified", "latest_first")
"""How the files one listing finds are queued: by path, by modification time oldest
first (Spark's file source), or newest first (Spark's ``latestFirst``)."""


@dataclass(frozen=True)
class CsvOptions:
    """How CSV files are parsed (pyarrow.csv): ``header`` true (the connector's default) reads
    column names from the first row; false reads every row as data, the columns named by
    the schema (given) or ``_c0``, ``_c1`` ... (inferred), as Spark's CSV reader names them."""

    header: bool = True
    delimiter: str = ","
    quote: str = '"'
    escape: str | None = None
    null_value: str | None = None
    """A field equal to this is null (any type); None: pyarrow's defaults (empty and NULL-like
    fields are null for non-string columns)."""
    encoding: str = "utf8"


KNOWN = {
    "path",
    "glob",
    "format",
    "schema",
    "event_time_column",
    "discovery_interval_ms",
    "max_file_age_ms",
    "split_size_bytes",
    "on_bad_file",
    "missing_path",
    "order",
    "csv_header",
    "csv_delimiter",
    "csv_quote",
    "csv_escape",
    "csv_null_value",
    "csv_encoding",
    ASSIGNER_OPTION,
    GRACE_OPTION,
    REBALANCE_OPTION,
}


@dataclass(frozen=True)
class FileOptions:
    path: str
    """A local directory or an fsspec URL (``file://``, ``s3://bucket/prefix``, ...)."""
    glob: str = "**/*"
    format: str | None = None
    """``parquet``, ``csv`` or ``jsonl``; None: each file's by its extension."""
    schema_ddl: str | None = None
    """None: inferred from the first file (in path order)."""
    event_time_column: str | None = None
    discovery_interval_ms: int = 0
    """0: bounded (the files present at start)."""
    max_file_age_ms: int = 0
    """0: no limit. Otherwise files modified longer ago than this are not read, and the
    enumerator forgets the files it read once they are this old."""
    split_size_bytes: int = DEFAULT_SPLIT_SIZE
    on_bad_file: BadFilePolicy = "fail"
    missing_path: str = "fail"
    """A path that does not exist when the source first starts: ``fail`` (after a short wait,
    naming it) or ``wait`` (for a directory created later; discovery picks it up)."""
    order: str = "path"
    """``ORDERS``: how the files of one listing are queued."""
    csv: CsvOptions = CsvOptions()
    storage: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    """``storage.*`` options without the prefix (may hold secrets: never in a repr or a log)."""
    assigner: Callable[[], SplitAssigner[Any]] = field(default=PullAssigner, compare=False, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> FileOptions:
        for key in options:
            if key not in KNOWN and not key.startswith(STORAGE_PREFIX):
                raise unknown_option(key, KNOWN, "the files connector", also="storage.<fsspec arg>")
        path = options.get("path", "").strip()
        if not path:
            raise ConfigError("path", "is required (a directory or an fsspec URL such as s3://bucket/prefix)")
        fmt = options.get("format", "").strip().lower() or None
        if fmt is not None and fmt not in FORMATS:
            raise ConfigError("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
        ddl = options.get("schema", "").strip() or None
        event_time = options.get("event_time_column", "").strip() or None
        if ddl is not None:
            schema = parse_ddl(ddl)
            if event_time is not None and schema.get_field_index(event_time) < 0:
                raise ConfigError("event_time_column", f"{event_time!r} is not a column of the schema")
        policy = choice_option(options, "on_bad_file", ("fail", "skip"))
        storage = {
            key[len(STORAGE_PREFIX) :]: _storage_value(value)
            for key, value in options.items()
            if key.startswith(STORAGE_PREFIX)
        }
        parsed = cls(
            path=path,
            glob=options.get("glob", "**/*").strip() or "**/*",
            format=fmt,
            schema_ddl=ddl,
            event_time_column=event_time,
            discovery_interval_ms=int_option(options, "discovery_interval_ms", 0, 0),
            max_file_age_ms=int_option(options, "max_file_age_ms", 0, 0),
            split_size_bytes=int_option(options, "split_size_bytes", DEFAULT_SPLIT_SIZE, 0),
            on_bad_file="skip" if policy == "skip" else "fail",
            missing_path=choice_option(options, "missing_path", ("fail", "wait")),
            order=choice_option(options, "order", ORDERS),
            csv=_csv_options(options),
            storage=tuple(sorted(storage.items())),
            assigner=assigner_from_options(options, PullAssigner.name),
        )
        parsed.filesystem()  # an unknown protocol or a missing fsspec driver fails now, named
        return parsed

    @property
    def bounded(self) -> bool:
        return self.discovery_interval_ms == 0

    def filesystem(self) -> tuple[Any, str]:
        """The fsspec filesystem and the root path on it (no protocol)."""
        from fsspec.core import url_to_fs

        try:
            fs, root = url_to_fs(self.path, **self.storage_kwargs())
        except (ImportError, ValueError, TypeError) as exc:
            raise ConfigError("path", f"cannot open {self.path!r}: {exc}") from None
        return fs, str(root).rstrip("/") or "/"

    def storage_kwargs(self) -> dict[str, Any]:
        """The fsspec keyword arguments; a dotted name nests (``storage.client_kwargs.region_name``)."""
        out: dict[str, Any] = {}
        for name, value in self.storage:
            *parents, leaf = name.split(".")
            target = out
            for parent in parents:
                target = target.setdefault(parent, {})
            target[leaf] = value
        return out

    def format_of(self, path: str) -> str | None:
        """The format a file is read as (None: not a file of this source)."""
        if self.format is not None:
            return self.format
        return EXTENSIONS.get(posixpath.splitext(path)[1].lower())


def _csv_options(options: Mapping[str, str]) -> CsvOptions:
    header = options.get("csv_header", "true").strip().lower()
    if header not in ("true", "false"):
        raise ConfigError("csv_header", f"must be true or false, got {options['csv_header']!r}")
    single = {}
    for key, default in (("csv_delimiter", ","), ("csv_quote", '"'), ("csv_escape", None)):
        value = options.get(key, default)
        if value is not None and len(value) != 1:
            raise ConfigError(key, f"must be one character, got {value!r}")
        single[key] = value
    encoding = options.get("csv_encoding", "utf8").strip() or "utf8"
    try:
        "".encode(encoding)
    except LookupError:
        raise ConfigError("csv_encoding", f"{encoding!r} is not an encoding Python knows") from None
    return CsvOptions(
        header=header == "true",
        delimiter=single["csv_delimiter"] or ",",
        quote=single["csv_quote"] or '"',
        escape=single["csv_escape"],
        null_value=options.get("csv_null_value"),
        encoding=encoding,
    )


def _storage_value(raw: str) -> Any:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return raw
