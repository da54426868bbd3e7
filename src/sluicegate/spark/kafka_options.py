"""Spark's Kafka source options, read with Spark's meaning (issue 19): replacing
``format("kafka")`` by ``format("sluicegate")`` is the whole migration.

``read_spark_kafka_options`` takes the options of a query that reads the ``kafka``
connector (lower-cased keys, as Spark hands them over) and returns what they mean here:
the connector's own options, the trigger limits, and notes to log once. The reference
is Spark's Structured Streaming + Kafka integration guide; where Spark and sluicegate
differ, docs/kafka.md's migration table says how and why.

- ``subscribe``, ``subscribePattern``, ``assign`` name what is read (exactly one).
- ``startingOffsets`` defaults to ``latest``, as in Spark; ``startingTimestamp`` before
  ``startingOffsetsByTimestamp`` before ``startingOffsets`` (Spark's precedence), and the
  same for the ending options (a streaming query with one stops there: a bounded stream).
- ``kafka.*`` go to the data cluster's clients: ``kafka.bootstrap.servers`` first, the
  security settings through ``KafkaSecurity`` (JAAS, PEM stores), Java consumer names
  translated where librdkafka has another name, everything else checked by librdkafka
  (an unknown name fails naming it).
- ``groupIdPrefix``, ``kafka.group.id`` and ``kafka.max.poll.records`` make no sense
  here (no consumer group, no poll loop): accepted, and logged once as not used.
- The connector's own names (``option.topics`` ...) still work for one release, each
  with a deprecation note naming Spark's.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import int_option
from sluicegate.kafka.security import SPARK_SECURITY_OPTIONS, KafkaSecurity
from sluicegate.protocol.names import NAME_PATTERN

CONNECTOR = "kafka"
STREAM_DISCOVERY_INTERVAL_MS = 1_000
"""How often a stream's coordinator looks for new topics and partitions (Spark's Kafka source
looks at every batch; the connector's own default, 30 s, is Flink's)."""

SUBSCRIPTIONS = {"subscribe": "topics", "subscribePattern": "topic_pattern", "assign": "assign"}
"""Spark's ways to name what is read -> the connector's option."""

SAME_MEANING = {
    "failOnDataLoss": "fail_on_data_loss",
    "includeHeaders": "include_headers",
    "kafkaConsumer.pollTimeoutMs": "poll_timeout_ms",
    "fetchOffset.numRetries": "fetch_offset_retries",
    "fetchOffset.retryIntervalMs": "fetch_offset_retry_interval_ms",
    "startingOffsetsByTimestampStrategy": "starting_timestamp_strategy",
}
"""Spark's name -> the connector option of the same meaning and values."""

STARTING = ("startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets")
ENDING = ("endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")
"""Spark's precedence, first wins."""

TRIGGER = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions", "maxRecordsPerPartition")

NOT_USED = {
    "groupIdPrefix": "sluicegate assigns partitions: there is no consumer group",
    "kafka.group.id": "sluicegate assigns partitions: there is no consumer group",
    "kafka.max.poll.records": (
        "executors read whole offset ranges into Arrow batches of arrowBatchRows rows, with no "
        "offset round trips between polls to save"
    ),
}
"""Spark options that make no sense here: accepted, and logged once as not used."""

USED_BY_JAVA_CONSUMERS = {"kafka.max.poll.records"}
"""Of those, the ones the executors' Java consumers of ``readPath=jvm`` use, as Spark's do."""

REFUSED_AS_IN_SPARK = {
    "kafka.auto.offset.reset": "set startingOffsets instead",
    "kafka.enable.auto.commit": "offsets are kept in the query's checkpoint",
    "kafka.key.deserializer": "keys are always binary: cast them in the query",
    "kafka.value.deserializer": "values are always binary: cast them in the query",
    "kafka.interceptor.classes": "the source hands records to Spark, not to a consumer's interceptors",
}
"""Spark's own Kafka source refuses these too, for the same reasons."""

JAVA_TO_LIBRDKAFKA = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "request.timeout.ms": "socket.timeout.ms",
}
"""Java consumer settings whose librdkafka name differs; the others of the same name
(``fetch.max.bytes``, ``max.partition.fetch.bytes``, ``fetch.min.bytes``, ``client.id``,
``client.rack`` ...) pass as they are, and librdkafka refuses what it does not know."""

JAVA_ONLY = {
    "default.api.timeout.ms": "the Java consumer's timeout of its blocking calls",
    "client.dns.lookup": "how the Java client resolves names",
    "exclude.internal.topics": "sluicegate subscribes by name and pattern itself",
    "internal.leave.group.on.close": "there is no consumer group",
    "auto.include.jmx.reporter": "a JMX setting",
    "metric.reporters": "a JMX setting",
    "metrics.num.samples": "a JMX setting",
    "metrics.recording.level": "a JMX setting",
    "metrics.sample.window.ms": "a JMX setting",
    "security.providers": "a JVM security setting",
}
"""Settings of Spark's Java consumer that librdkafka has no equivalent for: not passed on, and
logged once as not used (the Java consumer only warns about a setting it does not use). With
``readPath=jvm`` the executors' Java consumers take them."""

DEPRECATED = {
    "topics": "subscribe",
    "topic_pattern": "subscribePattern",
    "bootstrap_servers": "kafka.bootstrap.servers (and controlBootstrapServers for a separate control cluster)",
    "starting_offsets": "startingOffsets (whose default is latest, as in Spark)",
    "stopping_offsets": "endingOffsets",
    "fail_on_data_loss": "failOnDataLoss",
    "include_headers": "includeHeaders",
    "poll_timeout_ms": "kafkaConsumer.pollTimeoutMs",
}
"""The connector's option names a Spark query used before Spark's: they work for one more
release, with a note naming the new one."""

SPARK_NAMES = (*SUBSCRIPTIONS, *SAME_MEANING, *STARTING, *ENDING, *TRIGGER, *NOT_USED, *REFUSED_AS_IN_SPARK)
"""Every Spark Kafka source option this module reads, besides the ``kafka.*`` client settings."""


@dataclass(frozen=True)
class SparkKafkaOptions:
    """What a query's Spark Kafka options mean here."""

    connector_options: Mapping[str, str]
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    bootstrap_servers: str = ""
    notes: tuple[str, ...] = ()
    """Lines to log once at the query's start: options not used, deprecated names."""


def names_a_subscription(opts: Mapping[str, str]) -> bool:
    """Whether the options (lower-cased keys) use Spark's names for what to read."""
    return any(name.lower() in opts for name in SUBSCRIPTIONS)


def is_spark_kafka_option(key: str) -> bool:
    """Whether a lower-cased key is one of Spark's Kafka source options or a ``kafka.*`` setting."""
    return key.startswith("kafka.") or key in {n.lower() for n in SPARK_NAMES}


def read_spark_kafka_options(
    opts: Mapping[str, str],
    legacy: Mapping[str, str],
    environment_bootstrap: str = "",
    batch: bool = False,
    jvm: bool = False,
) -> SparkKafkaOptions:
    """``opts``: the query's options, lower-cased keys; ``legacy``: its ``option.*``
    connector options (the names before Spark's); ``batch``: a batch query (``spark.read``),
    which reads from earliest to latest unless told otherwise, as in Spark; ``jvm``: the
    query reads with ``readPath=jvm``, whose executors are Spark's own Java consumers (so
    ``kafka.max.poll.records`` is used there). Raises ConfigError naming an option."""
    given = {name: opts[name.lower()] for name in SPARK_NAMES if name.lower() in opts}
    connector: dict[str, str] = {}
    notes: list[str] = []
    for key, value in legacy.items():
        if key in DEPRECATED:
            notes.append(f"option.{key} is deprecated (it works for one more release): write {DEPRECATED[key]}")
        elif key.startswith("kafka."):
            notes.append(f"option.{key} is deprecated (it works for one more release): write {key}")
        connector[key] = value
    subscription = _subscription(given, connector)
    connector.update(subscription)
    for spark_name, ours in SAME_MEANING.items():
        if spark_name in given:
            _set(connector, ours, given[spark_name], spark_name)
    _positions(given, connector, notes, spark_subscription=bool(subscription) and not batch)
    if subscription and not batch:
        # Spark's Kafka source looks for new topics and partitions at every batch
        connector.setdefault("partition_discovery_interval_ms", str(STREAM_DISCOVERY_INTERVAL_MS))
    if batch:
        _batch_positions(given, connector)
        batch_unused = (*TRIGGER[:3], "maxRecordsPerPartition")  # Spark 4.2's batch reads ignore it too
        notes += [f"option {name} is not used by a batch query" for name in batch_unused if name in given]
    for name, why in REFUSED_AS_IN_SPARK.items():
        if name in given:
            raise ConfigError(name, f"is not supported, as in Spark's Kafka source: {why}")
    unused = [name for name in NOT_USED if name in given and not (jvm and name in USED_BY_JAVA_CONSUMERS)]
    notes += [f"option {name} is not used: {NOT_USED[name]}" for name in unused]
    if not jvm:
        notes += [
            f"option kafka.{name} is not used: a setting of Spark's Java consumer that librdkafka has no "
            f"equivalent for ({why})"
            for name, why in JAVA_ONLY.items()
            if f"kafka.{name}" in opts
        ]
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if bootstrap and "bootstrap_servers" not in connector:
        connector["bootstrap_servers"] = bootstrap
    connector.update(_client_settings(opts, connector))
    max_offsets, min_offsets = _positive(given, "maxOffsetsPerTrigger"), _positive(given, "minOffsetsPerTrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise ConfigError(
            "minOffsetsPerTrigger",
            f"({min_offsets}) is higher than maxOffsetsPerTrigger ({max_offsets}): Spark refuses it too",
        )
    return SparkKafkaOptions(
        connector_options=connector,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=duration_ms("maxTriggerDelay", given.get("maxTriggerDelay", "15m")),
        min_partitions=_positive(given, "minPartitions"),
        max_records_per_partition=_positive(given, "maxRecordsPerPartition"),
        bootstrap_servers=connector.get("bootstrap_servers", environment_bootstrap),
        notes=tuple(notes),
    )


def _subscription(given: Mapping[str, str], connector: Mapping[str, str]) -> dict[str, str]:
    named = [name for name in SUBSCRIPTIONS if name in given]
    if len(named) > 1:
        raise ConfigError(named[1], f"give one of subscribe, subscribePattern or assign, not {' and '.join(named)}")
    if not named:
        return {}
    old = [key for key in ("topics", "topic_pattern", "assign") if key in connector]
    if old:
        raise ConfigError(named[0], f"and option.{old[0]} both name what to read: keep {named[0]}")
    value = given[named[0]]
    if not value.strip() or (named[0] == "subscribe" and not any(t.strip() for t in value.split(","))):
        raise ConfigError(named[0], f"names nothing to read: give {named[0]} a value, as Spark requires")
    return {SUBSCRIPTIONS[named[0]]: value}


def _positions(given: Mapping[str, str], connector: dict[str, str], notes: list[str], spark_subscription: bool) -> None:
    """Starting and ending positions by Spark's precedence; Spark's default start of a
    stream (``latest``) where a streaming query names its subscription Spark's way."""
    _same_partitions(given)
    for names, ours in ((STARTING, "starting_offsets"), (ENDING, "stopping_offsets")):
        present = [name for name in names if name in given]
        if not present:
            continue
        chosen = present[0]
        _set(connector, ours, _position(chosen, given[chosen]), chosen)
        notes += [f"option {n} is not used: {chosen} takes precedence over it, as in Spark" for n in present[1:]]
        if ours == "starting_offsets" and chosen != "startingOffsets":
            connector.setdefault("starting_timestamp_strategy", "error")  # Spark's default
    if spark_subscription:
        connector.setdefault("starting_offsets", "latest")


def _batch_positions(given: Mapping[str, str], connector: dict[str, str]) -> None:
    """A batch query reads from ``earliest`` to ``latest`` by default, and refuses what
    Spark's batch Kafka reads refuse: a start at ``latest`` (-1), an end at ``earliest`` (-2)."""
    starting = connector.setdefault("starting_offsets", "earliest")
    stopping = connector.setdefault("stopping_offsets", "latest")
    start_name = next((n for n in STARTING if n in given), "option.starting_offsets")
    end_name = next((n for n in ENDING if n in given), "option.stopping_offsets")
    if starting.strip().lower() == "latest" or _names_offset(starting, -1):
        raise ConfigError(start_name, "cannot be latest (-1) in a batch query, as in Spark: it would read nothing")
    if _names_offset(stopping, -2):
        raise ConfigError(end_name, "cannot be earliest (-2) in a batch query, as in Spark")
    if stopping.strip().lower() == "none":
        raise ConfigError(end_name, "must name an end in a batch query (none is for streams): latest is all there is")


def _names_offset(text: str, offset: int) -> bool:
    """Whether a JSON map of offsets names ``offset`` for some partition."""
    if not text.strip().startswith("{"):
        return False
    try:
        parsed = json.loads(text)
    except ValueError:
        return False  # the connector's parser names the option
    return isinstance(parsed, dict) and any(isinstance(per, dict) and offset in per.values() for per in parsed.values())


def _position(name: str, value: str) -> str:
    """A Spark position option's value in the connector's syntax."""
    text = value.strip()
    if name in ("startingTimestamp", "endingTimestamp"):
        if not text.isdigit():
            raise ConfigError(name, f"must be a timestamp in ms since the epoch, got {value!r}")
        return f"timestamp:{text}"
    if name in ("startingOffsetsByTimestamp", "endingOffsetsByTimestamp"):
        if not text.startswith("{"):
            raise ConfigError(name, f'must be JSON like {{"topic": {{"0": 1700000000000}}}}, got {value!r}')
        return f"timestamp:{text}"
    if name == "endingOffsets" and text.lower() == "earliest":
        raise ConfigError(name, "must be latest or a JSON map (earliest is not an ending offset, as in Spark)")
    if name == "endingOffsets" and text.startswith("{") and -2 in _json_offsets(name, text).values():
        raise ConfigError(name, "cannot end a partition at earliest (-2), as in Spark: give -1 (latest) or an offset")
    if text.lower().startswith(("timestamp:", "none")):
        raise ConfigError(name, f"must be earliest, latest or Spark's JSON map, got {value!r}")
    return text


def _json_offsets(name: str, text: str) -> dict[tuple[str, str], int]:
    """Spark's JSON map of offsets (``{"topic": {"0": 23}}``) by (topic, partition)."""
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ConfigError(name, f"must be Spark's JSON map of offsets: {exc}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ConfigError(name, f'must be Spark\'s JSON map of offsets, like {{"topic": {{"0": 23}}}}, got {text!r}')
    return {(str(t), str(p)): o for t, ps in parsed.items() for p, o in ps.items()}


def _same_partitions(given: Mapping[str, str]) -> None:
    """Spark refuses JSON starting and ending offsets that name different partitions."""
    start, end = given.get("startingOffsets", "").strip(), given.get("endingOffsets", "").strip()
    if not (start.startswith("{") and end.startswith("{")):
        return
    starting, ending = set(_json_offsets("startingOffsets", start)), set(_json_offsets("endingOffsets", end))
    if starting != ending:
        only = sorted(f"{t}-{p}" for t, p in starting ^ ending)
        raise ConfigError(
            "endingOffsets",
            f"and startingOffsets name different partitions ({', '.join(only)} in one only): name the same "
            "partitions in both, as Spark requires",
        )


def _set(connector: dict[str, str], key: str, value: str, spark_name: str) -> None:
    if key in connector and connector[key] != value:
        raise ConfigError(spark_name, f"and option.{key} both set it: keep {spark_name}")
    connector[key] = value


def _client_settings(opts: Mapping[str, str], connector: Mapping[str, str]) -> dict[str, str]:
    """The query's ``kafka.*`` options as the data cluster's librdkafka settings
    (``kafka.<librdkafka name>`` connector options)."""
    out: dict[str, str] = {}
    security_keys = {k.lower() for k in SPARK_SECURITY_OPTIONS}
    if "kafka.security.protocol" in opts and "kafka.security.protocol" not in connector:
        # (option.kafka.security.* of a query written before Spark's names win: they were
        # the data cluster's, and kafka.security.* the control cluster's)
        security = KafkaSecurity.from_spark_options(opts)
        out.update({f"kafka.{k}": v for k, v in security.librdkafka_config().items()})
    elif any(key in opts for key in security_keys):
        first = sorted(key for key in opts if key in security_keys)[0]
        raise ConfigError(first, "needs kafka.security.protocol (SASL_SSL, SSL, SASL_PLAINTEXT or PLAINTEXT)")
    skipped = {
        "kafka.bootstrap.servers",
        *security_keys,
        *(n.lower() for n in (*NOT_USED, *REFUSED_AS_IN_SPARK)),
        *(f"kafka.{name}" for name in JAVA_ONLY),
    }
    for key, value in opts.items():
        if not key.startswith("kafka.") or key in skipped:
            continue
        name = key[len("kafka.") :]
        setting = f"kafka.{JAVA_TO_LIBRDKAFKA.get(name, name)}"
        if setting in connector and connector[setting] != value:
            raise ConfigError(key, f"and option.{setting} both set it: keep {key}")
        out[setting] = value
    return out


def _positive(given: Mapping[str, str], name: str) -> int | None:
    return int_option(given, name, None, 1) if name in given else None


_DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?", re.IGNORECASE)
_UNIT_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(name: str, text: str) -> int:
    """Spark's time strings (``15m``, ``30s``, ``500ms``; no unit: ms)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ConfigError(name, f"must be a duration such as 15m, 30s or 500ms, got {text!r}")
    return int(int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()])


def derived_source_name(connector_options: Mapping[str, str]) -> str:
    """A source name from what is read, the same on every restart: the topics of
    ``subscribe`` joined by ``-`` where they make a valid name, else a short digest."""
    topics = connector_options.get("topics")
    if topics:
        names = sorted(t.strip() for t in topics.split(",") if t.strip())
        readable = "-".join(names)
        if NAME_PATTERN.fullmatch(readable) and len(readable) <= 60:
            return readable
        return _digest_name("topics", ",".join(names))
    if connector_options.get("topic_pattern"):
        return _digest_name("pattern", connector_options["topic_pattern"])
    return _digest_name("assign", connector_options.get("assign", ""))


def _digest_name(kind: str, text: str) -> str:
    return f"kafka-{kind}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
