"""Issue 18, design B: the C batch-consume prototype against the Python range reader, in one process.

    benchmarks/prototypes/c_batch_consume/build.sh
    .venv/bin/python benchmarks/prototypes/c_batch_consume/bench.py      # 2M x 110 B and x 1 KB; 1 and 8 partitions
    .venv/bin/python benchmarks/prototypes/c_batch_consume/bench.py --sizes 110 --partitions 1
    .venv/bin/python benchmarks/prototypes/c_batch_consume/bench.py --only-check    # correctness checks only

Topics: kafka_clients.py's ``fill_topic`` (record i in partition i % P, key ``%010d`` of i,
CreateTime BASE_TS_MS + i // 10), with 100-byte values (the shared ``sluicegate-bench-*``
topics) or 1014-byte ones (``...-1kb-v1``, 1 KiB a record with the key). Each run reads every
partition's ``[0, end)`` one range after another, ``max_rows`` 65,536 (Spark's
arrowBatchRows), batches dropped once built:

- ``python``: ``KafkaSource.read_arrow`` (ranges.py ``RangeReader.read``: confluent-kafka
  ``Consumer.consume`` of 1,000 messages, a Python list per column, ``pa.array``);
- ``c``: ``scb.CRangeReader.read`` (scb.c: ``rd_kafka_consume_batch_queue`` of 1,000
  messages, Arrow buffers filled in C, ``RecordBatch._import_from_c``).

Both keep one consumer for the whole process (warmed by a small read first), with the
connector's consumer settings. Alternating, median of ``--repeats``. Then one instrumented
run of each for the us/record split (python: time inside ``Consumer.consume`` vs the rest;
c: inside ``rd_kafka_consume_batch_queue`` vs filling buffers vs import into pyarrow).

Checks (exit 1 if one fails): on each topic, the two readers' batches hold the same rows
(key, value, offset, timestamp, timestampType, topic, partition); and on a fresh topic a
transactional producer's aborted records are returned by neither (read_committed), with
null keys and values, a range that starts and ends mid-topic and small max_rows.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

import kafka_clients  # noqa: E402
from kafka_clients import bench_broker, default_topic, fill_topic, topic_counts  # noqa: E402
from scb import CRangeReader  # noqa: E402

from sluicegate_connectors.kafka import ranges  # noqa: E402
from sluicegate_connectors.kafka.options import KafkaOptions  # noqa: E402
from sluicegate_connectors.kafka.source import KafkaSource  # noqa: E402
from sluicegate_connectors.kafka.split import KafkaPartitionSplit  # noqa: E402

MAX_ROWS = 65_536
COMPARED = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


@contextlib.contextmanager
def private_broker(bootstrap: str) -> Iterator[str]:
    """``bootstrap`` if given, else a kept local broker of this prototype's own.

    Not kafka_clients.py's ``<cache root>/bench-broker``: other benchmarks start and stop that
    one (stopping it under a run that did not start it) and refill its shared topics."""
    if bootstrap:
        yield bootstrap
        return
    from sluicegate.devtools.broker.local import LocalKafkaBroker, cache_root

    broker = LocalKafkaBroker(run_dir=cache_root() / "cproto-bench-broker", keep=True, heap="1g")
    was_running = broker.status().running
    address = broker.start(timeout_s=180)
    try:
        yield address
    finally:
        if not was_running:
            broker.stop()


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def topic_for(records: int, partitions: int, size: int) -> str:
    base = default_topic(records, partitions)
    return base if size == 110 else base.replace("-v1", f"-{size}b-v1")


def ensure_topic(bootstrap: str, records: int, partitions: int, size: int) -> str:
    topic = topic_for(records, partitions, size)
    # fill_topic writes key + _FILLER as the value: a longer filler makes the 1 KB records
    saved = kafka_clients._FILLER
    kafka_clients._FILLER = (b"sluicegate-kafka-benchmark-" * 64)[: size - 2 * kafka_clients.KEY_BYTES]
    try:
        fill_topic(bootstrap, topic, records, partitions)
    finally:
        kafka_clients._FILLER = saved
    return topic


def splits_of(bootstrap: str, topic: str) -> list[tuple[KafkaPartitionSplit, int, int]]:
    counts = topic_counts(bootstrap, topic)
    assert counts is not None, topic
    return [(KafkaPartitionSplit(topic, p, low, high), low, high) for p, (low, high) in sorted(counts.items())]


ReadFn = Callable[[KafkaPartitionSplit, int, int, int], Iterator[Any]]


def run(
    read: ReadFn, ranges_: list[tuple[KafkaPartitionSplit, int, int]], keep: bool = False
) -> tuple[int, float, float, list[Any]]:
    rows, kept = 0, []
    c0, t0 = cpu(), time.perf_counter()
    for split, start, end in ranges_:
        for batch in read(split, start, end, MAX_ROWS):
            rows += batch.num_rows
            if keep:
                kept.append(batch)
    return rows, time.perf_counter() - t0, cpu() - c0, kept


class TimedConsumer:
    """Forwards to a confluent_kafka Consumer, timing consume() (the python path's split)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.consume_s = 0.0

    def consume(self, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner.consume(*a, **k)
        finally:
            self.consume_s += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def same_rows(a: list[Any], b: list[Any]) -> str:
    ta = pa.Table.from_batches(a).select(COMPARED) if a else None
    tb = pa.Table.from_batches(b).select(COMPARED) if b else None
    if ta is None or tb is None:
        rows = (0 if ta is None else ta.num_rows, 0 if tb is None else tb.num_rows)
        return "" if ta is tb else f"one side empty ({rows[0]} vs {rows[1]})"
    if ta.num_rows != tb.num_rows:
        return f"{ta.num_rows} rows vs {tb.num_rows}"
    if not ta.equals(tb):
        for name in COMPARED:
            if not ta.column(name).equals(tb.column(name)):
                return f"column {name} differs"
    return ""


def check_transactions(bootstrap: str, options_for: Callable[[str], KafkaOptions], creader: CRangeReader) -> list[str]:
    """Aborted records are not read; nulls, a mid-topic range and small batches come out the same."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"scb-txn-check-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"scb-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    committed: list[bytes | None] = []

    def txn(prefix: str, n: int, commit: bool) -> None:
        producer.begin_transaction()
        for i in range(n):
            key = None if i % 7 == 3 else f"{prefix}-{i}".encode()
            value = None if i % 11 == 5 else f"{prefix}-value-{i}".encode() * (1 + i % 3)
            producer.produce(topic, key=key, value=value, partition=0, timestamp=1_767_225_600_000 + i)
            if commit:
                committed.append(key)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    txn("c1", 100, True)
    txn("ab", 50, False)
    txn("c2", 100, True)
    txn("ab2", 30, False)  # ends in an aborted transaction: its marker is the last offset
    counts = topic_counts(bootstrap, topic)
    assert counts is not None
    low, high = counts[0]
    problems: list[str] = []
    split = KafkaPartitionSplit(topic, 0, low, high)
    source = KafkaSource(options_for(topic))
    for start, end, max_rows in [(low, high, MAX_ROWS), (low, high, 7), (37, 230, 13), (101, 160, 5)]:
        py = list(source.read_arrow(split, start, end, max_rows))
        c = list(creader.read(split, start, end, max_rows))
        if diff := same_rows(py, c):
            problems.append(f"transactional topic [{start}, {end}) max_rows {max_rows}: {diff}")
        sizes = {b.num_rows for b in c}
        if max(sizes | {0}) > max_rows:
            problems.append(f"a batch of {max(sizes)} rows > max_rows {max_rows}")
        keys = [k for b in c for k in b.column("key").to_pylist()]
        if any(k is not None and k.startswith(b"ab") for k in keys):
            problems.append(f"[{start}, {end}): records of an aborted transaction were read")
        if (start, end) == (low, high) and keys != committed:
            problems.append(f"[{start}, {end}): {len(keys)} keys, expected the {len(committed)} committed ones")
        nulls = sum(b.column("key").null_count + b.column("value").null_count for b in c)
        print(
            f"  txn topic [{start}, {end}) max_rows {max_rows}: python {sum(b.num_rows for b in py)} rows, "
            f"c {sum(b.num_rows for b in c)} rows in {len(c)} batches ({nulls} null keys/values), "
            f"same: {not diff}",
            flush=True,
        )
    admin.delete_topics([topic])[topic].result()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--sizes", default="110,1024", help="bytes a record (key + value): 110 and/or 1024")
    parser.add_argument("--partitions", default="1,8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variant", default="wheel", choices=["wheel", "debian"], help="which librdkafka libscb uses")
    parser.add_argument("--bootstrap-servers", default="")
    parser.add_argument(
        "--drop-setting", action="append", default=[], help="a librdkafka setting the c reader leaves out (repeatable)"
    )
    parser.add_argument("--shared-broker", action="store_true", help="kafka_clients.py's bench-broker, not our own")
    parser.add_argument("--only-check", action="store_true")
    parser.add_argument("--check-rows", type=int, default=300_000, help="rows compared per topic (partitions' starts)")
    args = parser.parse_args()
    problems: list[str] = []
    broker = bench_broker if args.shared_broker else private_broker
    with broker(args.bootstrap_servers) as bootstrap:

        def options_for(topic: str) -> KafkaOptions:
            return KafkaOptions.parse({"topics": topic, "bootstrap_servers": bootstrap})

        creader = CRangeReader.for_options(options_for("unused"), args.variant, tuple(args.drop_setting))
        import confluent_kafka

        print(
            f"Kafka {bootstrap}; libscb ({args.variant}) librdkafka {creader.librdkafka_version}, "
            f"confluent-kafka {confluent_kafka.version()[0]} librdkafka {confluent_kafka.libversion()[0]}",
            flush=True,
        )
        problems += check_transactions(bootstrap, options_for, creader)
        table: list[tuple[str, dict[str, list[tuple[int, float, float]]], dict[str, str]]] = []
        for size in [int(s) for s in args.sizes.split(",")]:
            for parts in [int(p) for p in args.partitions.split(",")]:
                topic = ensure_topic(bootstrap, args.records, parts, size)
                todo = splits_of(bootstrap, topic)
                source = KafkaSource(options_for(topic))
                readers: dict[str, ReadFn] = {"python": source.read_arrow, "c": creader.read}
                # correctness on this topic: the first check_rows of the topic, spread over its partitions
                per = max(1, args.check_rows // parts)
                head = [(s, lo, min(hi, lo + per)) for s, lo, hi in todo]
                got = {name: run(fn, head, keep=True)[3] for name, fn in readers.items()}
                if diff := same_rows(got["python"], got["c"]):
                    problems.append(f"{topic}: python and c differ: {diff}")
                print(f"{topic}: first {per:,} rows of each partition, python == c: {not diff}", flush=True)
                del got
                if args.only_check:
                    continue
                for fn in readers.values():  # warm: the consumers exist and have fetched once
                    run(fn, [(todo[0][0], todo[0][1], todo[0][1] + 1000)])
                results: dict[str, list[tuple[int, float, float]]] = {n: [] for n in readers}
                for rep in range(args.repeats):
                    order = list(readers) if rep % 2 == 0 else list(reversed(readers))
                    for name in order:
                        rows, secs, cpus, _ = run(readers[name], todo)
                        results[name].append((rows, secs, cpus))
                        if rows != args.records:
                            problems.append(f"{topic} {name}: read {rows:,} rows, expected {args.records:,}")
                        print(
                            f"  run {rep + 1} {name:>6}: {rows:,} rows in {secs:.2f} s = {rows / secs:,.0f} rows/s, "
                            f"CPU {cpus / rows * 1e6:.2f} us/row",
                            flush=True,
                        )
                # the split, one instrumented run each
                timed = TimedConsumer(ranges.shared_consumer(source.options))
                real = ranges.shared_consumer
                ranges.shared_consumer = lambda _options, t=timed: t  # type: ignore[assignment,misc]
                try:
                    rows, secs, _, _ = run(source.read_arrow, todo)
                finally:
                    ranges.shared_consumer = real
                py_split = (
                    f"python: {secs / rows * 1e6:.2f} us/row = consume() {timed.consume_s / rows * 1e6:.2f} + "
                    f"messages -> Arrow {(secs - timed.consume_s) / rows * 1e6:.2f}"
                )
                creader.reset_stats()
                rows, secs, _, _ = run(creader.read, todo)
                b = creader.breakdown()
                rest = secs - b.consume_s - b.build_s - b.import_s
                c_split = (
                    f"c: {secs / rows * 1e6:.2f} us/row = consume_batch_queue {b.consume_s / rows * 1e6:.2f} + "
                    f"fill buffers {b.build_s / rows * 1e6:.2f} + import/columns {b.import_s / rows * 1e6:.2f} + "
                    f"other {rest / rows * 1e6:.2f} ({b.consume_calls:,} consume calls)"
                )
                print(f"  {py_split}\n  {c_split}", flush=True)
                table.append(
                    (f"{args.records:,} x {size} B, {parts} partition(s)", results, {"python": py_split, "c": c_split})
                )
        creader.close()
    if table:
        print(f"\n{'topic':<34} {'reader':>6} {'rows/s (median)':>16} {'CPU us/row':>11}  runs (rows/s)")
        for label, results, _splits in table:
            med: dict[str, float] = {}
            for name, runs in results.items():
                rates = [r / s for r, s, _ in runs]
                med[name] = statistics.median(rates)
                cpu_med = statistics.median(c / r * 1e6 for r, _, c in runs)
                each = ", ".join(f"{x:,.0f}" for x in rates)
                print(f"{label:<34} {name:>6} {med[name]:>16,.0f} {cpu_med:>11.2f}  {each}")
            print(f"{'':<34} {'c/py':>6} {med['c'] / med['python']:>15.2f}x")
        print("\nus/record split (one instrumented run each):")
        for label, _results, splits in table:
            print(f"{label}\n  {splits['python']}\n  {splits['c']}")
    print()
    for p in problems:
        print(f"PROBLEM: {p}")
    print(f"checks: {'OK' if not problems else 'FAILED'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
