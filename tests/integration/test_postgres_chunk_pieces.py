"""A chunk read by two readers in turn, over a real PostgreSQL: the first stops after a
checkpoint in the middle of the chunk, the second goes on from that checkpoint's state in
a snapshot of its own. Every row of the chunk is emitted once, each part as of its own
point, and the chunk's pieces say which keys were read as of which point, so a change
committed between the two reads is left to the stream for the keys of the second part
only where the second snapshot does not hold it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from postgres_server import PostgresServer, postgres

from sluicegate.api import Record, SourceReaderContext
from sluicegate_connectors.postgres import PostgresSource
from sluicegate_connectors.postgres.changes import ChunkFilter
from sluicegate_connectors.postgres.events import CHUNK_DONE
from sluicegate_connectors.postgres.split import ChunkSplit, PostgresSplitCodec

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]
__all__ = ["postgres"]

ROWS = 1_000


@dataclass(frozen=True)
class EventsContext(SourceReaderContext):
    sent: list[Any] = field(default_factory=list)

    def send_source_event(self, event: Any) -> None:
        self.sent.append(event)


def _records(reader: Any, batch: int, rounds: int) -> list[Record]:
    records: list[Record] = []
    for _ in range(rounds):
        records += reader.next_batch(batch).records
    return records


def test_a_chunk_stopped_midway_goes_on_in_a_new_snapshot_and_its_pieces_say_which_keys_are_as_of_which(
    postgres: PostgresServer,
) -> None:
    with postgres.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS pieces")
        conn.execute("CREATE TABLE pieces (id int PRIMARY KEY, v text)")
        conn.execute("ALTER TABLE pieces REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO pieces SELECT g, 'v' || g FROM generate_series(1, %s) g", (ROWS,))
    source = PostgresSource.from_options(postgres.options(dbtable="pieces", startup_mode="snapshot"))
    codec = PostgresSplitCodec()
    chunk = ChunkSplit("public.pieces", 0, None, None)

    first = source.create_reader(EventsContext(0, 1, "test"))
    first.add_splits([chunk])
    before = _records(first, 100, 3)  # 300 rows, then a checkpoint, then this reader dies
    state = [codec.to_wire(s) for s in first.snapshot_state(1)]
    first.close()

    with postgres.connect() as conn:  # between the two reads: one row of each part changes
        conn.execute("UPDATE pieces SET v = 'changed' WHERE id IN (10, 900)")
        changed_at = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()

    context = EventsContext(0, 2, "test")
    second = source.create_reader(context)
    second.add_splits([codec.from_wire(w) for w in state])
    after = _records(second, 500, 3)
    finished = second.snapshot_state(2)
    second.notify_checkpoint_complete(2)
    last = second.next_batch(500)

    ids = [r.value["id"] for r in before + after]
    assert sorted(ids) == list(range(1, ROWS + 1)), "a row is missing or emitted twice"
    values = {r.value["id"]: r.value["v"] for r in before + after}
    assert values[10] == "v10" and values[900] == "changed"  # each part as of its own snapshot

    done = finished[0]
    assert isinstance(done, ChunkSplit) and done.done
    assert [p.upto for p in done.pieces] == [("300",), None] and done.pieces[0].point < done.pieces[1].point
    assert {r.value["_lsn"] for r in before} == {done.pieces[0].point}
    assert {r.value["_lsn"] for r in after} == {done.pieces[1].point}
    assert changed_at is not None and done.pieces[0].point < int(str(changed_at[0])) <= done.pieces[1].point

    # the report names the pieces, and only after the checkpoint that holds the chunk finished
    assert [e["type"] for e in context.sent] == [CHUNK_DONE]
    assert last.finished_split_ids == [chunk.split_id] and not last.records
    chunks = ChunkFilter({"public.pieces": (23,)})
    chunks.add(codec.from_wire(context.sent[0]["chunk"]))  # type: ignore[arg-type]
    assert chunks.point_of("public.pieces", ("10",)) == done.pieces[0].point
    assert chunks.point_of("public.pieces", ("900",)) == done.pieces[1].point
    second.close()
    with psycopg.connect(postgres.conninfo, autocommit=True) as conn:
        leftover = conn.execute("SELECT count(*) FROM pg_replication_slots WHERE temporary").fetchone()
    assert leftover == (0,), "a chunk's temporary slot outlived its read"
