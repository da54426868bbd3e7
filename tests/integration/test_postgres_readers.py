"""The ``postgres`` connector over a real PostgreSQL, real Kafka and real processes: a
coordinator and three ``sluicegate reader`` processes copy two tables' rows and then their
changes to ``kafka:OUT`` exactly once, while a writer inserts, updates (also rows with
out-of-line TOASTed values, also keys) and deletes all along, and a reader and the
coordinator are SIGKILLed mid-snapshot and the stream's reader mid-stream.

The oracle is the database itself: at the end the last row of each key in OUT (by
``_lsn`` and ``_seq``, pre-images left out, a delete removing the key) equals ``SELECT *``
of the table, no change is in OUT twice, and the audit of the control topics is clean.
"""

from __future__ import annotations

import pytest
from kafka_data import OutputReader, audit_ok, create_topic
from postgres_data import (
    ITEMS,
    ORDERS,
    READERS,
    Writer,
    conninfo_of,
    coordinator,
    database,
    differences,
    held_twice,
    output_state,
    reader,
    source_options,
    streamed,
    wait_for_table_state,
    written_twice,
)
from postgres_server import PostgresServer, postgres
from processes import ProcessGroup

WAIT_S = 120 if ITEMS <= 100_000 else 900
"""Each wait's bound (the proof at scale waits longer)."""
pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.timeout(WAIT_S * 3)]
__all__ = ["database", "postgres"]


def test_a_snapshot_then_changes_reach_kafka_exactly_once_through_reader_and_coordinator_kills(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, postgres: PostgresServer, database: str
) -> None:
    source, out = unique_source, f"{unique_source}.out"
    create_topic(kafka_bootstrap, out, 3)
    conninfo = conninfo_of(postgres, database)
    options = source_options(postgres, database)
    writer = Writer(conninfo)
    writer.start()
    coordinators = [coordinator(procs, source, options)]
    readers = {s: reader(procs, source, s, options, out) for s in range(READERS)}
    output = OutputReader(kafka_bootstrap, out)
    try:
        output.wait_for(ITEMS // 4, WAIT_S, [*readers.values(), *coordinators], "before the reader kill")
        readers[1].kill()
        readers[1] = reader(procs, source, 1, options, out)
        output.wait_for(ITEMS // 2, WAIT_S, [*readers.values(), *coordinators], "before the coordinator kill")
        coordinators[-1].kill()
        coordinators.append(coordinator(procs, source, options))
        snapshot_rows = ITEMS + ORDERS
        output.wait_for(snapshot_rows, WAIT_S, [*readers.values(), coordinators[-1]], "of the snapshot")
        output.wait_for(200, WAIT_S, [*readers.values(), coordinators[-1]], "of changes", matching=streamed)
        holder = next(
            s for s, r in readers.items() if any(streamed(row) and row["subtask"] == s for row in output.rows)
        )
        readers[holder].kill()
        readers[holder] = reader(procs, source, holder, options, out)
        output.wait_for(
            400, WAIT_S, [*readers.values(), coordinators[-1]], "of changes after the kill", matching=streamed
        )
        writer.stop()
        expected = wait_for_table_state(output, conninfo, WAIT_S)
        output.read_all()
    finally:
        output.close()
        procs.stop_all()
    assert not differences(expected, output_state(output.rows))
    twice = written_twice(output.rows)
    assert not twice, f"{len(twice)} changes in OUT twice, e.g. {twice[:3]}"
    held = held_twice(output.rows)
    assert not held, f"{len(held)} changes streamed that their chunk's snapshot held already, e.g. {held[:3]}"
    print(f"{writer.transactions} transactions written; {len(output.rows)} rows in OUT")
    audit_ok(kafka_bootstrap, source)
