"""The driver's Python half of ``readPath=jvm``: sluicegate's planning, Spark's own readers.

A Python data source costs Spark ~60 ms per micro-batch whatever it reads (a Python
worker per task, the Arrow stream back, the copy into ``UnsafeRow``s:
benchmarks/python_source_floor.py), most of the latency gap to Spark's Kafka source. With
``readPath=jvm`` nothing is read in Python: ``SluicegateSource`` (jvm_sources/, Java) owns
``format("sluicegate")``, and for such a query its ``MicroBatchStream`` asks a
``RangePlanner`` here, through Py4J, for offsets and ranges, then hands each range to
Spark's ``KafkaBatchReaderFactory`` (Spark's cached consumers, its offset-gap and data-loss
handling, its rows). The planner is the query's own ``SluicegateStreamReader``,
unchanged: the same coordinator, acknowledgements and offset log as the other paths.
Every other query is forwarded by the Java source to this package's Python data source,
registered as ``sluicegate_python``.

The jar (with Spark's Kafka source) must be on the session's classpath from its start:
``spark.jars`` from ``jvm_classpath.jvm_read_path_jars()`` (sluicegate's ``spark_session`` adds
them when the jar is built). ``register(spark)`` then calls ``install_factory``, which
leaves a ``PlannerFactory`` with the JVM; it needs classic PySpark (Py4J), not Spark
Connect.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.kafka.security import SPARK_SECURITY_OPTIONS, KafkaSecurity
from sluicegate.spark.jvm_classpath import BUILD_COMMAND, SOURCE_CLASS, built
from sluicegate.spark.options import SparkSourceOptions

log = logging.getLogger("sluicegate.spark")

BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
RECEIVE_BUFFER_BYTES = "65536"
"""Spark's Kafka source gives its executor consumers this receive buffer unless told."""


def executor_consumer_settings(config: SparkSourceOptions, options: Mapping[str, str], source: Any) -> dict[str, str]:
    """The Java consumer settings of the executors, as Spark's Kafka source makes them from
    the same options: the query's ``kafka.*`` as written, bytes in, no group commits; the
    data cluster and ``read_committed`` from the connector (``source.options``)."""
    given = {str(k).lower() for k in options}
    settings = {
        str(key)[len("kafka.") :]: str(value)
        for key, value in options.items()
        if str(key).lower().startswith("kafka.")
        and str(key).lower() not in ("kafka.bootstrap.servers", "kafka.group.id")
    }
    if not any(name.lower() in given for name in SPARK_SECURITY_OPTIONS):
        # no security option in the query: the driver's environment, as the other paths take it
        security = KafkaSecurity.from_spark_options({})
        if security.protocol != "PLAINTEXT":
            settings.update({k[len("kafka.") :]: v for k, v in security.spark_options().items()})
    settings.setdefault("receive.buffer.bytes", RECEIVE_BUFFER_BYTES)
    settings.update(
        {
            "bootstrap.servers": source.options.bootstrap_servers,
            "group.id": f"sluicegate-{config.source}-executor",
            "key.deserializer": BYTES,
            "value.deserializer": BYTES,
            "auto.offset.reset": "none",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
        }
    )
    return settings


class KafkaRangePlanner:
    """``sluicegate.spark.jvm.RangePlanner``: a query's ``SluicegateStreamReader`` with its
    offsets as JSON and its partitions as Kafka ranges."""

    def __init__(self, reader: Any, read_settings: dict[str, Any]) -> None:
        self.reader = reader
        self.read_settings = read_settings

    def readSettings(self) -> str:
        return json.dumps(self.read_settings)

    def initialOffset(self) -> str:
        return json.dumps(self.reader.initialOffset())

    def defaultMaxRows(self) -> int:
        return int(self.reader.config.max_records_per_trigger or 0)

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
        implements = ["sluicegate.spark.jvm.RangePlanner"]


class KafkaPlannerFactory:
    """``sluicegate.spark.jvm.PlannerFactory``: a planner per query, from its options, with
    the session's data source class (its task slots)."""

    def __init__(self, data_source: type[Any]) -> None:
        self.data_source = data_source

    def check(self, options_json: str) -> str:
        """The checks of the Python path's ``schema()``: the options, then the connector's
        own (``kafka.*`` names by librdkafka, since the driver plans with it); the error,
        or whether the rows have a headers column (``includeHeaders``)."""
        from sluicegate.spark.datasource import range_source

        try:
            config = SparkSourceOptions.from_options(json.loads(options_json))
            source: Any = range_source(config.connector, config.connector_options)
        except ConfigError as exc:
            return json.dumps({"error": str(exc)})
        return json.dumps({"includeHeaders": source.options.include_headers is True})

    def create(self, options_json: str) -> KafkaRangePlanner:
        from sluicegate.spark.datasource import SluicegateStreamReader, range_source

        options: dict[str, str] = json.loads(options_json)
        config = SparkSourceOptions.from_options(options)
        source: Any = range_source(config.connector, config.connector_options)
        read_settings = {
            "consumer": executor_consumer_settings(config, options, source),
            "failOnDataLoss": source.options.fail_on_data_loss,
            "includeHeaders": source.options.include_headers is True,
            "pollTimeoutMs": source.options.poll_timeout_ms,
        }
        reader = SluicegateStreamReader(config, task_slots=self.data_source.task_slots)
        log.info("source %s: readPath=jvm, Spark's Kafka readers read the planned ranges", config.source)
        return KafkaRangePlanner(reader, read_settings)

    class Java:
        implements = ["sluicegate.spark.jvm.PlannerFactory"]


def jvm_class_loadable(spark: Any, name: str) -> bool:
    return bool(spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(name))


def unavailable_reason(spark: Any) -> str | None:
    """None when the session's JVM has the JVM read path, else why not (a line for
    ``readPath=jvm``'s error). Its jar must be on the classpath from the JVM's start
    (``spark.jars``): a jar added later (``ADD JAR``) is seen by the thread that added it
    only, and a query started from another thread would not find ``format("sluicegate")``."""
    if getattr(spark.sparkContext, "_gateway", None) is None:
        return "it needs classic PySpark (Py4J): this session has no driver-side JVM gateway"
    if jvm_class_loadable(spark, SOURCE_CLASS):
        return None
    if built() is None:
        return f"its jar is not built for these sources: {BUILD_COMMAND}"
    return (
        "its jar is not in this session: start the session with "
        "spark.jars=','.join(sluicegate.spark.jvm_read_path_jars()) (sluicegate's spark_session does)"
    )


def install_factory(spark: Any, data_source: type[Any]) -> None:
    """Leave the session's planner factory with its JVM (the Java source asks it for each
    ``readPath=jvm`` query); Py4J's callback server carries the calls back to this process."""
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    gateway.jvm.sluicegate.spark.jvm.Planners.install(KafkaPlannerFactory(data_source))
