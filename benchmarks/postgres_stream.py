"""The ``postgres`` connector's change stream, measured in one process over a real PostgreSQL.

Two figures, both of the connector alone (the reader's ``next_batch`` loop, no output):

- **changes/s**: a backlog of ``--backlog`` single-row inserts, written in transactions of
  1,000 before the stream starts, read to the end (pgoutput decoding, psycopg's text
  loaders and the record dicts: what one reader costs per change);
- **commit-to-emit latency** at a fixed rate: a writer commits one row every
  1/``--rate`` s for ``--seconds``; each record's latency is the time it is emitted
  minus its ``_commit_timestamp``. p50/p99/max in ms.

A reader in a host adds what the host adds (records reach an exactly-once output at
the next checkpoint: ``--checkpoint-interval-ms``, 2 s by default), which this does not
count.

    .venv/bin/python benchmarks/postgres_stream.py --backlog 100000 --rate 1000 --seconds 20
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from local_http import free_port
from postgres_server import PostgresServer

from sluicegate.api import SourceReaderContext
from sluicegate_connectors.postgres import PostgresSource
from sluicegate_connectors.postgres.catalog import connect, create_slot, ensure_publication
from sluicegate_connectors.postgres.split import StreamSplit


@dataclass(frozen=True)
class QuietContext(SourceReaderContext):
    sent: list[Any] = field(default_factory=list)

    def send_source_event(self, event: Any) -> None:
        self.sent.append(event)


def start_server() -> PostgresServer:
    root = Path(tempfile.mkdtemp(prefix="sluicegate-pg-bench-"))
    root.chmod(0o755)
    server = PostgresServer(root, free_port())
    server.initialize()
    server.start()
    return server


def stream_reader(server: PostgresServer, slot: str) -> Any:
    options = {"url": server.url, "user": "postgres", "dbtable": "events", "slot": slot, "publication": slot}
    source = PostgresSource.from_options(options)
    with connect(source.options) as conn:
        ensure_publication(conn, source.options)
        lsn = create_slot(conn, slot)
    reader = source.create_reader(QuietContext(0, 1, "bench"))
    reader.add_splits([StreamSplit(lsn=lsn)])
    return reader


def throughput(server: PostgresServer, backlog: int) -> float:
    reader = stream_reader(server, "bench_backlog")
    with server.connect() as conn:
        for start in range(0, backlog, 1_000):
            conn.execute(
                "INSERT INTO events (id, body, at)"
                " SELECT g, 'change ' || g, now() FROM generate_series(%s::bigint, %s::bigint) g",
                (start + 1, min(start + 1_000, backlog)),
            )
    print(f"  backlog of {backlog:,} changes written; reading it", flush=True)
    started = time.perf_counter()
    read = 0
    while read < backlog:
        read += len(reader.next_batch(10_000).records)
    elapsed = time.perf_counter() - started
    reader.close()
    return backlog / elapsed


def latency(server: PostgresServer, rate: int, seconds: float) -> list[float]:
    reader = stream_reader(server, "bench_latency")
    stop = threading.Event()

    def write() -> None:
        with server.connect() as conn:
            # as production commits: flushed at commit (the test server's default is off, and
            # logical decoding only sees WAL once flushed: every 200 ms, wal_writer_delay)
            conn.execute("SET synchronous_commit = on")
            n = 10_000_000
            due = time.perf_counter()
            while not stop.is_set():
                conn.execute("INSERT INTO events (id, body, at) VALUES (%s, 'x', now())", (n,))
                n += 1
                due += 1 / rate
                time.sleep(max(0.0, due - time.perf_counter()))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        records = reader.next_batch(10_000).records
        now = dt.datetime.now(dt.UTC)
        latencies += [
            (now - dt.datetime.fromisoformat(r.value["_commit_timestamp"])).total_seconds() * 1000 for r in records
        ]
        if not records:
            time.sleep(0.001)
    stop.set()
    writer.join()
    reader.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1_000, help="commits per second of the latency run")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    server = start_server()
    try:
        with server.connect() as conn:
            conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, body text, at timestamptz)")
            conn.execute("ALTER TABLE events REPLICA IDENTITY FULL")
        print("postgres stream benchmark (one process, the connector alone)", flush=True)
        rate = throughput(server, args.backlog)
        print(f"  latency run: {args.rate:,} commits/s for {args.seconds:.0f} s", flush=True)
        measured = latency(server, args.rate, args.seconds)
        cuts = statistics.quantiles(measured, n=100)
        print()
        print("| figure | value |")
        print("| --- | --- |")
        print(f"| changes/s, one reader, a backlog of {args.backlog:,} | {rate:,.0f} |")
        print(
            f"| commit-to-emit p50 / p99 / max at {args.rate:,}/s ({len(measured):,} changes) | "
            f"{cuts[49]:.1f} / {cuts[98]:.1f} / {max(measured):.1f} ms |"
        )
    finally:
        server.stop("immediate")
        shutil.rmtree(server.root, ignore_errors=True)


if __name__ == "__main__":
    main()
