"""The ``postgres`` connector when the database is not as it should be: tables it cannot
read exactly are refused at start naming the table and the statement that fixes it; a
server that never answers fails within the first-contact deadline naming ``url``; a
server restarted while the changes stream loses and repeats nothing; a dropped slot stops
the stream loudly and is never created again (that would skip the changes since)."""

from __future__ import annotations

import re
import time

import psycopg
import pytest
from kafka_data import OutputReader, create_topic, option_args
from local_http import free_port
from postgres_data import (
    ITEMS,
    ORDERS,
    Writer,
    conninfo_of,
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

from sluicegate.api.errors import SourceError
from sluicegate_connectors.postgres import PostgresSource

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]
__all__ = ["database", "postgres"]


def test_tables_it_cannot_read_exactly_are_refused_naming_the_table_and_the_fix(
    postgres: PostgresServer, database: str
) -> None:
    with psycopg.connect(conninfo_of(postgres, database), autocommit=True) as conn:
        conn.execute("CREATE TABLE keyless (a int, b text)")
        conn.execute("CREATE TABLE plain (id int PRIMARY KEY, b text)")  # replica identity DEFAULT
    cases = {
        "keyless": r"table public\.keyless has no primary key.*ALTER TABLE public\.keyless ADD PRIMARY KEY",
        "plain": r"public\.plain has REPLICA IDENTITY DEFAULT.*ALTER TABLE public\.plain REPLICA IDENTITY FULL",
        "nosuch": r"table public\.nosuch \(`dbtable`\) does not exist",
    }
    for table, message in cases.items():
        source = PostgresSource.from_options(source_options(postgres, database, dbtable=table))
        with pytest.raises(SourceError, match=message):
            source.check_inputs(1.0)


def test_a_server_that_never_answers_fails_within_the_deadline_naming_url() -> None:
    url = f"jdbc:postgresql://127.0.0.1:{free_port()}/shop"
    source = PostgresSource.from_options({"url": url, "dbtable": "items", "connect_timeout": "1"})
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"(?s)cannot connect to PostgreSQL \(`url`\).*tried for 2 s"):
        source.check_inputs(2.0)
    assert time.monotonic() - started < 6


@pytest.mark.kafka
def test_a_reader_of_a_server_that_never_answers_exits_2_naming_url(procs: ProcessGroup, unique_source: str) -> None:
    url = f"jdbc:postgresql://127.0.0.1:{free_port()}/shop"
    args = [
        *("reader", "--source", unique_source, "--subtask", "0", "--connector", "postgres"),
        *("--output", f"kafka:{unique_source}.out", "--coordinator", "auto", "--max-parallelism", "1"),
        *option_args({"url": url, "dbtable": "items"}),
    ]
    started = time.monotonic()
    proc = procs.start("reader", args)
    assert proc.wait(60) == 2, proc.tail()
    assert time.monotonic() - started < 45
    assert "cannot connect to PostgreSQL (`url`)" in proc.log() and "Traceback" not in proc.log(), proc.tail()


@pytest.mark.kafka
def test_a_server_restarted_while_changes_stream_loses_and_repeats_nothing(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, postgres: PostgresServer, database: str
) -> None:
    out = f"{unique_source}.out"
    create_topic(kafka_bootstrap, out, 1)
    conninfo = conninfo_of(postgres, database)
    options = source_options(postgres, database, chunk_size="5000")
    writer = Writer(conninfo)
    writer.start()
    readers = [
        reader(procs, unique_source, s, options, out, "--coordinator", "auto", "--max-parallelism", "2")
        for s in range(2)
    ]
    output = OutputReader(kafka_bootstrap, out)
    try:
        output.wait_for(ITEMS + ORDERS + 100, 120, readers, "before the restart")
        output.wait_for(100, 60, readers, "of changes before the restart", matching=streamed)
        postgres.restart()
        before = sum(map(streamed, output.rows))
        output.wait_for(before + 300, 90, readers, "of changes after the restart", matching=streamed)
        writer.stop()
        expected = wait_for_table_state(output, conninfo, 60)
        output.read_all()
    finally:
        output.close()
        procs.stop_all()
    assert not differences(expected, output_state(output.rows)) and not held_twice(output.rows)
    twice = written_twice(output.rows)
    assert not twice, f"{len(twice)} changes written twice across the restart, e.g. {twice[:3]}"
    assert writer.reconnects >= 1  # the restart did reach the writer: the server did go away
    assert any("lost PostgreSQL" in r.log() for r in readers), "no reader saw the restart"


@pytest.mark.kafka
def test_a_dropped_slot_stops_the_stream_loudly_and_is_never_created_again(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, postgres: PostgresServer, database: str
) -> None:
    out = f"{unique_source}.out"
    create_topic(kafka_bootstrap, out, 1)
    conninfo = conninfo_of(postgres, database)
    options = source_options(postgres, database, chunk_size="20000", slot="dropped_here", publication="dropped_here")
    proc = reader(procs, unique_source, 0, options, out, "--coordinator", "auto", "--max-parallelism", "1")
    output = OutputReader(kafka_bootstrap, out)
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            output.wait_for(ITEMS + ORDERS, 120, [proc], "of the snapshot")
            proc.wait_for_log("streaming changes of slot dropped_here", timeout_s=60)
            deadline = time.monotonic() + 20
            while True:  # the stream's server process must be gone before its slot can be dropped
                conn.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'dropped_here'"
                )
                try:
                    conn.execute("SELECT pg_drop_replication_slot('dropped_here')")
                    break
                except psycopg.errors.ObjectInUse:
                    assert time.monotonic() < deadline, "the slot stayed in use"
            code = proc.wait(60)
            slots = conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'dropped_here'"
            ).fetchone()
    finally:
        output.close()
    assert code not in (None, 0), proc.tail()
    assert re.search(r"(?s)slot dropped_here \(`slot`\).*does not exist.*never created again", proc.log()), proc.tail()
    assert slots == (0,), "the slot was created again"
