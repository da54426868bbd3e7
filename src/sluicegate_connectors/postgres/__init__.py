"""The ``postgres`` connector: a parallel, chunked snapshot of tables, then one split that
streams their changes by logical replication (``pgoutput``), exactly once."""

from .options import PostgresOptions
from .source import PostgresSource

__all__ = ["PostgresOptions", "PostgresSource"]
