#!/usr/bin/env python
"""What ``audit --follow`` costs per record, and its memory with a million splits.

    .venv/bin/python benchmarks/audit_follow.py [--splits 1000000] [--readers 64] [--finish-chunk 1000]

Builds a source's control history with the real coordinator core (no Kafka): READERS
readers register and are given SPLITS splits, each acknowledges them, finishes them
FINISH_CHUNK at a time and acknowledges again. The records (encoded as on the
topics) are then handed to an ``AuditFollower`` one by one, as ``audit --follow``
does, each partition's records interleaved with the others'. Prints the records
and bytes, the follower's time per record and per split, its resident memory grown
(psutil RSS, after a gc), and the batch audit of the same records for comparison.
"""

from __future__ import annotations

import argparse
import gc
import time
import uuid
from typing import Any

import orjson
import psutil

from sluicegate.audit.follow import AuditFollower
from sluicegate.audit.invariants import audit_records
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.core import CoordinatorCore, Effects
from sluicegate.protocol import (
    AddSplits,
    Body,
    CheckpointAck,
    Direction,
    ReaderRegistration,
    RequestSplit,
    SplitsFinished,
    decode,
    encode,
    envelope,
)
from sluicegate.protocol.state_records import state_key
from sluicegate_connectors.sequence import SequenceSource

SOURCE = "bench"
INBOX, READERS_TOPIC = f"sluicegate.{SOURCE}.coordinator", f"sluicegate.{SOURCE}.readers"
STATE = f"sluicegate.{SOURCE}.coordinator-state"


class History:
    """The core driven as readers would drive it; both topics recorded as bytes."""

    def __init__(self, splits: int, readers: int) -> None:
        source = SequenceSource.from_options({"splits": str(splits), "records_per_split": "1"})
        config = CoordinatorConfig(SOURCE, readers, session_timeout_ms=10**9, reader_departure_timeout_ms=10**9)
        self.core: CoordinatorCore[Any] = CoordinatorCore(source, config, epoch=1)
        self.now = 1_000
        self.inbox: list[tuple[int, bytes | None]] = []
        self.readers: list[tuple[int, int, bytes | None]] = []
        self.state: list[bytes] = []
        """The coordinator's ``meta`` part after each step (its state topic, the part the follower reads)."""
        self.offsets = [0] * readers
        self.attempt: dict[int, int] = {}
        self.seq: dict[int, int] = dict.fromkeys(range(readers), 0)
        self.held: dict[int, dict[str, dict[str, Any]]] = {s: {} for s in range(readers)}
        self.collect(self.core.start(self.now))

    def collect(self, effects: Effects) -> None:
        meta = {"cseq": self.core.cseq, "inbox_offset": self.core.inbox_offset}
        self.state.append(orjson.dumps(meta))
        for env in effects.messages:
            s = env.subtask
            self.readers.append((s, self.offsets[s], encode(env)))
            self.offsets[s] += 1
            if env.body.TYPE == "ReaderRegistered":
                self.attempt[s] = env.body.attempt  # type: ignore[attr-defined]
            elif isinstance(env.body, AddSplits):
                self.seq[s] = env.body.seq
                self.held[s].update((split["split_id"], dict(split)) for split in env.body.splits)

    def send(self, subtask: int, body: Body) -> None:
        attempt = None if isinstance(body, ReaderRegistration) else self.attempt[subtask]
        raw = encode(envelope(body, source=SOURCE, subtask=subtask, attempt=attempt, epoch=1, ts=self.now))
        offset = len(self.inbox)
        self.inbox.append((offset, raw))
        self.now += 1
        self.collect(self.core.on_message(decode(raw, Direction.TO_COORDINATOR), offset, self.now))

    def ack(self, subtask: int, checkpoint: int) -> None:
        self.send(subtask, CheckpointAck(checkpoint, self.seq[subtask], list(self.held[subtask].values())))


def build(splits: int, readers: int, chunk: int) -> History:
    h = History(splits, readers)
    for s in range(readers):
        h.send(s, ReaderRegistration(str(uuid.uuid4()), "bench", [], None))
    finished, checkpoint = 0, 0
    while finished < splits:
        checkpoint += 1
        for s in range(readers):
            if not h.held[s]:
                h.send(s, RequestSplit(hostname=None))
                continue
            h.ack(s, checkpoint)
            ids = sorted(h.held[s])
            for i in range(0, len(ids), chunk):
                part = ids[i : i + chunk]
                for sid in part:
                    del h.held[s][sid]
                h.send(s, SplitsFinished(part))
            finished += len(ids)
        assert checkpoint < 1_000, "the core stopped handing out splits"
    return h


def interleaved(h: History) -> list[tuple[str, int, int, bytes | None]]:
    """The records in an order Kafka may hand them over: partitions round robin."""
    by_partition: dict[int, list[tuple[int, int, bytes | None]]] = {}
    for record in h.readers:
        by_partition.setdefault(record[0], []).append(record)
    Queue = list[tuple[str, int, int, bytes | None]]
    inbox: Queue = [(INBOX, 0, o, raw) for o, raw in h.inbox]
    state: Queue = [(STATE, 0, o, raw) for o, raw in enumerate(h.state)]
    queues = [inbox, state] + [
        [(READERS_TOPIC, p, o, raw) for p, o, raw in rs] for _, rs in sorted(by_partition.items())
    ]
    out: list[tuple[str, int, int, bytes | None]] = []
    i = 0
    while any(queues):
        queue = queues[i % len(queues)]
        out += queue[:50]
        del queue[:50]
        i += 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--splits", type=int, default=1_000_000)
    parser.add_argument("--readers", type=int, default=64)
    parser.add_argument("--finish-chunk", type=int, default=1_000)
    args = parser.parse_args()

    started = time.perf_counter()
    h = build(args.splits, args.readers, args.finish_chunk)
    records = interleaved(h)
    size = sum(len(raw or b"") for *_, raw in records)
    print(
        f"history: {args.splits:,} splits, {args.readers} readers: {len(records):,} records, {size / 1e6:,.0f} MB "
        f"(built in {time.perf_counter() - started:.1f} s)"
    )
    del h.core
    gc.collect()
    process = psutil.Process()
    rss_before = process.memory_info().rss

    follower = AuditFollower(SOURCE, args.readers, INBOX, READERS_TOPIC, time.monotonic)
    peak_waiting = found = 0
    started = time.perf_counter()
    for topic, partition, offset, raw in records:
        if topic == INBOX:
            follower.inbox(offset, raw)
            follower.inbox_read_to(offset + 1)
        elif topic == STATE:
            follower.coordinator_state(state_key(SOURCE, "meta"), raw)
        else:
            follower.readers(partition, offset, raw)
        peak_waiting = max(peak_waiting, follower.order.waiting)
        found += len(follower.step())
    took = time.perf_counter() - started
    gc.collect()
    grown = process.memory_info().rss - rss_before
    assert found == 0, f"the follower found {found} violations in a clean history"
    assert len(follower.model.finished) == args.splits
    print(
        f"follow: {took:.1f} s, {took / len(records) * 1e6:,.0f} us per record, {took / args.splits * 1e6:.1f} us per "
        f"split, {size / took / 1e6:.0f} MB/s; RSS grew {grown / 2**20:,.0f} MiB; "
        f"at most {peak_waiting:,} records waiting; no violation"
    )
    started = time.perf_counter()
    result = audit_records(h.inbox, h.readers, source=SOURCE, max_parallelism=args.readers)
    print(f"batch audit of the same records: {time.perf_counter() - started:.1f} s, ok={result.ok}")


if __name__ == "__main__":
    main()
