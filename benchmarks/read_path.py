"""The kafka connector's range read paths, in one process, on the same topic: rows/s.

    .venv/bin/python benchmarks/read_path.py                               # 2M records of 110 B, 1 and 4 partitions
    .venv/bin/python benchmarks/read_path.py --records 2000000 --partitions 1 --repeats 3 \\
        --bootstrap-servers 127.0.0.1:9092                                 # an existing broker

What a Spark executor does in ``KafkaSource.read_arrow``: ``RangeReader.read`` of every
partition of the topic from its first to its last offset, batches of ``--max-rows``, with
each path's own consumer (made once, as the executor's shared consumer is):

- ``python``: confluent-kafka ``consume()`` and Arrow columns built in Python;
- ``native-batch``: ``sluicegate._native`` with ``rd_kafka_consume_batch_queue`` (the one
  the connector uses);
- ``native-poll``: ``sluicegate._native`` with the rdkafka crate's ``BaseConsumer::poll``,
  one message per call (a prototype kept for this comparison).

Each figure: rows/s (wall clock), the process's CPU seconds per million rows
(librdkafka's threads included), which a busy machine disturbs less, and the broker's
(when it runs on this machine), the median of ``--repeats`` runs; the paths take turns
(python, native-batch, native-poll, python, ...). ``--variant LABEL:KEY=VALUE[,...]`` adds
``native-batch+LABEL``: the native path with other librdkafka settings (fetch sizes, say).
The topic is kafka_clients.py's (``fill_topic``), reused while it holds exactly those
records; without ``--bootstrap-servers`` it is on the kept local broker of
``<cache root>/bench-broker``. Exit code 1 if a path reads a different number of rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_clients import bench_broker, default_topic, fill_topic, topic_counts
from kafka_source import listening_pid, parse_settings

from sluicegate_connectors.kafka.options import KafkaOptions
from sluicegate_connectors.kafka.ranges import RANGE_READ_DEFAULTS, RangeReader
from sluicegate_connectors.kafka.read_path import RangeConsumer, native_available, new_range_consumer
from sluicegate_connectors.kafka.split import KafkaPartitionSplit

PATHS = {"python": ("python", "batch"), "native-batch": ("native", "batch"), "native-poll": ("native", "poll")}


def read_all(
    reader: RangeReader, topic: str, ends: dict[int, tuple[int, int]], max_rows: int, range_rows: int
) -> tuple[int, int]:
    """Every partition's records; with ``range_rows`` as a Spark executor reads micro-batches:
    each round a range of that many offsets of every partition in turn, then the next round."""
    rows = size = 0
    step = range_rows or max(high - low for low, high in ends.values())
    starts = {partition: low for partition, (low, _high) in ends.items()}
    while any(starts[p] < high for p, (_low, high) in ends.items()):
        for partition, (_low, high) in sorted(ends.items()):
            start = starts[partition]
            end = min(high, start + step)
            starts[partition] = end
            split = KafkaPartitionSplit(topic, partition, start)
            for batch in reader.read(split, start, end, max_rows):
                rows += batch.num_rows
                size += batch.column("value").nbytes
    return rows, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-rows", type=int, default=100_000)
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--no-headers", action="store_true", help="skip the headers column (nulls)")
    parser.add_argument(
        "--range-rows",
        type=int,
        default=0,
        help="read each partition in ranges of this many offsets, partitions in turn, as Spark's micro-batches "
        "do (0: each partition whole, in one range)",
    )
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
        help="also native-batch+LABEL, with these librdkafka settings (repeatable)",
    )
    args = parser.parse_args()
    variants: dict[str, dict[str, str]] = {}
    for text in args.variant:
        label, _, settings = text.partition(":")
        if not label or "=" not in settings:
            parser.error(f"--variant takes LABEL:KEY=VALUE[,KEY=VALUE], not {text!r}")
        variants[f"native-batch+{label}"] = parse_settings(settings.split(","))
    paths = [p for p in [*args.paths, *variants] if PATHS.get(p, ("native",))[0] == "python" or native_available()]
    if len(paths) < len(args.paths) + len(variants):
        print("sluicegate._native is not built: native paths skipped (make install)", flush=True)
    failed = False
    with bench_broker(args.bootstrap_servers) as bootstrap:
        for partitions in args.partitions:
            topic = default_topic(args.records, partitions)
            fill_topic(bootstrap, topic, args.records, partitions)
            ends = topic_counts(bootstrap, topic)
            assert ends is not None
            options = KafkaOptions.parse({"topics": topic, "bootstrap_servers": bootstrap})
            config: dict[str, Any] = {**RANGE_READ_DEFAULTS, **options.consumer_config()}
            consumers: dict[str, RangeConsumer] = {
                p: new_range_consumer({**config, **variants.get(p, {})}, *PATHS.get(p, PATHS["native-batch"]))
                for p in paths
            }
            times: dict[str, list[float]] = {p: [] for p in paths}
            cpu: dict[str, list[float]] = {p: [] for p in paths}
            broker_cpu: dict[str, list[float]] = {p: [] for p in paths}
            broker = _process(listening_pid(bootstrap))
            for _round in range(args.repeats):
                for path in paths:
                    reader = RangeReader(options, headers=not args.no_headers, consumer=consumers[path])
                    began, began_cpu, began_broker = time.perf_counter(), time.process_time(), _cpu_s(broker)
                    rows, _size = read_all(reader, topic, ends, args.max_rows, args.range_rows)
                    seconds = time.perf_counter() - began
                    cpu[path].append(time.process_time() - began_cpu)
                    broker_cpu[path].append(_cpu_s(broker) - began_broker)
                    if rows != args.records:
                        print(f"  {path}: read {rows:,} rows, expected {args.records:,}", flush=True)
                        failed = True
                    times[path].append(seconds)
            ranges = f", ranges of {args.range_rows:,}" if args.range_rows else ""
            shape = f"{partitions} partition(s), batches of {args.max_rows:,}{ranges}"
            print(f"{args.records:,} records of 110 B, {shape}:")
            base = statistics.median(times["python"]) if "python" in times else None
            for path in paths:
                median = statistics.median(times[path])
                ratio = f"  x{base / median:.1f} python" if base else ""
                runs = ", ".join(f"{args.records / t / 1e6:.2f}" for t in times[path])
                per_m = statistics.median(cpu[path]) / (args.records / 1e6)
                broker_per_m = statistics.median(broker_cpu[path]) / (args.records / 1e6)
                broker_note = f", broker {broker_per_m:4.2f}" if broker is not None else ""
                print(
                    f"  {path:13s} {args.records / median / 1e6:6.2f} M rows/s  {per_m:5.2f} CPU s per M rows"
                    f"{broker_note}  (runs: {runs}){ratio}",
                    flush=True,
                )
    return 1 if failed else 0


def _process(pid: int | None) -> Any:
    import psutil

    return psutil.Process(pid) if pid is not None else None


def _cpu_s(process: Any) -> float:
    """CPU seconds of ``process`` and its threads so far (0 when there is none)."""
    if process is None:
        return 0.0
    times = process.cpu_times()
    return float(times.user + times.system)


if __name__ == "__main__":
    sys.exit(main())
