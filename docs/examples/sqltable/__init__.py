"""``sqltable``: the rows of a SQLite table, split by primary-key range (the worked
example of docs/connectors.md)."""

from sqltable.source import SqlTableSource
from sqltable.split import KeyRangeSplit

__all__ = ["KeyRangeSplit", "SqlTableSource"]
