"""The options of ``spark.readStream.format("sluicegate")``, parsed once and checked.

Keys are case-insensitive; a bad value raises ConfigError naming the option as
the user wrote it.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import checked_host, checked_port, int_option, unknown_option
from sluicegate.coordinator.embedded import CoordinatorMode, EmbeddedCoordinator
from sluicegate.kafka.security import SPARK_SECURITY_OPTIONS, KafkaSecurity
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.names import validate_namespace, validate_source
from sluicegate.protocol.timing import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS
from sluicegate.reader.timing import KAFKA_WAIT_S
from sluicegate.spark.driver import TOPIC_WAIT_TIMEOUT_S, DriverSettings
from sluicegate.spark.file_options import CONNECTOR as FILES_CONNECTOR
from sluicegate.spark.file_options import SPARK_NAMES as FILE_NAMES
from sluicegate.spark.file_options import derived_source_name as derived_file_source_name
from sluicegate.spark.file_options import (
    is_spark_file_option,
    names_a_path,
    read_spark_file_options,
)
from sluicegate.spark.kafka_options import (
    CONNECTOR as KAFKA_CONNECTOR,
)
from sluicegate.spark.kafka_options import (
    SPARK_NAMES,
    SparkKafkaOptions,
    derived_source_name,
    is_spark_kafka_option,
    names_a_subscription,
    read_spark_kafka_options,
)
from sluicegate.spark.option_words import CONNECTOR_PREFIX, OptionWords
from sluicegate.spark.read_reports import driver_host, report_url
from sluicegate.spark.source_identity import OWN_MARK

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"

READ_PATHS = ("auto", "native", "python", "jvm")
"""``readPath``: how executors read the kafka and files connectors' ranges. ``native`` and
``python`` are the kafka connector's own ``read_path`` (in Spark's Python workers; for
files ``python`` is the connector's one reader there); ``jvm`` is Spark's own readers in
the executors' JVM, its Kafka readers or its Parquet reader (jvm_planner.py). ``auto`` (the
default) chooses between the Python data source and the JVM path by what the benchmarks
measured, where the session has the JVM path (read_path_choice.py); on the Python data
source it is the kafka connector's own ``auto``."""
JVM = "jvm"
WHOLE_FILES = "0"
"""The files connector's ``split_size_bytes`` under ``readPath=jvm``: a split a file, which
Spark's Parquet reader reads whole (and cuts into tasks itself when it is large)."""

STREAM_ONLY = (
    "source",
    "parallelism",
    "controlBootstrapServers",
    "namespace",
    "maxRecordsPerTrigger",
    "heartbeatIntervalMs",
    "sessionTimeoutMs",
    "topicWaitTimeoutS",
    "kafkaWaitS",
    "alignmentMaxDriftMs",
    "splitIdleTimeoutMs",
    "metricsPort",
    "metricsHost",
    "coordinator",
)
"""Options of a stream's coordination and trigger, which a batch query (one read, no
coordinator) accepts and logs once as not used."""

KNOWN = (
    *STREAM_ONLY,
    "connector",
    "connectorOptions",
    "kafka.bootstrap.servers",
    "arrowBatchRows",
    "readPath",
    *SPARK_SECURITY_OPTIONS,
)
"""Every option of ``format("sluicegate")`` besides ``option.<connector option>`` and
Spark's Kafka and file source options (kafka_options.py, file_options.py): anything else
fails at ``load()`` (an option nobody reads would change nothing without a word)."""
OWN_NAMES = (*KNOWN, *SPARK_NAMES, *FILE_NAMES)
"""Every option name a query gives sluicegate's Spark source, besides its connector's."""


@dataclass(frozen=True)
class SparkSourceOptions:
    """The options of ``format("sluicegate")`` (keys are case-insensitive).

    ``source``, ``parallelism``: the source name and its number of reader subtasks
    (= Spark partitions per batch); ``connector`` (default ``kafka`` when the query names
    ``subscribe``, ``subscribePattern`` or ``assign``, else ``sequence``) with its options as
    ``option.<key>`` (or a JSON object in ``connectorOptions``); for the kafka connector,
    Spark's Kafka source options with Spark's meaning (kafka_options.py), and then
    ``source`` (derived from the subscription) and ``parallelism`` (the partitions read at
    the query's first start, at most the session's task slots) may be left out. ``kafka.bootstrap.servers`` (default
    ``$KAFKA_BOOTSTRAP_SERVERS``): the data cluster of the kafka connector, and the control
    cluster unless ``controlBootstrapServers`` names another; ``namespace``;
    ``maxRecordsPerTrigger`` (``maxOffsetsPerTrigger``); ``heartbeatIntervalMs``,
    ``sessionTimeoutMs``, ``topicWaitTimeoutS``, ``kafkaWaitS``; ``arrowBatchRows``;
    ``alignmentMaxDriftMs``; ``splitIdleTimeoutMs`` (0, the default: off);
    ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
    ``kafka.ssl.truststore.location`` ... as Spark's Kafka source names them
    (docs/deploy.md, "Security"; default: the driver's SLUICEGATE_KAFKA_* environment).
    ``metricsPort`` (Prometheus metrics served from the driver, executors' reads included;
    0, the default: off) and ``metricsHost`` (the driver's address executors send their
    read figures to; default: its address towards the Kafka bootstrap servers).
    ``coordinator``: ``auto`` (the default: the driver coordinates the source when nobody
    else does), ``embedded`` (at once) or ``external`` (a deployed coordinator must).
    ``readPath`` (kafka and files connectors): ``auto``, ``native`` (kafka), ``python`` or ``jvm`` (READ_PATHS).
    """

    source: str
    parallelism: int | None
    """None: not given; the driver takes the source's suggestion (datasource.py)."""
    source_named: bool = True
    """Whether the query named its source. A stream that did not reads one of its own
    (source_identity.py): ``source`` is then the name derived from what it reads, until the
    driver learns the query's own (``with_source``)."""
    connector: str = "sequence"
    connector_options: tuple[tuple[str, str], ...] = ()
    option_words: OptionWords = field(default_factory=OptionWords)
    """The connector's options as this query names them, for its messages (option_words.py)."""
    bootstrap_servers: str = ""
    """The control cluster."""
    namespace: str = "sluicegate"
    max_records_per_trigger: int | None = None
    min_records_per_trigger: int | None = None
    """Spark's ``minOffsetsPerTrigger``: no batch for fewer, until ``max_trigger_delay_ms``."""
    max_trigger_delay_ms: int = 15 * 60 * 1000
    max_splits_per_trigger: int | None = None
    """Spark's ``maxFilesPerTrigger`` (files): at most this many splits read in a batch."""
    min_partitions: int | None = None
    """Spark's ``minPartitions``: large ranges are cut so that a batch has at least this
    many Spark partitions."""
    max_records_per_partition: int | None = None
    """Spark's ``maxRecordsPerPartition``: no Spark partition reads more rows than this."""
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    topic_wait_timeout_s: float = TOPIC_WAIT_TIMEOUT_S
    kafka_wait_s: int = int(KAFKA_WAIT_S)
    arrow_batch_rows: int = 65_536
    alignment_max_drift_ms: int | None = None
    """Planning-time event-time alignment: no split is planned past the earliest next
    event time of the query's splits plus this (needs a connector with event_time_at)."""
    split_idle_timeout_ms: int = 0
    """A split whose planned position did not advance for this long stops holding its
    subtask's watermark back (split idleness); 0: off. Positions move once per micro-batch,
    so keep it well above the trigger interval."""
    security: KafkaSecurity = field(default_factory=KafkaSecurity, compare=False)
    """kafka.security.protocol, kafka.sasl.*, kafka.ssl.* as Spark's Kafka source names them
    (security.KafkaSecurity.from_spark_options)."""
    metrics_port: int = 0
    metrics_host: str | None = None
    """Where executors reach the driver's metrics endpoint (None: found, read_reports.py)."""
    coordinator: CoordinatorMode = CoordinatorMode.AUTO
    """Whether the driver coordinates the source itself when nobody does
    (coordinator/embedded.py): ``auto``, ``embedded`` or ``external``."""
    read_path: str = "auto"
    """``readPath`` (READ_PATHS); other than ``jvm`` it is also the connector's ``read_path``."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """Lines the driver logs once at the query's start (derived names, options not used,
    deprecated names)."""

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], batch: bool = False, schema_ddl: str | None = None
    ) -> SparkSourceOptions:
        """``batch``: the options of a batch query (``spark.read``), which reads once with no
        coordinator: Spark's batch defaults for the kafka connector, and the options of a
        stream only (``STREAM_ONLY``) logged as not used. ``schema_ddl``: the query's schema
        (``.schema(...)``, or the one the source gave), which a files query that names its
        path Spark's way reads its files into."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        connector_options = _connector_options(opts)
        connector = _connector_of(opts)
        check_known(opts, connector)
        environment = os.environ.get(BOOTSTRAP_ENV, "").strip()
        read_path = _read_path(opts, connector, batch)
        kafka = (
            read_spark_kafka_options(opts, connector_options, environment, batch=batch, jvm=read_path == JVM)
            if connector == KAFKA_CONNECTOR
            else None
        )
        files = (
            read_spark_file_options(opts, connector_options, schema_ddl)
            if connector == FILES_CONNECTOR and names_a_path(opts)
            else None
        )
        notes = list(kafka.notes if kafka else files.notes if files else ())
        if kafka is not None:
            connector_options = _with_read_path(dict(kafka.connector_options), read_path, "readpath" in opts)
        if read_path == JVM and "arrowbatchrows" in opts:
            notes.append("option arrowBatchRows is not used by readPath=jvm: Spark's readers build its rows")
        if files is not None:
            connector_options = dict(files.connector_options)
        if read_path == JVM and connector == FILES_CONNECTOR:
            connector_options = _whole_files(connector_options, opts)
        if batch:
            notes += [f"option {name} is not used by a batch query" for name in STREAM_ONLY if name.lower() in opts]
        source = opts.get("source", "").strip()
        if not source and batch:
            source = "batch"  # no control topic is touched: the name is only for the logs
        elif not source:
            if kafka is not None:
                source = derived_source_name(connector_options)
            elif files is not None:
                source = derived_file_source_name(connector_options["path"])
            elif "connector" not in opts and not connector_options:  # nothing says what to read: as Spark says it
                raise ConfigError(
                    "subscribe",
                    "one of subscribe, subscribePattern or assign must be given (what to read, as in Spark's "
                    "Kafka source), or load(path) for files",
                )
            else:
                raise ConfigError("source", "is required: .option('source', NAME)")
            notes.append(
                f"source name not given: this query reads a source of its own, {source}{OWN_MARK}..., "
                "named in its checkpoint (the same on every restart, another for every other query); "
                "name one with .option('source', NAME) to share it with a deployed coordinator or readers"
            )
        validate_source(source)
        control = opts.get("controlbootstrapservers") or opts.get("kafka.bootstrap.servers") or environment
        return cls(
            source=source,
            option_words=OptionWords.of(opts, connector, OWN_NAMES),
            source_named=batch or bool(opts.get("source", "").strip()),
            parallelism=int_option(opts, "parallelism", None, 1) if "parallelism" in opts else None,
            connector=connector,
            connector_options=tuple(sorted(connector_options.items())),
            bootstrap_servers=control.strip(),
            namespace=validate_namespace(opts.get("namespace", "sluicegate")),
            max_records_per_trigger=_max_per_trigger(opts, kafka),
            max_splits_per_trigger=files.max_files_per_trigger if files else None,
            min_records_per_trigger=kafka.min_offsets_per_trigger if kafka else None,
            max_trigger_delay_ms=kafka.max_trigger_delay_ms if kafka else 15 * 60 * 1000,
            min_partitions=kafka.min_partitions if kafka else None,
            max_records_per_partition=kafka.max_records_per_partition if kafka else None,
            heartbeat_interval_ms=int_option(opts, "heartbeatintervalms", HEARTBEAT_INTERVAL_MS, 10),
            session_timeout_ms=int_option(opts, "sessiontimeoutms", SESSION_TIMEOUT_MS, 100),
            topic_wait_timeout_s=float(int_option(opts, "topicwaittimeouts", int(TOPIC_WAIT_TIMEOUT_S), 0)),
            kafka_wait_s=int_option(opts, "kafkawaits", int(KAFKA_WAIT_S), 1),
            arrow_batch_rows=int_option(opts, "arrowbatchrows", 65_536, 1),
            alignment_max_drift_ms=(
                int_option(opts, "alignmentmaxdriftms", None, 0) if "alignmentmaxdriftms" in opts else None
            ),
            split_idle_timeout_ms=int_option(opts, "splitidletimeoutms", 0, 0),
            security=KafkaSecurity.from_spark_options(opts),
            metrics_port=_port_option(opts, "metricsport"),
            metrics_host=_host_option(opts, "metricshost"),
            coordinator=CoordinatorMode.parse(opts.get("coordinator", "auto"), "coordinator"),
            read_path=read_path,
            notes=tuple(notes),
        )

    @property
    def options(self) -> dict[str, str]:
        return dict(self.connector_options)

    def check_control_cluster(self) -> None:
        """A stream keeps its coordination in Kafka: ConfigError when no control cluster is
        named (a batch query needs none)."""
        if not self.bootstrap_servers.strip():
            raise ConfigError(
                "kafka.bootstrap.servers",
                "not set: a stream keeps sluicegate's control topics in Kafka; give kafka.bootstrap.servers "
                f"(or controlBootstrapServers), or set {BOOTSTRAP_ENV} in the driver's environment",
            )

    def with_parallelism(self, parallelism: int) -> SparkSourceOptions:
        return replace(self, parallelism=parallelism)

    def with_source(self, source: str) -> SparkSourceOptions:
        return replace(self, source=source)

    def embedded_coordinator(self) -> EmbeddedCoordinator:
        """The coordinator this query's driver runs when nobody else serves its source
        (``coordinator``; external: one that never starts). A source it sets up gets the
        query's parallelism as its max_parallelism."""
        return EmbeddedCoordinator(
            self.source,
            self.connector,
            dict(self.connector_options),
            self.bootstrap_servers,
            self.namespace,
            self.coordinator,
            new_source_parallelism=self.parallelism,
            session_timeout_ms=self.session_timeout_ms,
            security=self.security,
        )

    def report_url(self) -> str | None:
        """Where executors send what they read (the driver's metrics endpoint), if it serves."""
        if not self.metrics_port:
            return None
        return report_url(self.metrics_host or driver_host(self.bootstrap_servers), self.metrics_port)

    def driver_settings(self) -> DriverSettings:
        if self.parallelism is None:
            raise ConfigError("parallelism", "is required: .option('parallelism', N)")
        return DriverSettings(
            source=self.source,
            parallelism=self.parallelism,
            bootstrap_servers=self.bootstrap_servers,
            namespace=self.namespace,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            session_timeout_ms=self.session_timeout_ms,
            topic_wait_timeout_s=self.topic_wait_timeout_s,
            kafka_wait_s=self.kafka_wait_s,
            split_idle_timeout_ms=self.split_idle_timeout_ms,
            security=self.security,
            metrics_port=self.metrics_port,
            definition=SourceDefinition.of(self.connector, dict(self.connector_options)),
        )


def _connector_options(opts: Mapping[str, str]) -> dict[str, str]:
    """``option.<key>`` and ``connectorOptions`` (a JSON object): the connector's own names."""
    connector_options: dict[str, str] = {}
    raw_json = opts.get("connectoroptions")
    if raw_json:
        try:
            parsed = json.loads(raw_json)
        except ValueError as exc:
            raise ConfigError("connectorOptions", f"must be a JSON object: {exc}") from None
        if not isinstance(parsed, dict):
            raise ConfigError("connectorOptions", "must be a JSON object")
        connector_options.update({str(k): str(v) for k, v in parsed.items()})
    for key, value in opts.items():
        if key.startswith(CONNECTOR_PREFIX):
            connector_options[key[len(CONNECTOR_PREFIX) :]] = value
    return connector_options


def _read_path(opts: Mapping[str, str], connector: str, batch: bool) -> str:
    """``readPath``, checked against what the query reads; ``jvm`` against what the JVM
    read path leaves out (it reads with Spark's own Kafka readers, in no Python worker)."""
    text = opts.get("readpath")
    if text is None:
        return "auto"
    path = text.strip().lower()
    if path not in READ_PATHS:
        raise ConfigError("readPath", f"must be {', '.join(READ_PATHS[:-1])} or {READ_PATHS[-1]}, got {text!r}")
    if connector not in (KAFKA_CONNECTOR, FILES_CONNECTOR):
        raise ConfigError(
            "readPath", f"chooses how the kafka and files connectors are read, and this query reads {connector}"
        )
    if connector == FILES_CONNECTOR and path == "native":
        raise ConfigError(
            "readPath", "native is the kafka connector's: files are read by python or jvm (auto, the default, chooses)"
        )
    if path != JVM:
        return path
    if batch:
        raise ConfigError("readPath", "jvm reads streams (spark.readStream): a batch query reads with the others")
    if "metricsport" in opts and opts["metricsport"].strip() != "0":
        raise ConfigError(
            "readPath",
            "jvm has no executor-side read figures for metricsPort (Spark's own readers report none): "
            "leave one of them out",
        )
    return path


def _whole_files(connector_options: Mapping[str, str], opts: Mapping[str, str]) -> dict[str, str]:
    """The files connector's options under ``readPath=jvm``, where Spark's Parquet reader
    reads every planned file whole: Parquet only, a split a file, and no row limit that
    would end a batch inside a file (``maxFilesPerTrigger`` limits batches, as in Spark)."""
    fmt = connector_options.get("format", "").strip().lower()
    if fmt != "parquet":
        raise ConfigError(
            "readPath",
            f"jvm reads Parquet with Spark's reader, and this query reads {fmt or 'files by their extension'}: "
            "read Parquet (format parquet) or leave readPath out",
        )
    if "maxrecordspertrigger" in opts:
        raise ConfigError(
            "maxRecordsPerTrigger",
            "would end a batch inside a file, and readPath=jvm reads whole files: "
            "limit batches with maxFilesPerTrigger",
        )
    if "split_size_bytes" in connector_options:
        raise ConfigError(
            "option.split_size_bytes",
            "is not used by readPath=jvm: it plans a split a file, and Spark cuts a large file into tasks itself",
        )
    return {**connector_options, "split_size_bytes": WHOLE_FILES}


def _with_read_path(connector_options: dict[str, str], read_path: str, given: bool) -> dict[str, str]:
    """The connector's ``read_path`` from ``readPath`` (``jvm`` is not the connector's: its
    ranges are not read by it at all). Both given and different: refused, not one ignored."""
    if not given:
        return connector_options
    own = connector_options.get("read_path")
    if own is not None and own.strip().lower() != read_path:
        raise ConfigError("readPath", f"and option.read_path={own} both choose the read path: keep readPath")
    if read_path != JVM:
        connector_options["read_path"] = read_path
    return connector_options


def _max_per_trigger(opts: Mapping[str, str], kafka: SparkKafkaOptions | None) -> int | None:
    ours = int_option(opts, "maxrecordspertrigger", None, 1) if "maxrecordspertrigger" in opts else None
    spark = kafka.max_offsets_per_trigger if kafka else None
    if ours is not None and spark is not None:
        raise ConfigError("maxOffsetsPerTrigger", "and maxRecordsPerTrigger both set the limit: keep one")
    return ours if spark is None else spark


def option_words_of(options: Mapping[str, str]) -> OptionWords:
    """The connector's options as a query with these options names them."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    return OptionWords.of(opts, _connector_of(opts), OWN_NAMES)


def _connector_of(opts: Mapping[str, str]) -> str:
    """The connector a query names, or the one Spark's options choose: kafka by
    ``subscribe``/``subscribePattern``/``assign``, files by ``load(path)``."""
    named = opts.get("connector", "").strip()
    if named:
        return named
    if names_a_subscription(opts):
        return KAFKA_CONNECTOR
    return FILES_CONNECTOR if names_a_path(opts) else "sequence"


def check_known(opts: Mapping[str, str], connector: str) -> None:
    """ConfigError for the first option (lower-cased keys) that ``format("sluicegate")``
    does not read for this connector, saying what to write instead where that is known."""
    known = {name.lower() for name in KNOWN}
    kafka = connector == KAFKA_CONNECTOR
    files = connector == FILES_CONNECTOR and names_a_path(opts)
    for key in sorted(opts):
        if key in known or key.startswith(CONNECTOR_PREFIX) or (kafka and is_spark_kafka_option(key)):
            continue
        if files and is_spark_file_option(key):
            continue
        if is_spark_file_option(key) and connector == FILES_CONNECTOR:
            spark_name = next((n for n in FILE_NAMES if n.lower() == key), key)
            raise ConfigError(
                spark_name,
                "is an option of Spark's file source: name the path Spark's way too, load(path), "
                "or write the connector's own options (option.path, option.format ...)",
            )
        if is_spark_kafka_option(key) and not difflib.get_close_matches(key, known, n=1, cutoff=0.9):
            spark_name = next((n for n in SPARK_NAMES if n.lower() == key), key)
            raise ConfigError(
                spark_name,
                f"is an option of Spark's Kafka source, and this query reads the {connector} connector "
                "(subscribe, subscribePattern or assign choose the kafka connector; docs/kafka.md)",
            )
        if key == "path":
            raise ConfigError("path", f"load(path) reads the files connector, and this query reads the {connector} one")
        also = (
            "option.<connector option>, Spark's Kafka source options with subscribe/subscribePattern/assign, "
            "Spark's file source options with load(path)"
        )
        raise unknown_option(key, (*KNOWN, *SPARK_NAMES, *FILE_NAMES), "format('sluicegate')", also=also)


def _port_option(opts: Mapping[str, str], key: str) -> int:
    return checked_port("metricsPort", int_option(opts, key, 0, 0))


def _host_option(opts: Mapping[str, str], key: str) -> str | None:
    return checked_host("metricsHost", opts[key]) if key in opts else None
