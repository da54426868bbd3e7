"""Run by the interpreter of a venv the built wheel was installed into (``sluicegate[spark]``),
from outside the checkout, against a Spark standalone cluster whose executors get sluicegate
only from a packed venv in ``spark.archives`` (tests/e2e/test_spark_cluster_wheel.py): how
Spark's "Python Package Management" guide ships dependencies.

The executors' Python is ``./environment/bin/python`` (``PYSPARK_PYTHON``, relative to each
executor's working directory, where Spark unpacks ``PACK#environment``); the driver is this
interpreter. The wheel's jar is in ``spark.jars`` from the JVM's start
(``sluicegate.spark.jvm_read_path_jars()``). Two streams run at once, each
``Trigger.AvailableNow`` in several batches into a ``foreachBatch`` sink that overwrites
``OUT/<query>/batch=<id>`` (a batch run again replaces its own output):

- a Kafka topic by Spark's Kafka options (``subscribe``, ``kafka.bootstrap.servers``);
- a Parquet directory by the ``files`` connector (the default read path).

Prints ``WHERE {json}`` (where sluicegate came from on the driver and in an executor task),
then ``BATCH <query> id=<id>`` after each batch's output is written and ``DONE {json}`` (the
rows each query's progress reports) at the end. Imports nothing from the checkout.

Spark plans a Python data source in Python workers of the driver, started with the same
``PYSPARK_PYTHON``: the driver's working directory must have an ``environment`` too (the
test links it to the driver's venv).

The streams hold until the file HOLD exists (the test creates it once it has killed a
worker): the files stream after its batch HOLD_AFTER, the Kafka stream in the tasks of its
next batch, each of which first leaves a file ``HOLD.gated.<partition>.<attempt>``.

    python cluster_wheel_job.py MASTER BOOTSTRAP TOPIC KAFKA_SOURCE FILES FILES_SOURCE PACK WORKDIR HOLD
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

EXECUTOR_PYTHON = "./environment/bin/python"
MAX_OFFSETS_PER_TRIGGER = 1_000
MAX_FILES_PER_TRIGGER = 1
HOLD_AFTER = 1
"""Both streams wait for the test's signal (the file HOLD) once this batch is written: the
files stream on the driver, the Kafka stream's next batch in its tasks, so that the worker
dies while a Kafka task runs on it and both streams have batches to go."""


def say(line: str) -> None:
    print(line, flush=True)


def probe(_: Any) -> dict[str, Any]:
    """Where an executor's Python worker finds sluicegate and its native reader."""
    import pyspark

    import sluicegate
    import sluicegate._native

    return {
        "sluicegate": sluicegate.__file__,
        "native": sluicegate._native.__file__,
        "pyspark": pyspark.__file__,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "cwd": os.getcwd(),
        "path": sys.path,
    }


def wait_for(path: Path, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout_s} s")
        time.sleep(0.1)


def gated(hold: Path) -> Any:
    """A Python UDF that is true once ``hold`` exists: the first row of each task attempt
    leaves ``HOLD.gated.<partition>.<attempt>`` beside it, then waits. (A plain UDF:
    ``mapInArrow`` would need pandas on the driver.)"""
    from pyspark.sql.functions import udf

    passed: set[tuple[int, int, int]] = set()

    def gate(_: Any) -> bool:
        from pyspark import TaskContext

        task = TaskContext.get()
        attempt = (task.stageId(), task.partitionId(), task.attemptNumber()) if task else (0, 0, 0)
        if attempt not in passed:
            (hold.parent / f"{hold.name}.gated.{attempt[1]}.{attempt[2]}").touch()
            wait_for(hold)
            passed.add(attempt)
        return True

    return udf(gate, "boolean").asNondeterministic()


def start(name: str, frame: Any, out: Path, checkpoint: Path, lock: threading.Lock, hold: Path, in_tasks: bool) -> Any:
    """The stream of ``frame`` into ``OUT/name``. It holds until the file ``hold`` exists:
    ``in_tasks``, in the tasks of its batch HOLD_AFTER + 1 (on the executors, each of them
    running); else after its batch HOLD_AFTER (on the driver, between batches)."""

    def sink(batch: Any, batch_id: int) -> None:
        if in_tasks and batch_id == HOLD_AFTER + 1:
            batch = batch.where(gated(hold)("offset"))
        batch.write.mode("overwrite").parquet(str(out / name / f"batch={batch_id}"))
        with lock:
            say(f"BATCH {name} id={batch_id}")
        if not in_tasks and batch_id == HOLD_AFTER:
            wait_for(hold)

    return (
        frame.writeStream.foreachBatch(sink)
        .queryName(name)
        .option("checkpointLocation", str(checkpoint / name))
        .trigger(availableNow=True)
        .start()
    )


def main() -> int:
    master, bootstrap, topic, kafka_source, files, files_source, pack, workdir, hold = sys.argv[1:10]
    os.environ["PYSPARK_PYTHON"] = EXECUTOR_PYTHON  # before the SparkContext: its pythonExec
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession

    import sluicegate
    import sluicegate.spark

    spark = (
        SparkSession.builder.master(master)
        .appName("sluicegate-cluster-wheel")
        .config("spark.archives", f"{pack}#environment")
        .config("spark.jars", ",".join(sluicegate.spark.jvm_read_path_jars()))
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")  # Spark's "Lost executor" is an error: still shown
    sluicegate.spark.register(spark)

    executors = spark.sparkContext.parallelize(range(2), 2).map(probe).collect()
    say(
        "WHERE "
        + json.dumps(
            {"driver": sluicegate.__file__, "driver_cwd": os.getcwd(), "driver_path": sys.path, "executors": executors}
        )
    )

    out, checkpoint = Path(workdir) / "out", Path(workdir) / "checkpoint"
    kafka = (
        spark.readStream.format("sluicegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
        .option("source", kafka_source)
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition", "offset")
    )
    parquet = (
        spark.readStream.format("sluicegate")
        .option("connector", "files")
        .option("format", "parquet")
        .option("maxFilesPerTrigger", str(MAX_FILES_PER_TRIGGER))
        .option("source", files_source)
        .option("kafka.bootstrap.servers", bootstrap)
        .schema("id BIGINT")
        .load(files)
    )
    lock = threading.Lock()
    queries = [
        start("kafka", kafka, out, checkpoint, lock, Path(hold), in_tasks=True),
        start("files", parquet, out, checkpoint, lock, Path(hold), in_tasks=False),
    ]
    for query in queries:
        query.awaitTermination()
    done = {q.name: sum(p["numInputRows"] for p in q.recentProgress) for q in queries}
    say("DONE " + json.dumps(done))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
