"""Which Python Kafka client should read records into Arrow columns: aiokafka or confluent-kafka?

    .venv/bin/python benchmarks/kafka_clients.py                          # 2M records of 110 B over 8 partitions
    .venv/bin/python benchmarks/kafka_clients.py --records 2000000 --repeats 3 \\
        --bootstrap-servers 127.0.0.1:9092                                # an existing broker

One topic of N records over P partitions with known content (``fill_topic``: record i
goes to partition i % P with key ``%010d`` of i, a 100-byte value starting with the same
digits, and CreateTime ``BASE_TS_MS + i // 10``), written once with confluent-kafka's
Producer and reused while it holds exactly those records. Then, in this one process, each
client reads the whole topic from the beginning into pyarrow record batches of the Spark
Kafka schema's first columns (key binary, value binary, topic string, partition int32,
offset int64, timestamp ms), ``read_committed``, assigned partitions, no consumer group:

- ``aiokafka`` 0.14: ``AIOKafkaConsumer.getmany()``;
- ``confluent-kafka``: ``Consumer.consume(num_messages=...)``;
- Kafka's own ``org.apache.kafka.tools.ConsumerPerformance`` (Java, kafka-tools 3.9.1
  resolved from Maven Central into the cache), the same records without Python: the floor.

Reports records/s, MiB/s of key + value bytes (as ConsumerPerformance counts them) and the
process CPU time per million records, the median over ``--repeats`` runs, and the ratios.
Exit code 1 if a client does not read exactly N records or reads a record whose key is not
the one its partition and offset imply.

Without ``--bootstrap-servers`` / ``KAFKA_BOOTSTRAP_SERVERS`` it runs a local broker in
``<cache root>/bench-broker`` and keeps its data when it stops, so the topic is reused by
the next run (and by ``kafka_source.py``); a broker already running there is used and left
running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluicegate.kafka.clients import security_settings
from sluicegate.kafka.security import current_security

KEY_BYTES = 10
VALUE_BYTES = 100
#: 2026-01-01T00:00:00Z; record i has CreateTime BASE_TS_MS + i // RECORDS_PER_MS.
BASE_TS_MS = 1_767_225_600_000
RECORDS_PER_MS = 10
_FILLER = (b"sluicegate-kafka-benchmark-" * 4)[: VALUE_BYTES - KEY_BYTES]
KAFKA_TOOLS_VERSION = "3.9.1"
ARROW_BATCH_ROWS = 65_536
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms")),
    ]
)


# --- the topic --------------------------------------------------------------------------


def record_key(i: int) -> bytes:
    return b"%010d" % i


def record_value(i: int) -> bytes:
    return b"%010d" % i + _FILLER


def record_timestamp_ms(i: int) -> int:
    return BASE_TS_MS + i // RECORDS_PER_MS


def filler(value_bytes: int) -> bytes:
    """The bytes after the 10-digit key in a value of ``value_bytes`` (``VALUE_BYTES`` by default)."""
    if value_bytes < KEY_BYTES:
        raise ValueError(f"a value holds its {KEY_BYTES}-digit key: at least {KEY_BYTES} bytes, not {value_bytes}")
    unit = b"sluicegate-kafka-benchmark-"
    return (unit * (value_bytes // len(unit) + 1))[: value_bytes - KEY_BYTES]


def default_topic(records: int, partitions: int, value_bytes: int = VALUE_BYTES) -> str:
    """The topic's name; 100-byte values keep the name the topics had before sizes were configurable."""
    size = "" if value_bytes == VALUE_BYTES else f"-{KEY_BYTES + value_bytes}b"
    return f"sluicegate-bench-{records}r-{partitions}p{size}-v1"


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **current_security().librdkafka_config()})


def topic_counts(bootstrap: str, topic: str) -> dict[int, tuple[int, int]] | None:
    """{partition: (low, high)} of ``topic``, or None if it does not exist."""
    from confluent_kafka import Consumer, TopicPartition

    metadata = _admin(bootstrap).list_topics(topic=topic, timeout=10)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        return None
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, **current_security().librdkafka_config(), "group.id": "sluicegate-bench-probe"}
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                return {
                    p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    for p in sorted(info.partitions)
                }
            except Exception as exc:  # a broker just (re)started has no leaders yet for a while
                if time.monotonic() > deadline:
                    raise
                print(f"  {topic}: {exc}; retrying", flush=True)
                time.sleep(1)
    finally:
        consumer.close()


def fill_topic(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int = VALUE_BYTES) -> None:
    """Make ``topic`` hold exactly records 0..N-1 (see the module docstring), reusing it if it does.

    ``value_bytes``: each value's size (its key's 10 digits, then filler); the topic's name
    should say it (``default_topic``), as only the record counts are checked for reuse.
    """
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    counts = topic_counts(bootstrap, topic)
    expected = {p: (0, len(range(p, records, partitions))) for p in range(partitions)}
    if counts == expected:
        print(f"topic {topic}: reusing it, {records:,} records over {partitions} partitions", flush=True)
        return
    admin = _admin(bootstrap)
    if counts is not None:
        print(f"topic {topic} exists with other contents ({counts}); deleting it", flush=True)
        admin.delete_topics([topic])[topic].result()
        deadline = time.monotonic() + 60
        while topic_counts(bootstrap, topic) is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} was not deleted within 60 s")
            time.sleep(0.5)
    # retention.ms=-1: the records' CreateTimes are in the past, so time retention would delete them.
    new = NewTopic(topic, partitions, 1, config={"retention.ms": "-1", "retention.bytes": "-1"})
    for attempt in range(20):
        try:
            admin.create_topics([new])[topic].result()
            break
        except Exception as exc:  # the deletion may still be in progress
            if attempt == 19:
                raise
            print(f"  create {topic}: {exc}; retrying", flush=True)
            time.sleep(1)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **current_security().librdkafka_config(),
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "compression.type": "none",
            "acks": "all",
        }
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    print(
        f"topic {topic}: writing {records:,} records of {KEY_BYTES} + {value_bytes} B over {partitions} partitions",
        flush=True,
    )
    started = last = time.monotonic()
    produce = producer.produce
    tail = filler(value_bytes)
    for i in range(records):
        key = b"%010d" % i
        while True:
            try:
                produce(
                    topic,
                    value=key + tail,
                    key=key,
                    partition=i % partitions,
                    timestamp=BASE_TS_MS + i // RECORDS_PER_MS,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
            now = time.monotonic()
            if now - last >= 5:
                last = now
                print(f"  {i:,} / {records:,} records ({i / (now - started):,.0f}/s)", flush=True)
    remaining = producer.flush(300)
    if errors or remaining:
        raise RuntimeError(f"producing failed: {remaining} undelivered, errors {errors[:5]}")
    elapsed = time.monotonic() - started
    counts = topic_counts(bootstrap, topic)
    if counts != expected:
        raise RuntimeError(f"topic {topic} holds {counts} after writing, expected {expected}")
    print(f"  wrote {records:,} records in {elapsed:.1f} s ({records / elapsed:,.0f}/s)", flush=True)


@contextlib.contextmanager
def bench_broker(bootstrap: str) -> Iterator[str]:
    """``bootstrap`` if given, else the kept local broker of ``<cache root>/bench-broker``."""
    if bootstrap:
        yield bootstrap
        return
    from sluicegate.devtools.broker.local import LocalKafkaBroker, cache_root

    broker = LocalKafkaBroker(run_dir=cache_root() / "bench-broker", keep=True, heap="1g")
    was_running = broker.status().running
    address = broker.start(timeout_s=180)
    try:
        yield address
    finally:
        if not was_running:
            broker.stop()


# --- the clients --------------------------------------------------------------------------


@dataclass
class Run:
    client: str
    records: int
    payload_bytes: int
    seconds: float
    cpu_seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mib_per_s(self) -> float:
        return self.payload_bytes / self.seconds / 2**20


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Columns:
    """Arrow batches of ``SCHEMA`` built from per-column Python lists; checks each record's key."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.batch_count = 0
        self.rows = 0
        self.payload_bytes = 0
        self.bad_keys = 0
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        self.part: list[int] = []
        self.offsets: list[int] = []
        self.stamps: list[int] = []

    def maybe_flush(self, force: bool = False) -> None:
        n = len(self.keys)
        if n == 0 or (n < ARROW_BATCH_ROWS and not force):
            return
        keys = pa.array(self.keys, pa.binary())
        values = pa.array(self.values, pa.binary())
        part = pa.array(self.part, pa.int32())
        offsets = pa.array(self.offsets, pa.int64())
        batch = pa.RecordBatch.from_arrays(
            [
                keys,
                values,
                pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()).fill_null(0), pa.array([self.topic])).cast(
                    pa.string()
                ),
                part,
                offsets,
                pa.array(self.stamps, pa.timestamp("ms")),
            ],
            schema=SCHEMA,
        )
        # The check a reader of this topic can afford: the last record of each batch.
        last = n - 1
        if self.keys[last] != record_key(self.offsets[last] * self.partitions + self.part[last]):
            self.bad_keys += 1
        self.payload_bytes += pc.sum(pc.binary_length(keys)).as_py() or 0
        self.payload_bytes += pc.sum(pc.binary_length(values)).as_py() or 0
        self.rows += batch.num_rows
        self.batch_count += 1  # the batch is dropped: building it is what is measured
        self._reset()


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    counts = topic_counts(bootstrap, topic)
    if counts is None:
        raise RuntimeError(f"topic {topic} does not exist")
    return {p: high for p, (_low, high) in counts.items()}


async def _aiokafka_run(bootstrap: str, topic: str, args: argparse.Namespace) -> Run:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    ends = _end_offsets(bootstrap, topic)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **security_settings(),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=args.partition_fetch_bytes,
        fetch_max_bytes=args.fetch_max_bytes,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        cols = Columns(topic, len(ends))
        left = {tp: ends[tp.partition] for tp in tps if ends[tp.partition] > 0}
        cpu0, t0 = _cpu(), time.perf_counter()
        while left:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=args.max_records)
            for tp, recs in fetched.items():
                cols.keys.extend([r.key for r in recs])
                cols.values.extend([r.value for r in recs])
                cols.offsets.extend([r.offset for r in recs])
                cols.stamps.extend([r.timestamp for r in recs])
                cols.part.extend([tp.partition] * len(recs))
                if recs and recs[-1].offset + 1 >= left.get(tp, 0):
                    left.pop(tp, None)
            cols.maybe_flush()
        cols.maybe_flush(force=True)
        seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    finally:
        await consumer.stop()
    if cols.bad_keys:
        raise RuntimeError(f"aiokafka: {cols.bad_keys} batches ended with an unexpected key")
    return Run("aiokafka", cols.rows, cols.payload_bytes, seconds, cpu)


def run_aiokafka(bootstrap: str, topic: str, args: argparse.Namespace) -> Run:
    return asyncio.run(_aiokafka_run(bootstrap, topic, args))


#: librdkafka settings of the "tuned" confluent-kafka run. With the defaults a partition whose
#: local queue holds queued.min.messages (100,000) records is not fetched again for
#: fetch.queue.backoff.ms (1000 ms): a consumer that drains the queue faster than that idles.
CONFLUENT_TUNED: dict[str, Any] = {"fetch.queue.backoff.ms": 1, "queued.max.messages.kbytes": 262_144}


def run_confluent(bootstrap: str, topic: str, args: argparse.Namespace, extra: dict[str, Any] | None = None) -> Run:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    ends = _end_offsets(bootstrap, topic)
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        **current_security().librdkafka_config(),
        "group.id": f"sluicegate-bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": False,
        "max.partition.fetch.bytes": args.partition_fetch_bytes,
        "fetch.max.bytes": args.fetch_max_bytes,
    }
    consumer = Consumer({**config, **(extra or {})})
    try:
        assigned = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(ends)]
        consumer.assign(assigned)
        cols = Columns(topic, len(ends))
        left = {p: high for p, high in ends.items() if high > 0}
        cpu0, t0 = _cpu(), time.perf_counter()
        while left:
            msgs = consumer.consume(num_messages=args.max_records, timeout=1.0)
            if not msgs:
                continue
            failed = [m for m in msgs if m.error() is not None]
            if failed:
                raise RuntimeError(f"confluent-kafka: {failed[0].error()}")
            cols.keys.extend([m.key() for m in msgs])
            cols.values.extend([m.value() for m in msgs])
            cols.part.extend([m.partition() for m in msgs])
            cols.offsets.extend([m.offset() for m in msgs])
            cols.stamps.extend([m.timestamp()[1] for m in msgs])
            # The consumer's position (last record handed out + 1) tells which partitions are done.
            for tp in consumer.position(assigned):
                if tp.partition in left and tp.offset >= left[tp.partition]:
                    del left[tp.partition]
            cols.maybe_flush()
        cols.maybe_flush(force=True)
        seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    finally:
        consumer.close()
    if cols.bad_keys:
        raise RuntimeError(f"confluent-kafka: {cols.bad_keys} batches ended with an unexpected key")
    return Run("confluent-kafka", cols.rows, cols.payload_bytes, seconds, cpu)


def kafka_tools_classpath() -> str:
    from sluicegate.cache_dir import cache_root
    from sluicegate.devtools.broker.maven import resolve_jars

    libs = resolve_jars(
        cache_root() / f"kafka-tools-{KAFKA_TOOLS_VERSION}",
        [("org.apache.kafka", "kafka-tools", KAFKA_TOOLS_VERSION), ("org.slf4j", "slf4j-nop", "1.7.36")],
        project="kafka-tools-runtime",
        version=KAFKA_TOOLS_VERSION,
        label=f"Kafka tools {KAFKA_TOOLS_VERSION}",
    )
    return f"{libs}/*"


def run_consumer_performance(bootstrap: str, topic: str, records: int, args: argparse.Namespace) -> Run:
    """Kafka's ConsumerPerformance; its own fetch time and rates (group join excluded)."""
    with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as config:
        config.write("isolation.level=read_committed\n")
        config.write(f"max.partition.fetch.bytes={args.partition_fetch_bytes}\n")
        config.write(f"fetch.max.bytes={args.fetch_max_bytes}\n")
    cmd = [
        "java",
        "-Xmx1g",
        "-cp",
        kafka_tools_classpath(),
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--timeout",
        "60000",
        "--group",
        f"sluicegate-bench-perf-{uuid.uuid4().hex[:8]}",
        "--consumer.config",
        config.name,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=args.timeout)
    finally:
        os.unlink(config.name)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if proc.returncode != 0 or header is None or header + 1 >= len(lines):
        raise RuntimeError(
            f"ConsumerPerformance failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
        )
    names = [n.strip() for n in lines[header].split(",")]
    values = [v.strip() for v in lines[header + 1].split(",")]
    row = dict(zip(names, values, strict=False))
    consumed = int(row["data.consumed.in.nMsg"])
    fetch_s = float(row["fetch.time.ms"]) / 1000
    mib = float(row["data.consumed.in.MB"])
    return Run("ConsumerPerformance (Java)", consumed, int(mib * 2**20), fetch_s, float("nan"))


# --- report -------------------------------------------------------------------------------


def _median_run(runs: list[Run]) -> Run:
    ordered = sorted(runs, key=lambda r: r.records_per_s)
    return ordered[len(ordered) // 2]


def report(results: dict[str, list[Run]], records: int) -> int:
    print(f"\n{'client':<28} {'records/s':>12} {'MiB/s':>8} {'CPU s/M rec':>12}  {'runs (records/s)'}")
    medians: dict[str, Run] = {}
    ok = True
    for name, runs in results.items():
        m = _median_run(runs)
        medians[name] = m
        cpu = f"{m.cpu_seconds / (m.records / 1e6):.2f}" if m.cpu_seconds == m.cpu_seconds else "-"
        each = ", ".join(f"{r.records_per_s:,.0f}" for r in runs)
        print(f"{name:<28} {m.records_per_s:>12,.0f} {m.mib_per_s:>8.1f} {cpu:>12}  {each}")
        for r in runs:
            if r.records != records:
                ok = False
                print(f"  {name}: read {r.records:,} records, expected {records:,} -> WRONG")
    names = list(medians)
    print()
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            print(f"{a} / {b}: {medians[a].records_per_s / medians[b].records_per_s:.2f}x")
    print(f"\nrecords: every run read exactly {records:,} -> {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--topic", default="", help="default: sluicegate-bench-<records>r-<partitions>p-v1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--clients",
        default="aiokafka,confluent,confluent-defaults,java",
        help="comma-separated subset of the default",
    )
    parser.add_argument("--max-records", type=int, default=500, help="getmany max_records / consume num_messages")
    parser.add_argument("--partition-fetch-bytes", type=int, default=1_048_576, help="max.partition.fetch.bytes")
    parser.add_argument("--fetch-max-bytes", type=int, default=52_428_800, help="fetch.max.bytes")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    topic = args.topic or default_topic(args.records, args.partitions)
    clients: dict[str, Callable[[str], Run]] = {}
    wanted = {c.strip() for c in args.clients.split(",") if c.strip()}
    if unknown := wanted - {"aiokafka", "confluent", "confluent-defaults", "java"}:
        parser.error(f"unknown clients {sorted(unknown)}")
    with bench_broker(args.bootstrap_servers) as bootstrap:
        print(f"Kafka {bootstrap}", flush=True)
        fill_topic(bootstrap, topic, args.records, args.partitions)
        if "aiokafka" in wanted:
            clients["aiokafka (getmany)"] = lambda b: run_aiokafka(b, topic, args)
        if "confluent" in wanted:
            clients["confluent-kafka (consume)"] = lambda b: run_confluent(b, topic, args, CONFLUENT_TUNED)
        if "confluent-defaults" in wanted:
            clients["confluent-kafka, defaults"] = lambda b: run_confluent(b, topic, args)
        if "java" in wanted:
            kafka_tools_classpath()
            clients["ConsumerPerformance (Java)"] = lambda b: run_consumer_performance(b, topic, args.records, args)
        results: dict[str, list[Run]] = {name: [] for name in clients}
        for rep in range(args.repeats):
            for name, fn in clients.items():
                r = fn(bootstrap)
                results[name].append(r)
                print(
                    f"run {rep + 1}/{args.repeats} {name}: {r.records:,} records in {r.seconds:.2f} s = "
                    f"{r.records_per_s:,.0f} records/s, {r.mib_per_s:.1f} MiB/s",
                    flush=True,
                )
    return report(results, args.records)


if __name__ == "__main__":
    sys.exit(main())
