"""The filesystem side (I/O): listing, Parquet footers, and files read as Arrow batches
of the source's schema. Shared by the enumerator (listing, footers), the standalone
reader and the Spark ranges."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from .badfiles import BadFile
from .options import FileOptions
from .planning import RowGroup
from .schema import SchemaMismatch, conform
from .split import FileEntry, FileSplit

READ_ERRORS = (OSError, pa.ArrowException, SchemaMismatch, ValueError, EOFError)
"""What reading a bad file raises (pyarrow's errors are ArrowException or OSError)."""


class FileStore:
    """The source's filesystem and root, and what is read from them."""

    def __init__(self, options: FileOptions) -> None:
        self.options = options
        self.fs, self.root = options.filesystem()

    def url(self, path: str) -> str:
        """A path on this filesystem as a URL people can use (local paths stay paths)."""
        return path if self.is_local() else f"{self._protocol()}://{path}"

    def is_local(self) -> bool:
        """Whether this is the machine's own file system."""
        return self._protocol() in ("file", "local")

    def _protocol(self) -> str:
        protocol = self.fs.protocol
        return protocol[0] if isinstance(protocol, tuple | list) else str(protocol)

    # -- listing ------------------------------------------------------------------

    def root_exists(self) -> bool:
        """Whether the source's directory (or bucket prefix) is there at all."""
        self.fs.invalidate_cache(self.root)
        return bool(self.fs.exists(self.root))

    def list_files(self) -> list[FileEntry]:
        """The files of the source now (those whose format is known), in path order."""
        pattern = f"{self.root}/{self.options.glob.lstrip('/')}"
        self.fs.invalidate_cache()
        found = self.fs.glob(pattern, detail=True)
        out = []
        for path, info in found.items():
            if info.get("type") != "file" or self.options.format_of(path) is None:
                continue
            name = path.rsplit("/", 1)[-1]
            if name.startswith((".", "_")):
                continue  # hidden and in-progress files (Spark's and Hadoop's rule)
            out.append(FileEntry(path, int(info.get("size") or 0), mtime_ms(info)))
        return sorted(out, key=lambda e: e.path)

    def info(self, path: str) -> FileEntry | None:
        """The file as it is now (None: gone)."""
        try:
            self.fs.invalidate_cache(path)
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        return FileEntry(path, int(info.get("size") or 0), mtime_ms(info))

    def row_groups(self, path: str) -> list[RowGroup]:
        """A Parquet file's row groups, from its footer."""
        import pyarrow.parquet as pq

        with self.fs.open(path, "rb") as handle:
            metadata = pq.ParquetFile(handle).metadata
            return [
                RowGroup(metadata.row_group(i).num_rows, metadata.row_group(i).total_byte_size)
                for i in range(metadata.num_row_groups)
            ]

    # -- schema -------------------------------------------------------------------

    def file_schema(self, path: str) -> pa.Schema:
        fmt = self.options.format_of(path)
        with self.fs.open(path, "rb") as handle:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                return pq.read_schema(handle)
            if fmt == "csv":
                import pyarrow.csv as pacsv

                read, parse, _ = self._csv(None)
                schema = pacsv.open_csv(handle, read_options=read, parse_options=parse).schema
                if self.options.csv.header:
                    return schema
                return pa.schema([field.with_name(f"_c{i}") for i, field in enumerate(schema)])
            import pyarrow.json as pajson

            return pajson.read_json(handle).schema

    # -- reading ------------------------------------------------------------------

    def batches(
        self, split: FileSplit, schema: pa.Schema, start: int, end: int | None, batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        """Rows ``[start, end)`` of the split (``end`` None: to its end) as batches of the
        schema of at most ``batch_rows`` rows. Raises BadFile for a file that does not read."""
        try:
            yield from self._batches(split, schema, start, end, batch_rows)
        except BadFile:
            raise
        except READ_ERRORS as exc:
            raise BadFile(split.path, f"{type(exc).__name__}: {exc}") from None

    def _batches(
        self, split: FileSplit, schema: pa.Schema, start: int, end: int | None, batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        if end is not None and end <= start:
            return
        with self.fs.open(split.path, "rb") as handle:
            raw = self._raw_batches(handle, split, schema, start, batch_rows)
            position = start
            for batch in _from_row(raw, start):
                if end is not None and position + batch.num_rows > end:
                    batch = batch.slice(0, end - position)
                if batch.num_rows:
                    yield conform(batch, schema)
                position += batch.num_rows
                if end is not None and position >= end:
                    return
        if end is not None and position < end:
            raise BadFile(split.path, f"the split has {position} rows, {end} were listed (the file changed?)")

    def _raw_batches(
        self, handle: Any, split: FileSplit, schema: pa.Schema, start: int, batch_rows: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(first row of the batch, batch), from the split's first row group at or before ``start``."""
        if split.format == "parquet":
            import pyarrow.parquet as pq

            parquet = pq.ParquetFile(handle)
            metadata = parquet.metadata
            end_group = metadata.num_row_groups if split.end_group is None else split.end_group
            groups: list[int] = []
            row = 0  # the split's row where groups[0] starts
            for index in range(split.first_group, end_group):
                rows = metadata.row_group(index).num_rows
                if not groups and row + rows <= start:
                    row += rows
                    continue
                groups.append(index)
            # columns by name: a file with more columns reads only the schema's
            columns = [name for name in schema.names if name in parquet.schema_arrow.names]
            if groups:
                for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns):
                    yield row, batch
                    row += batch.num_rows
            return
        if split.format == "csv":
            import pyarrow.csv as pacsv

            read, parse, convert = self._csv(schema)
            reader = pacsv.open_csv(handle, read_options=read, parse_options=parse, convert_options=convert)
            row = 0
            for batch in reader:
                yield row, batch
                row += batch.num_rows
            return
        import pyarrow.json as pajson

        parse = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        table = pajson.read_json(handle, parse_options=parse)
        row = 0
        for batch in table.to_batches(max_chunksize=batch_rows):
            yield row, batch
            row += batch.num_rows

    def _csv(self, schema: pa.Schema | None) -> tuple[Any, Any, Any]:
        """pyarrow's read, parse and convert options for this source's CSV files, read into
        ``schema`` (None: to infer one). Without a header every row is data and the columns
        are the schema's, in order (it names every column of the file), or Spark's ``_c0``,
        ``_c1`` ... when inferred (``file_schema``)."""
        import pyarrow.csv as pacsv

        csv = self.options.csv
        names: list[str] | None = None
        if not csv.header and schema is not None:
            names = list(schema.names)
        read = pacsv.ReadOptions(
            block_size=1 << 22,
            encoding=csv.encoding,
            column_names=names,
            autogenerate_column_names=not csv.header and names is None,
        )
        parse = pacsv.ParseOptions(
            delimiter=csv.delimiter,
            quote_char=csv.quote,
            escape_char=csv.escape if csv.escape is not None else False,
        )
        if schema is None:
            return read, parse, None
        null = {"null_values": [csv.null_value], "strings_can_be_null": True} if csv.null_value is not None else {}
        convert = pacsv.ConvertOptions(
            column_types={f.name: f.type for f in schema}, include_columns=schema.names, **null
        )
        return read, parse, convert

    def count_rows(self, split: FileSplit, schema: pa.Schema) -> int:
        """Rows of a split whose count the listing did not know (reads the file; BadFile)."""
        return sum(b.num_rows for b in self.batches(split, schema, 0, None, 1 << 20))


def _from_row(raw: Iterator[tuple[int, pa.RecordBatch]], start: int) -> Iterator[pa.RecordBatch]:
    for first, batch in raw:
        if first + batch.num_rows <= start:
            continue
        yield batch.slice(start - first) if first < start else batch


def mtime_ms(info: dict[str, Any]) -> int:
    """A listing's modification time in ms (local: ``mtime`` seconds; S3: ``LastModified``)."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, dt.datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, int | float):
            return int(value * 1000)
        if isinstance(value, str):
            try:
                return int(dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                continue
    return 0
