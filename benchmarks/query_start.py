"""How long a Spark query takes to start and end, through Spark's own Kafka source and
through ``format("sluicegate")`` (issue 54: a query's whole life), each side in a Spark
process of its own, alternating, on one topic of one broker.

Each repetition starts a Spark session (its JVM and Python workers cold) and runs, with
``Trigger.AvailableNow`` into ``foreachBatch`` (``count()``), after new records each time:

1. ``first``: a query's first run in the fresh session, on a fresh checkpoint;
2. ``again``: the same query restarted from its checkpoint (a daily job's next run);
3. ``other``: a second query with a fresh checkpoint, the session warm.

Prints, per run kind and side, the median seconds from ``start()`` to the first batch
and to the query's end, and sluicegate's ratio to Spark's.

    .venv/bin/python benchmarks/query_start.py --repetitions 3
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kafka_clients import bench_broker

SIDES = ("spark", "sluicegate")
RUNS = ("first", "again", "other")
RECORDS = 1_000


def one_side(side: str, bootstrap: str, topic: str) -> dict[str, tuple[float, float]]:
    """In this process: a Spark session and the three runs; {run: (to first batch, to end)}."""
    from confluent_kafka import Producer

    from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars
    from sluicegate.spark.job import spark_session

    spark = spark_session(
        "query-start", quiet=True, extra_conf={"spark.jars": ",".join(map(str, ensure_spark_kafka_jars()))}
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    checkpoints = Path(tempfile.mkdtemp(prefix="query-start-"))
    out: dict[str, tuple[float, float]] = {}
    for run, checkpoint in zip(RUNS, ("query", "query", "other"), strict=True):
        for n in range(RECORDS):
            producer.produce(topic, str(n).encode(), partition=n % 4)
        assert producer.flush(30) == 0
        first: list[float] = []
        started = time.monotonic()

        def batch(frame: Any, batch_id: int, first: list[float] = first, started: float = started) -> None:
            frame.count()
            first.append(time.monotonic() - started)

        frame = (
            spark.readStream.format("kafka" if side == "spark" else "sluicegate")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            frame.writeStream.foreachBatch(batch)
            .option("checkpointLocation", str(checkpoints / checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert first, f"{side} {run}: no batch ran"
        out[run] = (first[0], time.monotonic() - started)
    spark.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # one side, in a child process
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(one_side(args.side, args.bootstrap, args.topic)))
        return 0
    with bench_broker(args.bootstrap_servers) as bootstrap:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        seen: dict[str, dict[str, list[tuple[float, float]]]] = {s: {r: [] for r in RUNS} for s in SIDES}
        for rep in range(args.repetitions):
            for side in SIDES if rep % 2 == 0 else reversed(SIDES):
                topic = f"query-start-{secrets.token_hex(3)}"
                admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
                child = subprocess.run(
                    [sys.executable, __file__, "--side", side, "--bootstrap", bootstrap, "--topic", topic],
                    capture_output=True,
                    text=True,
                    env=os.environ,
                    check=True,
                    timeout=900,
                )
                result = json.loads(child.stdout.strip().splitlines()[-1])
                for run in RUNS:
                    seen[side][run].append(tuple(result[run]))
                summary = ", ".join(f"{run} {result[run][0]:.1f}/{result[run][1]:.1f} s" for run in RUNS)
                print(f"repetition {rep + 1} {side}: {summary} (first batch / end)", flush=True)
    print(
        f"\nmedians of {args.repetitions} repetitions, seconds from start() "
        f"(Trigger.AvailableNow, {RECORDS:,} records a run)"
    )
    print(f"{'run':<7} {'side':<11} {'first batch':>11} {'end':>6}   sluicegate / spark")
    for run in RUNS:
        medians = {s: [statistics.median(x[i] for x in seen[s][run]) for i in (0, 1)] for s in SIDES}
        for side in SIDES:
            first, end = medians[side]
            ratio = ""
            if side == "sluicegate":
                ratio = f"   {first / medians['spark'][0]:.2f}x / {end / medians['spark'][1]:.2f}x"
            print(f"{run:<7} {side:<11} {first:>11.2f} {end:>6.2f}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
