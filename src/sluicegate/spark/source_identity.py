"""Which sluicegate source a Spark query reads: its own, unless it names one.

A source is the unit the coordinator keeps positions and assignments for. A query that
names one (``.option("source", NAME)``) shares it on purpose: with a deployed coordinator,
standalone readers, or an earlier query whose positions it continues. A query that names
none gets a source that belongs to it alone, as Spark's own Kafka source gives every
query a consumer group of its own: the name derived from what it reads (the topics, the
path) and a random part, chosen when the query starts from a fresh checkpoint and written
into every offset of its offset log. A restart reads it back from there, so it is the same
on every restart of that query and different for every other query; a second query of the
same topic with a fresh checkpoint starts where its ``startingOffsets`` say, not where the
first one stands.

Offsets written before the name was recorded carry none: such a query goes on with the
derived name, which is what it read under.
"""

from __future__ import annotations

import secrets

from sluicegate.protocol.names import validate_source

OWN_MARK = ".query-"
"""Between the derived name and the random part: ``orders.query-3f9a2c1d``."""
_BASE_MAX = 100 - len(OWN_MARK) - 8


def own_source_name(derived: str, token: str | None = None) -> str:
    """A new source name of a query's own: ``<derived>.query-<8 hex digits>``."""
    part = token if token is not None else secrets.token_hex(4)
    return validate_source(f"{derived[:_BASE_MAX].rstrip('.-_')}{OWN_MARK}{part}")
