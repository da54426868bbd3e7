"""The options of ``spark.readStream.format("sluicegate")``, parsed once and checked.

Keys are case-insensitive; a bad value raises ConfigError naming the option as
the user wrote it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import checked_port, int_option, unknown_option
from sluicegate.kafka.security import SPARK_SECURITY_OPTIONS, KafkaSecurity
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.names import validate_namespace, validate_source
from sluicegate.protocol.timing import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS
from sluicegate.reader.timing import KAFKA_WAIT_S
from sluicegate.spark.driver import TOPIC_WAIT_TIMEOUT_S, DriverSettings

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
CONNECTOR_PREFIX = "option."

KNOWN = (
    "source",
    "parallelism",
    "connector",
    "connectorOptions",
    "kafka.bootstrap.servers",
    "namespace",
    "maxRecordsPerTrigger",
    "heartbeatIntervalMs",
    "sessionTimeoutMs",
    "topicWaitTimeoutS",
    "kafkaWaitS",
    "arrowBatchRows",
    "alignmentMaxDriftMs",
    "splitIdleTimeoutMs",
    "metricsPort",
    *SPARK_SECURITY_OPTIONS,
)
"""Every option of ``format("sluicegate")`` besides ``option.<connector option>``: anything
else fails at ``load()`` (an option nobody reads would change nothing without a word)."""

SPARK_KAFKA_OPTIONS = {
    "subscribe": "option.topics",
    "subscribePattern": "option.topic_pattern",
    "startingOffsets": "option.starting_offsets (its default here is earliest, Spark's is latest)",
    "endingOffsets": "option.stopping_offsets",
    "startingTimestamp": "option.starting_offsets=timestamp:MS",
    "endingTimestamp": "option.stopping_offsets=timestamp:MS",
    "failOnDataLoss": "option.fail_on_data_loss",
    "includeHeaders": "option.include_headers",
    "maxOffsetsPerTrigger": "maxRecordsPerTrigger",
    "kafkaConsumer.pollTimeoutMs": "option.poll_timeout_ms",
    "assign": None,
    "startingOffsetsByTimestamp": None,
    "endingOffsetsByTimestamp": None,
    "startingOffsetsByTimestampStrategy": None,
    "minOffsetsPerTrigger": None,
    "maxTriggerDelay": None,
    "minPartitions": None,
    "groupIdPrefix": None,
    "fetchOffset.numRetries": None,
    "fetchOffset.retryIntervalMs": None,
}
"""Spark's own Kafka source options (its Structured Streaming + Kafka guide) and what
``format("sluicegate")`` calls them (None: nothing yet). Refused by name either way: a
``startingOffsets=latest`` that quietly read from the earliest offset would be wrong data."""


@dataclass(frozen=True)
class SparkSourceConfig:
    """The options of ``format("sluicegate")`` (keys are case-insensitive).

    ``source``, ``parallelism``: the source name and its number of reader subtasks
    (= Spark partitions per batch); ``connector`` (default ``sequence``) with its
    options as ``option.<key>`` (or a JSON object in ``connectorOptions``);
    ``kafka.bootstrap.servers`` (default ``$KAFKA_BOOTSTRAP_SERVERS``),
    ``namespace``; ``maxRecordsPerTrigger``; ``heartbeatIntervalMs``,
    ``sessionTimeoutMs``, ``topicWaitTimeoutS``, ``kafkaWaitS``; ``arrowBatchRows``;
    ``alignmentMaxDriftMs``; ``splitIdleTimeoutMs`` (0, the default: off);
    ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
    ``kafka.ssl.truststore.location`` ... as Spark's Kafka source names them
    (docs/deploy.md, "Security"; default: the driver's SLUICEGATE_KAFKA_* environment).
    ``metricsPort`` (Prometheus metrics served from the driver; 0, the default: off).
    """

    source: str
    parallelism: int
    connector: str = "sequence"
    connector_options: tuple[tuple[str, str], ...] = ()
    bootstrap_servers: str = ""
    namespace: str = "sluicegate"
    max_records_per_trigger: int | None = None
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
    extra: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SparkSourceConfig:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        check_known(opts)
        source = opts.get("source", "").strip()
        if not source:
            raise ConfigError("source", "is required: .option('source', NAME)")
        validate_source(source)
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
        bootstrap = opts.get("kafka.bootstrap.servers") or os.environ.get(BOOTSTRAP_ENV, "")
        return cls(
            source=source,
            parallelism=int_option(opts, "parallelism", None, 1),
            connector=opts.get("connector", "sequence").strip() or "sequence",
            connector_options=tuple(sorted(connector_options.items())),
            bootstrap_servers=bootstrap.strip(),
            namespace=validate_namespace(opts.get("namespace", "sluicegate")),
            max_records_per_trigger=(
                int_option(opts, "maxrecordspertrigger", None, 1) if "maxrecordspertrigger" in opts else None
            ),
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
        )

    @property
    def options(self) -> dict[str, str]:
        return dict(self.connector_options)

    def driver_settings(self) -> DriverSettings:
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


def check_known(opts: Mapping[str, str]) -> None:
    """ConfigError for the first option (lower-cased keys) that ``format("sluicegate")``
    does not read, saying what to write instead where that is known."""
    spark_kafka = {name.lower(): (name, ours) for name, ours in SPARK_KAFKA_OPTIONS.items()}
    known = {name.lower() for name in KNOWN}
    for key in sorted(opts):
        if key in known or key.startswith(CONNECTOR_PREFIX):
            continue
        if key in spark_kafka:
            name, ours = spark_kafka[key]
            instead = f"write {ours}" if ours else "it has no equivalent in format('sluicegate') yet"
            raise ConfigError(name, f"is an option of Spark's Kafka source: {instead} (docs/kafka.md)")
        if key == "path":
            raise ConfigError("path", "give a files connector's path as option.path (load(path) is not read)")
        also = "option.<connector option>"
        if key.startswith("kafka."):
            # the data cluster's client settings belong to the connector, not to the control plane
            also += f"; the data cluster's client settings are {CONNECTOR_PREFIX}{key}"
        raise unknown_option(key, KNOWN, "format('sluicegate')", also=also)


def _port_option(opts: Mapping[str, str], key: str) -> int:
    return checked_port("metricsPort", int_option(opts, key, 0, 0))
