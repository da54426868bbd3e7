"""Run by the interpreter of a venv the built wheel was installed into, from outside the
checkout (tests/e2e/test_installed_wheel.py): what a user does after ``pip install``.

Two Spark queries as the README writes them, each ``Trigger.AvailableNow`` into a
``foreachBatch`` sink that counts the rows: a Kafka topic on the default read path, and a
Parquet directory on ``readPath=jvm``. Prints one ``RESULT {json}`` line: where the
modules came from and the rows each query read. Imports nothing from the checkout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def count_rows(query_of: Any, checkpoint: Path) -> int:
    counted: list[int] = []

    def sink(batch: Any, _batch_id: int) -> None:
        counted.append(batch.count())

    query_of.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).trigger(
        availableNow=True
    ).start().awaitTermination()
    return sum(counted)


def main() -> int:
    import pyspark

    import sluicegate
    import sluicegate._native
    from sluicegate.spark.job import spark_session
    from sluicegate_connectors.kafka.read_path import read_path

    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--files", required=True)
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args()

    spark = spark_session("sluicegate-installed-wheel", quiet=True)
    kafka = (
        spark.readStream.format("sluicegate")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    files = (
        spark.readStream.format("sluicegate")
        .option("format", "parquet")
        .option("readPath", "jvm")
        .schema("id BIGINT")
        .load(args.files)
    )
    result = {
        "sluicegate": sluicegate.__file__,
        "native": sluicegate._native.__file__,
        "pyspark": pyspark.__version__,
        "kafka_read_path": read_path(),  # what the executors (this interpreter, local mode) choose
        "kafka_rows": count_rows(kafka, args.workdir / "kafka-checkpoint"),
        "files_rows": count_rows(files, args.workdir / "files-checkpoint"),
        "jars": spark.sparkContext.getConf().get("spark.jars", ""),
    }
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
