"""The ``files`` connector: a split is a file (or row groups of a large Parquet file),
its position the next row."""

from .options import FileOptions
from .source import FileSource
from .split import FileSplit

__all__ = ["FileOptions", "FileSource", "FileSplit"]
