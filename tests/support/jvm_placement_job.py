"""A ``readPath=jvm`` query on a Spark standalone cluster, run by
tests/e2e/test_spark_cluster.py as its own process (the jar must be in ``spark.jars``
from the JVM's start): reads a topic with ``Trigger.AvailableNow`` into the noop sink and
prints, as one JSON line, the executor of every task of every batch, from Spark's REST API.

    python jvm_placement_job.py MASTER_URL BOOTSTRAP TOPIC CHECKPOINT UI_PORT
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

from pyspark.sql import SparkSession

import sluicegate.spark


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def main() -> None:
    master, bootstrap, topic, checkpoint, ui_port = sys.argv[1:6]
    spark = (
        SparkSession.builder.master(master)
        .config("spark.jars", ",".join(sluicegate.spark.jvm_read_path_jars()))
        .config("spark.ui.port", ui_port)
        .config("spark.executor.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sluicegate.spark.register(spark)
    query = (
        spark.readStream.format("sluicegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("readPath", "jvm")
        .option("parallelism", "2")
        .option("source", topic)
        .option("maxOffsetsPerTrigger", "4000")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    api = f"http://127.0.0.1:{ui_port}/api/v1/applications/{spark.sparkContext.applicationId}"
    stages = []
    for stage in sorted(_get(f"{api}/stages?status=complete"), key=lambda s: s["stageId"]):
        tasks = _get(f"{api}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=1000")
        stages.append({str(t["index"]): t["executorId"] for t in tasks})
    print(json.dumps({"rows": rows, "stages": stages}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
