"""``PostgresSource``: a table's rows, then its changes (docs/postgres.md is the guide).

The enumerator cuts each table into primary-key chunks that readers read in parallel,
each exact as of one WAL position (snapshot.py); then one split streams the slot's
changes through ``pgoutput``, leaving out those a chunk already holds (changes.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sluicegate.api import (
    Boundedness,
    Source,
    SourceReaderContext,
    SplitEnumeratorContext,
    SupportsSplitReassignmentOnRecovery,
)
from sluicegate.api.errors import SourceError

from .catalog import DatabaseUnreachable, connect, table_info
from .enumerator import PostgresEnumerator
from .options import LOCAL, PostgresOptions
from .reader import PostgresReader
from .split import PostgresSplit, PostgresSplitCodec

RETRY_S = 1.0


class PostgresSource(Source[PostgresSplit], SupportsSplitReassignmentOnRecovery):
    LOCAL_OPTIONS = LOCAL
    """Credentials, fetch size and timeouts say how to reach the data, not what is read."""

    def __init__(self, options: PostgresOptions) -> None:
        self.options = options
        self._codec = PostgresSplitCodec()

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> PostgresSource:
        return cls(PostgresOptions.parse(options))

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self.options.bounded else Boundedness.CONTINUOUS_UNBOUNDED

    @property
    def split_codec(self) -> PostgresSplitCodec:
        return self._codec

    def check_inputs(self, wait_s: float) -> None:
        """The server answers (tried every second for up to ``wait_s``) and every table is
        there with a primary key and a replica identity that carries old rows."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with connect(self.options) as conn:
                    for table in self.options.tables:
                        table_info(conn, table)
                return
            except DatabaseUnreachable as exc:
                if time.monotonic() >= deadline:
                    raise SourceError(f"{exc} (tried for {wait_s:.0f} s)") from None
            time.sleep(RETRY_S)

    def create_enumerator(self, context: SplitEnumeratorContext[PostgresSplit]) -> PostgresEnumerator:
        return PostgresEnumerator(context, self.options)

    def restore_enumerator(self, context: SplitEnumeratorContext[PostgresSplit], checkpoint: Any) -> PostgresEnumerator:
        return PostgresEnumerator.restore(context, self.options, checkpoint)

    def create_reader(self, context: SourceReaderContext) -> PostgresReader:
        return PostgresReader(self.options, context)
