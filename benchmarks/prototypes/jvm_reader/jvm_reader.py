"""Issue 18 prototype: sluicegate's planning with Spark's own (JVM) Kafka partition readers.

For measurement only: not part of the product, of ``make install`` or of the tests.

A Python data source in Spark 4.3 costs every micro-batch ~60 ms of ``addBatch`` whatever it
reads (benchmarks/python_source_floor.py): the Python worker call of each task, the Arrow
stream back, the copy of its rows into ``UnsafeRow``s. This prototype asks what a JVM-side
reader of the *same planned ranges* would gain. The query's ``SluicegateStreamReader`` (the
product's, unchanged: its coordinator, its acknowledgements, its offsets) runs in the driver's
Python process; a small Java ``MicroBatchStream`` (java/) calls it through Py4J for its offsets
and its ranges, and hands each range to Spark's own ``KafkaBatchReaderFactory``. Executors read
with Spark's cached Java consumers and Spark's row conversion; no Python worker is started.

What it leaves out (it is a measurement): event-time probes and read reports from executors,
headers, the files connector, the fallback without a JDK.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from sluicegate.devtools.broker.maven import cache_root, ensure_spark_kafka_jars
from sluicegate.spark.datasource import SluicegateDataSource

JAVA_SOURCES = Path(__file__).resolve().parent / "java"
SOURCE_CLASS = "sluicegate.prototype.JvmRangeSource"


def build_jar() -> Path:
    """The prototype's jar, compiled (javac 17, ~2 s) when a source is newer than it."""
    import pyspark

    out = cache_root() / "jvm-reader-prototype"
    jar = out / "sluicegate-jvm-reader-prototype.jar"
    sources = sorted(JAVA_SOURCES.rglob("*.java"))
    if jar.is_file() and jar.stat().st_mtime >= max(s.stat().st_mtime for s in sources):
        return jar
    classes = out / "classes"
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    spark_jars = Path(pyspark.__file__).parent / "jars"
    classpath = ":".join([f"{spark_jars}/*", *(str(p) for p in ensure_spark_kafka_jars())])
    subprocess.run(
        ["javac", "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes), *map(str, sources)], check=True
    )
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True)
    return jar


def spark_jars() -> list[str]:
    """What ``spark.jars`` needs for this source: Spark's Kafka source and the prototype."""
    return [*(str(p) for p in ensure_spark_kafka_jars()), str(build_jar())]


class PythonPlanner:
    """``sluicegate.prototype.RangePlanner`` in Python: the product's stream reader, its
    offsets as JSON, its partitions as Kafka ranges."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def initialOffset(self) -> str:
        return json.dumps(self.reader.initialOffset())

    def defaultMaxRows(self) -> int:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        limit = self.reader.getDefaultReadLimit()
        return limit.max_rows if isinstance(limit, ReadMaxRows) else 0

    def latestOffset(self, start: str, max_rows: int) -> str:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        limit = ReadMaxRows(max_rows) if max_rows > 0 else ReadAllAvailable()
        return json.dumps(self.reader.latestOffset(json.loads(start), limit))

    def prepareForTriggerAvailableNow(self) -> None:
        self.reader.prepareForTriggerAvailableNow()

    def planRanges(self, start: str, end: str) -> str:
        ranges = [
            [wire["topic"], wire["partition"], first, until]
            for partition in self.reader.partitions(json.loads(start), json.loads(end))
            for wire, first, until in partition.ranges
            if until > first
        ]
        return json.dumps(ranges)

    def commit(self, end: str) -> None:
        self.reader.commit(json.loads(end))

    def stop(self) -> None:
        self.reader.stop()

    class Java:
        implements = ["sluicegate.prototype.RangePlanner"]


def jvm_stream_reader(spark: Any, options: dict[str, str], consumer_options: dict[str, str]) -> Any:
    """``spark.readStream`` of the prototype: ``options`` are format("sluicegate")'s, the
    ``consumer_options`` (``kafka.*``, as Spark's Kafka source takes them) go to Spark's
    executor consumers."""
    from pyspark.java_gateway import ensure_callback_server_started

    source = SluicegateDataSource(options)
    reader = source.streamReader(source.schema())
    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    name = f"planner-{secrets.token_hex(4)}"
    gateway.jvm.sluicegate.prototype.PlannerRegistry.put(name, PythonPlanner(reader))
    stream = spark.readStream.format(SOURCE_CLASS).option("planner", name)
    stream = stream.option("kafka.bootstrap.servers", options["kafka.bootstrap.servers"])
    for key, value in consumer_options.items():
        stream = stream.option(key, value)
    return stream
