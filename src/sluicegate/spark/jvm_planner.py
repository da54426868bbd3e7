"""The driver's Python half of ``readPath=jvm``: sluicegate's planning, Spark's own readers.

A Python data source costs Spark ~60 ms per micro-batch whatever it reads (a Python
worker per task, the Arrow stream back, the copy into ``UnsafeRow``s:
benchmarks/python_source_floor.py), most of the latency gap to Spark's Kafka source. With
``readPath=jvm`` nothing is read in Python: ``SluicegateSource`` (jvm_sources/, Java) owns
``format("sluicegate")``, and asks a planner here, through Py4J, for offsets and what each
batch reads:

- a kafka query (``KafkaRangePlanner``): Kafka ranges in parts, a Spark task each, whose
  ranges its ``MicroBatchStream`` reads in turn with Spark's own Kafka partition reader
  (Spark's cached consumers, its offset-gap and data-loss handling, its rows);
- a files query (``FileRangePlanner``): whole Parquet files, which its streaming
  ``Source`` reads as a plan of Spark's own Parquet reader (columnar, pruned to the
  columns the query uses, as Spark's file stream source reads them).

The planner is the query's own ``SluicegateStreamReader``, unchanged: the same
coordinator, acknowledgements and offset log as the other paths.
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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.kafka.security import SPARK_SECURITY_OPTIONS, KafkaSecurity, spark_option_for
from sluicegate.protocol.definition import DefinitionMismatchError
from sluicegate.spark import connect_session
from sluicegate.spark.file_options import CONNECTOR as FILES_CONNECTOR
from sluicegate.spark.file_options import schema_ddl
from sluicegate.spark.jvm_classpath import BUILD_COMMAND, SOURCE_CLASS, built
from sluicegate.spark.offsets import SourceOffset
from sluicegate.spark.options import WHOLE_FILES, SparkSourceOptions, option_words_of
from sluicegate.spark.read_path_choice import BY_TRIGGER, PYTHON, QueryFacts, ReadPathChoice, choose

log = logging.getLogger("sluicegate.spark")

BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
RECEIVE_BUFFER_BYTES = "65536"
"""Spark's Kafka source gives its executor consumers this receive buffer unless told."""


def executor_consumer_settings(config: SparkSourceOptions, options: Mapping[str, str], source: Any) -> dict[str, str]:
    """The Java consumer settings of the executors, as Spark's Kafka source makes them from
    the same options: the query's ``kafka.*`` as written, bytes in, no group commits; the
    data cluster and ``read_committed`` from the connector (``source.options``)."""
    security_names = {name.lower() for name in SPARK_SECURITY_OPTIONS}
    settings = {
        str(key)[len("kafka.") :]: str(value)
        for key, value in options.items()
        if str(key).lower().startswith("kafka.")
        and str(key).lower() not in ("kafka.bootstrap.servers", "kafka.group.id", *security_names)
    }
    settings.update(_java_security_settings({str(k).lower(): str(v) for k, v in options.items()}))
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


def _java_security_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The query's security options (lower-cased keys) as a Java client takes them: the
    librdkafka-style names (``kafka.ssl.certificate.location``, ``kafka.ssl.key.location``
    ...) are not the Java client's, which would ignore them and fail the handshake. No
    security option in the query: the driver's environment, as the other paths take it."""
    security = KafkaSecurity.from_spark_options(options)
    if security.protocol == "PLAINTEXT" and "kafka.security.protocol" not in options:
        return {}
    try:
        return security.java_client_settings()
    except ConfigError as exc:
        raise ConfigError(spark_option_for(exc.setting, options), exc.problem) from None


class QueryPlanner:
    """``sluicegate.spark.jvm.StreamPlanner``: a query's ``SluicegateStreamReader`` with its
    offsets as JSON, what both read paths below share."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

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

    def commit(self, end: str) -> None:
        self.reader.commit(json.loads(end))

    def stop(self) -> None:
        self.reader.stop()


class KafkaRangePlanner(QueryPlanner):
    """``sluicegate.spark.jvm.RangePlanner``: a kafka query's partitions as Kafka ranges."""

    def __init__(self, reader: Any, read_settings: dict[str, Any], tasks: int | None = None) -> None:
        super().__init__(reader)
        self.read_settings = read_settings
        self.tasks = tasks
        """The session's task slots: at least this many Spark tasks a batch where there are
        ranges enough, so that a query of fewer subtasks than slots still uses every slot
        (None: unknown, a task a part)."""

    def readSettings(self) -> str:
        return json.dumps(self.read_settings)

    def latestOffsetAndParts(self, start: str, max_rows: int) -> str:
        """``latestOffset``, and the batch from ``start`` to it as parts (a Spark task each):
        Spark plans the batch's partitions twice (in its planning, and again when a
        ``foreachBatch`` sink runs the batch), and each Py4J call there would lengthen the
        micro-batch by ~1-4 ms."""
        end = self.latestOffset(start, max_rows)
        # the offset as the string Spark keeps: Spark compares offsets by their JSON text
        return json.dumps({"end": end, "parts": self._parts(_offset(start), _offset(end))})

    def acknowledge(self, end: str) -> None:
        """Spark wrote ``end`` to its offset log (``datasource.acknowledge_planned``)."""
        self.reader.acknowledge_planned(_offset(end))

    def planParts(self, start: str, end: str) -> str:
        """The parts from ``start`` to ``end``, acknowledging ``end`` (a batch Spark plans
        again after a restart, or one whose parts the stream does not have)."""
        end_offset = _offset(end)
        self.reader.acknowledge_planned(end_offset)
        return json.dumps(self._parts(_offset(start), end_offset))

    def offsetsBehindLatest(self, consumed: str) -> str:
        """Each split's records past ``consumed`` at the last planning, as a JSON list, for
        ``ReportsSourceMetrics``: Spark's ``min/max/avgOffsetsBehindLatest`` in the progress."""
        return json.dumps(self.reader.offsets_behind_latest(json.loads(consumed)))

    def _parts(self, start: SourceOffset, end: SourceOffset) -> list[list[list[Any]]]:
        """The batch's planned parts, each as the ``[topic, partition, from, until]`` ranges
        one Spark task reads in turn: the tasks of the other read paths (a subtask's share,
        cut by ``minPartitions``), spread over the session's task slots where they are fewer
        (``spread_parts``). Spark's own source runs a task per topic partition: at 64
        partitions on 2 cores its JVM spent ~20 % more CPU a row (benchmarks/README.md)."""
        if start == end:
            return []
        parts = (
            [[wire["topic"], wire["partition"], first, until] for wire, first, until in part.ranges if until > first]
            for part in self.reader.planned_parts(start, end)
        )
        return spread_parts([ranges for ranges in parts if ranges], self.tasks or 0)

    class Java:
        implements = ["sluicegate.spark.jvm.RangePlanner"]


def spread_parts(parts: list[list[Any]], tasks: int) -> list[list[Any]]:
    """``parts`` with the one of most ranges halved (whole ranges to each half, in order)
    until there are ``tasks`` parts or none has two ranges; the same parts give the same
    halves, as Spark's two plannings of one batch need."""
    out = [list(part) for part in parts]
    while len(out) < tasks:
        largest = max(range(len(out)), key=lambda i: len(out[i]), default=None)
        if largest is None or len(out[largest]) < 2:
            break
        part = out[largest]
        half = len(part) // 2
        out[largest : largest + 1] = [part[:half], part[half:]]
    return out


def _offset(text: str) -> SourceOffset:
    return SourceOffset.from_json(json.loads(text))


class FileRangePlanner(QueryPlanner):
    """``sluicegate.spark.jvm.FilePlanner``: a files query's partitions as whole files, which
    Spark's Parquet reader reads (the query plans a split a file: options.WHOLE_FILES)."""

    def __init__(self, reader: Any, source: Any) -> None:
        super().__init__(reader)
        self.source = source

    def initialOffset(self) -> str:
        with _source_first_read_in_splits():
            return super().initialOffset()

    def latestOffset(self, start: str, max_rows: int) -> str:
        with _source_first_read_in_splits():
            return super().latestOffset(start, max_rows)

    def planFiles(self, start: str, end: str) -> str:
        # Spark's Source API has no start before a query's first batch: an offset with no
        # splits, so every split of the first batch reads from where it began (offsets.py)
        since = json.loads(start) if start else SourceOffset(checkpoint_id=0).to_json()
        with _source_first_read_in_splits():  # the query's coordination may start here
            partitions = self.reader.partitions(since, json.loads(end))
        files = [
            self._whole_file(wire, first, until)
            for partition in partitions
            for wire, first, until in partition.ranges
            if until > first
        ]
        return json.dumps(files)

    def _whole_file(self, wire: dict[str, Any], first: int, until: int) -> str:
        split = self.source.split_codec.from_wire(wire)
        rows = self.source.split_end(split)
        if first != 0 or until != rows or split.end_group is not None:
            raise ConfigError(
                "readPath",
                f"jvm reads whole files, and this batch reads rows {first}-{until} of {rows} of {split.split_id}: "
                "the query's checkpoint was planned by another read path; finish it with readPath=python",
            )
        return hadoop_url(split.path)

    class Java:
        implements = ["sluicegate.spark.jvm.FilePlanner"]


@contextmanager
def _source_first_read_in_splits() -> Iterator[None]:
    """A files source first read on the Python path (files cut into splits) refuses the JVM
    path's definition (a split a file): the refusal then says how to go on, in the query's
    own words; ``readPath=auto`` takes this path for a Parquet stream, so a query begun in a
    session without the jar meets it at a restart with the jar."""
    try:
        yield
    except DefinitionMismatchError as exc:
        given, committed = exc.given.options.get("split_size_bytes"), exc.committed.options.get("split_size_bytes")
        if given != WHOLE_FILES or committed == WHOLE_FILES:
            raise
        raise ConfigError(
            "readPath",
            f"source {exc.source} was first read on the Python path, which cuts files into splits "
            f"(split_size_bytes {committed or 'default'}), and the JVM path (readPath=jvm, which readPath=auto "
            "takes for a Parquet stream where the session has it) reads whole files: give "
            ".option('readPath', 'python') to go on from this checkpoint, or start the query on a new one",
        ) from exc


def hadoop_url(path: str) -> str:
    """A file of the local file system as Spark's Hadoop file systems name it (a bare path
    would be on the cluster's default file system, HDFS on many)."""
    return f"file://{path}" if path.startswith("/") else f"file:///{path}"


class JvmPlannerFactory:
    """``sluicegate.spark.jvm.PlannerFactory``: a planner per query, from its options, with
    the session's data source class (its task slots)."""

    def __init__(self, data_source: type[Any]) -> None:
        self.data_source = data_source
        self._last_choice: tuple[str, str, str] | None = None

    def check(self, options_json: str, schema_json: str) -> str:
        """The checks of the Python path's ``schema()``: the options, then the connector's
        own (``kafka.*`` names by librdkafka, since the driver plans with it; a files query's
        path and the schema it infers from the first file); the error, or what the rows are."""
        from sluicegate.spark.datasource import range_source

        try:
            config = _config(options_json, schema_json)
            source: Any = range_source(config.connector, config.connector_options)
            if config.connector == FILES_CONNECTOR:
                return json.dumps({"read": "files", "schema": _file_schema(source, schema_json)})
        except ConfigError as exc:
            return json.dumps({"error": str(exc.in_words_of(option_words_of(json.loads(options_json))))})
        return json.dumps({"read": "kafka", "includeHeaders": source.options.include_headers is True})

    def choose(self, options_json: str, trigger: str | None) -> str:
        """``readPath=auto``'s choice for a stream of these options (read_path_choice.py):
        ``{"path": "jvm" | "python" | "trigger", "why": ...}``; ``trigger`` (Spark's trigger
        by its class's name, "" unknown) is None before the query starts. A query whose
        options do not parse goes to the Python path, which fails naming the option as it
        always has. The final choice is logged once a query and path."""
        options: dict[str, str] = json.loads(options_json)
        try:
            config = SparkSourceOptions.from_options(options)
            facts = self._facts(config, trigger)
        except ConfigError as exc:
            return json.dumps({"path": PYTHON, "why": f"the Python path reports it: {exc}"})
        choice = choose(config, options, facts)
        if choice.path != BY_TRIGGER:
            self._log_choice(config, choice, starting=trigger is not None)
        return json.dumps({"path": choice.path, "why": choice.why})

    @staticmethod
    def _facts(config: SparkSourceOptions, trigger: str | None) -> QueryFacts:
        from sluicegate.spark.datasource import range_source

        source: Any = range_source(config.connector, config.connector_options)
        if config.connector == FILES_CONNECTOR:
            return QueryFacts(files_local=source.store().is_local(), trigger=trigger)
        return QueryFacts(reads_natively=bool(source.reads_natively()), trigger=trigger)

    def _log_choice(self, config: SparkSourceOptions, choice: ReadPathChoice, starting: bool) -> None:
        """Spark looks a table up twice as it loads a query (its schema, then the table):
        one line for both; a choice made as a query starts (``starting``: its trigger known)
        is said every time."""
        said = (config.source, choice.path, choice.why)
        if said == self._last_choice and not starting:
            return
        self._last_choice = said
        from sluicegate.spark.datasource import configure_logging

        configure_logging()
        log.info("source %s: readPath=auto chose %s: %s", config.source, choice.path, choice.why)

    def createRangePlanner(self, options_json: str) -> KafkaRangePlanner:
        from sluicegate.spark.datasource import range_source

        options: dict[str, str] = json.loads(options_json)
        config = SparkSourceOptions.from_options(options)
        source: Any = range_source(config.connector, config.connector_options)
        read_settings = {
            "consumer": executor_consumer_settings(config, options, source),
            "failOnDataLoss": source.options.fail_on_data_loss,
            "includeHeaders": source.options.include_headers is True,
            "pollTimeoutMs": source.options.poll_timeout_ms,
        }
        self._log_read_path(config, "Spark's Kafka readers read the planned ranges")
        return KafkaRangePlanner(self._reader(config), read_settings, self.data_source.task_slots)

    def createFilePlanner(self, options_json: str, schema_json: str) -> FileRangePlanner:
        from sluicegate.spark.datasource import range_source

        config = _config(options_json, schema_json)
        self._log_read_path(config, "Spark's Parquet reader reads the planned files")
        return FileRangePlanner(self._reader(config), range_source(config.connector, config.connector_options))

    def _reader(self, config: SparkSourceOptions) -> Any:
        from sluicegate.spark.datasource import SluicegateStreamReader

        return SluicegateStreamReader(config, task_slots=self.data_source.task_slots)

    @staticmethod
    def _log_read_path(config: SparkSourceOptions, what: str) -> None:
        from sluicegate.spark.datasource import configure_logging

        configure_logging()  # the reader's own logs are set up later, at its first offset
        log.info("source %s: readPath=jvm, %s", config.source, what)

    class Java:
        implements = ["sluicegate.spark.jvm.PlannerFactory"]


def _config(options_json: str, schema_json: str) -> SparkSourceOptions:
    """The query's options as the Python path reads them, its schema (a files query's
    ``.schema(...)``, or the one checked before) included as the Python path includes it."""
    return SparkSourceOptions.from_options(json.loads(options_json), schema_ddl=_ddl(schema_json))


def _ddl(schema_json: str) -> str | None:
    if not schema_json:
        return None
    from pyspark.sql.types import StructType

    return schema_ddl(StructType.fromJson(json.loads(schema_json)))


def _file_schema(source: Any, schema_json: str) -> str:
    """The rows' schema as Spark's file source gives it, every column nullable: the query's
    own, or the one the connector reads (inferred from the first file)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructField, StructType

    if not source.store().is_local():
        raise ConfigError(
            "readPath",
            f"jvm reads files of the local file system, and {source.options.path} is not one: Spark's own "
            "file systems would read it, set up apart from the storage.* options (not supported yet)",
        )
    given = StructType.fromJson(json.loads(schema_json)) if schema_json else from_arrow_schema(source.arrow_schema())
    nullable = StructType([StructField(f.name, f.dataType, True, f.metadata) for f in given.fields])
    return nullable.json()


def jvm_class_loadable(spark: Any, name: str) -> bool:
    return bool(spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(name))


def unavailable_reason(spark: Any) -> str | None:
    """None when the session's JVM has the JVM read path, else why not (a line for
    ``readPath=jvm``'s error). Its jar must be on the classpath from the JVM's start
    (``spark.jars``): a jar added later (``ADD JAR``) is seen by the thread that added it
    only, and a query started from another thread would not find ``format("sluicegate")``."""
    if connect_session.is_connect(spark):  # no SparkContext to ask
        return connect_session.JVM_UNAVAILABLE
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
    # Each planner call carries an offset (KBs): without this every call of more than 8 KB
    # waited 40 ms for a delayed TCP acknowledgement (CallbackNoDelay.java says why)
    if not gateway.jvm.sluicegate.spark.jvm.CallbackNoDelay.apply(gateway.java_gateway_server):
        log.warning("readPath=jvm: Py4J's callbacks keep Nagle's algorithm (an unknown Py4J): offsets over 8 KB wait")
    gateway.jvm.sluicegate.spark.jvm.Planners.install(JvmPlannerFactory(data_source))
