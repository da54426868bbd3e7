"""How long a running ``subscribePattern`` stream takes to read a topic created while it
runs: Spark's own Kafka source against ``format("sluicegate")``, side by side.

Each repetition runs both sides, alternating which goes first: a stream of the pattern
(processing time, ``0 seconds``) runs until its first batches are done, then a topic that
matches is created and one record written to it; the figure is the time from the topic's
creation to the end of the batch that read its record. Prints each side's delays, the
medians and the ratio paired by repetition (paired.py).

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/new_topic_delay.py --repetitions 3

Without KAFKA_BOOTSTRAP_SERVERS it uses the benchmarks' kept local broker (kafka_clients.py).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_clients import bench_broker
from paired import paired_ratios, paired_text

from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars
from sluicegate.spark.job import spark_session

SIDES = ("kafka", "sluicegate")
WARM_S = 15.0
"""How long a stream runs before the new topic comes (its first batches, Python workers)."""
WAIT_S = 90.0


def create_topic(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def delay_of_new_topic(spark: Any, side: str, bootstrap: str, prefix: str, work: Path) -> float | None:
    """Seconds from creating a matching topic to the end of the batch that read its record."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new_topic = f"{prefix}-{side}-new"
    read_at: list[float] = []

    def batch(frame: Any, batch_id: int) -> None:
        if frame.filter(frame.topic == new_topic).count():
            read_at.append(time.monotonic())

    frame = (
        spark.readStream.format(side)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", f"{prefix}-.*")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        frame.writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(work / f"{prefix}-{side}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        time.sleep(WARM_S)
        created = time.monotonic()
        create_topic(admin, new_topic)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(new_topic, b"new")
        producer.flush(10)
        while not read_at and time.monotonic() - created < WAIT_S:
            time.sleep(0.05)
        return read_at[0] - created if read_at else None
    finally:
        query.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="new-topic-")))
        bootstrap = stack.enter_context(bench_broker(os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")))
        jars = ",".join(str(p) for p in ensure_spark_kafka_jars())
        spark = spark_session("new-topic-delay", quiet=True, extra_conf={"spark.jars": jars})
        delays: dict[str, dict[int, float]] = {side: {} for side in SIDES}
        for repetition in range(args.repetitions):
            prefix = f"nt{secrets.token_hex(3)}"
            create_topic(AdminClient({"bootstrap.servers": bootstrap}), f"{prefix}-first")
            order = SIDES if repetition % 2 == 0 else SIDES[::-1]
            for side in order:
                delay = delay_of_new_topic(spark, side, bootstrap, prefix, work)
                shown = "not read" if delay is None else f"{delay:.2f} s"
                print(f"repetition {repetition + 1}, {side}: a new topic read after {shown}", flush=True)
                if delay is not None:
                    delays[side][repetition] = delay
        spark.stop()
    for side in SIDES:
        got = list(delays[side].values())
        print(f"{side}: median {statistics.median(got):.2f} s over {len(got)}" if got else f"{side}: never read")
    print("sluicegate / Spark's source, delay:", paired_text(paired_ratios(delays["sluicegate"], delays["kafka"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
