"""The options of the ``kafka`` connector, parsed once and checked at start.

Every bad or unknown option raises ConfigError naming it, so a coordinator, a
reader or a Spark query with a typo fails before it touches any cluster.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from sluicegate.api.assigners import (
    ASSIGNER_OPTION,
    GRACE_OPTION,
    REBALANCE_OPTION,
    SplitAssigner,
    StickyHashAssigner,
    assigner_from_options,
)
from sluicegate.api.errors import ConfigError
from sluicegate.api.options import choice_option, int_option, unknown_option

from .client_log import client_logging

CLIENT_PREFIX = "kafka."
"""Options ``kafka.<name>`` go to the data cluster's clients as ``<name>`` (librdkafka names)."""
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"

EARLIEST = -2
LATEST = -1
"""Offsets in a ``starting_offsets`` JSON map: -2 earliest, -1 latest (Spark's convention)."""

# librdkafka settings the connector owns: a user value would break exactly-once reading.
_RESERVED_CLIENT_SETTINGS = {
    "bootstrap.servers": "bootstrap_servers",
    "isolation.level": "(always read_committed)",
    "enable.auto.commit": "(offsets live in sluicegate's checkpoints)",
    "group.id": "(partitions are assigned, not subscribed; commit_offsets_to_group=GROUP shows the lag in a group)",
    "auto.offset.reset": "fail_on_data_loss",
    "enable.partition.eof": "(the reader needs end-of-partition events)",
}

_OWN_VALUES = {"isolation.level": "read_committed", "enable.auto.commit": "false"}
"""Reserved settings given with the value the connector uses: accepted (and not passed on)."""

CONSUMER_DEFAULTS: dict[str, Any] = {"fetch.queue.backoff.ms": 1}
"""With librdkafka's default (1000 ms) a partition whose local queue is full is not
fetched again for a second, and a consumer that drains the queue faster than that
idles: benchmarks/kafka_clients.py measured 151k records/s with it, 900k with 1 ms."""

KNOWN = {
    "topics",
    "topic_pattern",
    "assign",
    "bootstrap_servers",
    "starting_offsets",
    "starting_timestamp_strategy",
    "stopping_offsets",
    "partition_discovery_interval_ms",
    "fail_on_data_loss",
    "poll_timeout_ms",
    "fetch_offset_retries",
    "fetch_offset_retry_interval_ms",
    "include_headers",
    "read_path",
    "missing_topics",
    "commit_offsets_to_group",
    ASSIGNER_OPTION,
    GRACE_OPTION,
    REBALANCE_OPTION,
}


@dataclass(frozen=True)
class StartingOffsets:
    """``earliest`` | ``latest`` | ``timestamp:MS`` | a JSON map ``{"topic": {"0": offset}}``
    | ``timestamp:`` and a JSON map of timestamps per partition (kind ``timestamps``)."""

    kind: str
    timestamp_ms: int | None = None
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)
    """Offsets (kind ``json``) or timestamps in ms (kind ``timestamps``)."""

    def timestamp_of(self, key: tuple[str, int]) -> int | None:
        """The timestamp this partition starts at, None where it does not start by time."""
        if self.kind == "timestamp":
            return self.timestamp_ms
        return self.per_partition.get(key) if self.kind == "timestamps" else None


@dataclass(frozen=True)
class StoppingOffsets:
    """``none`` (unbounded) | ``latest`` (the end offsets seen at start) | ``timestamp:MS`` |
    a JSON map ``{"topic": {"0": offset}}`` (-1: latest at start) | ``timestamp:`` and a JSON
    map of timestamps per partition (kind ``timestamps``)."""

    kind: str
    timestamp_ms: int | None = None
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)

    @property
    def bounded(self) -> bool:
        return self.kind != "none"


@dataclass(frozen=True)
class KafkaOptions:
    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    assign: frozenset[tuple[str, int]] | None = None
    """Spark's ``assign``: exactly these partitions (``topics`` are theirs), no others."""
    starting: StartingOffsets = StartingOffsets("earliest")
    starting_timestamp_strategy: str = "latest"
    """A partition with no record at or after its starting timestamp: ``latest`` starts it at
    its end (Spark's ``startingOffsetsByTimestampStrategy=latest``), ``error`` fails the
    source's first start naming it."""
    stopping: StoppingOffsets = StoppingOffsets("none")
    partition_discovery_interval_ms: int = 30_000
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    """How long a Spark executor waits for records it knows exist before it fails the task."""
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    """Spark's ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``: a failed
    ListOffsets is asked again this often, this long apart, before it counts as failed."""
    include_headers: bool | None = None
    """Spark's ``includeHeaders``: Spark's rows have a ``headers`` column only when it is
    true. None (not given): Spark's default, false; but a standalone reader that writes
    the records themselves keeps their headers (``headers_kept``)."""
    read_path: str = "auto"
    """How an executor reads ranges: ``native``, ``python`` or ``auto`` (read_path.py)."""
    missing_topics: str = "fail"
    """A topic of ``topics`` that does not exist when the coordinator starts: ``fail`` (after
    a short wait, naming it) or ``wait`` (for one created later; partition discovery picks it
    up)."""
    commit_group: str | None = None
    """``commit_offsets_to_group``: the consumer group the source's durable positions are
    committed to, for Kafka's lag tools (group_commits.py); None: none."""
    client_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """The user's ``kafka.*`` librdkafka settings; out of ``repr``: they hold passwords
    (``sasl.password``, ``ssl.key.password``)."""
    assigner: Callable[[], SplitAssigner[Any]] = field(default=StickyHashAssigner, compare=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaOptions:
        for key in options:
            if key not in KNOWN and not key.startswith(CLIENT_PREFIX):
                raise unknown_option(key, KNOWN, "the kafka connector", also="kafka.<client setting>")
        topics = tuple(t.strip() for t in options.get("topics", "").split(",") if t.strip())
        pattern = options.get("topic_pattern", "").strip() or None
        assign = _assign(options["assign"]) if options.get("assign", "").strip() else None
        if sum((bool(topics), bool(pattern), assign is not None)) != 1:
            raise ConfigError(
                "topics",
                "give exactly one of 'topics' (comma list), 'topic_pattern' (regex) or 'assign' "
                '(JSON: {"topic": [0, 1]})',
            )
        if assign is not None:
            topics = tuple(sorted({t for t, _ in assign}))
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError("topic_pattern", f"is not a valid regular expression: {exc}") from None
        bootstrap = options.get("bootstrap_servers", "").strip() or os.environ.get(BOOTSTRAP_ENV, "").strip()
        if not bootstrap:
            raise ConfigError("bootstrap_servers", f"is required (the data cluster), or set {BOOTSTRAP_ENV}")
        client = {}
        for key, value in options.items():
            if key.startswith(CLIENT_PREFIX):
                name = key[len(CLIENT_PREFIX) :]
                if name in _OWN_VALUES and value.strip().lower() == _OWN_VALUES[name]:
                    continue  # what the connector sets anyway (a Spark query often says so)
                if name in _RESERVED_CLIENT_SETTINGS:
                    raise ConfigError(key, f"is set by the connector; use {_RESERVED_CLIENT_SETTINGS[name]}")
                client[name] = value
        _check_client_settings(client)
        from .split import partition_owner_key

        return cls(
            bootstrap_servers=bootstrap,
            topics=topics,
            topic_pattern=pattern,
            assign=assign,
            starting=_starting(options.get("starting_offsets", "earliest")),
            starting_timestamp_strategy=choice_option(options, "starting_timestamp_strategy", ("latest", "error")),
            stopping=_stopping(options.get("stopping_offsets", "none")),
            partition_discovery_interval_ms=int_option(options, "partition_discovery_interval_ms", 30_000, 0),
            fail_on_data_loss=_bool(options, "fail_on_data_loss", True),
            poll_timeout_ms=int_option(options, "poll_timeout_ms", 120_000, 100),
            fetch_offset_retries=int_option(options, "fetch_offset_retries", 3, 0),
            fetch_offset_retry_interval_ms=int_option(options, "fetch_offset_retry_interval_ms", 10, 0),
            include_headers=None
            if options.get("include_headers") is None
            else _bool(options, "include_headers", False),
            read_path=_read_path(options.get("read_path", "auto")),
            missing_topics=choice_option(options, "missing_topics", ("fail", "wait")),
            commit_group=_commit_group(options),
            client_settings=tuple(sorted(client.items())),
            assigner=assigner_from_options(options, StickyHashAssigner.name, owner_key=partition_owner_key),
        )

    def matches(self, topic: str) -> bool:
        if self.topic_pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    def selects(self, topic: str, partition: int) -> bool:
        """Whether the source reads this partition of a topic it ``matches``."""
        return self.assign is None or (topic, partition) in self.assign

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for a client of the data cluster: the user's ``kafka.*``
        settings, then the connector's own."""
        config: dict[str, Any] = dict(self.client_settings)
        config["bootstrap.servers"] = self.bootstrap_servers
        config.update(client_logging())
        config.update(extra)
        return config

    def consumer_config(self) -> dict[str, Any]:
        """A consumer's settings: the connector's own, the user's ``kafka.*``, and under
        them ``CONSUMER_DEFAULTS``."""
        return CONSUMER_DEFAULTS | self.client_config(
            **{
                "group.id": "sluicegate-unused",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "error",
                "enable.partition.eof": True,
            }
        )


def _check_client_settings(settings: Mapping[str, str]) -> None:
    """librdkafka checks its settings when a client is built: build one (it is closed
    before it connects anywhere) so that a typo fails at start, named."""
    if not settings:
        return
    _check_files(settings)
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({**settings, "bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    except KafkaException as exc:
        message = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        # "No such configuration property: "x"", "ssl.key.location failed: ..." (a file it could not load)
        named = re.search(r'property:? "([^"]+)"', message) or re.search(r"(ssl\.[a-z.]+) failed", message)
        setting = CLIENT_PREFIX + named.group(1) if named else CLIENT_PREFIX + "*"
        raise ConfigError(setting, message) from None


_FILE_SETTINGS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.crl.location")
"""librdkafka settings naming a PEM file (ssl.ca.location: or a directory of CAs, or ``probe``)."""


def _check_files(settings: Mapping[str, str]) -> None:
    """A missing or unreadable certificate or key fails naming its option: librdkafka's own
    message says only that OpenSSL could not load it ("system lib")."""
    for name in _FILE_SETTINGS:
        value = settings.get(name, "").strip()
        if not value or (name == "ssl.ca.location" and (value == "probe" or os.path.isdir(value))):
            continue
        path = os.path.expanduser(value)
        if not os.path.isfile(path):
            raise ConfigError(CLIENT_PREFIX + name, f"{value} is not a readable file")
        if not os.access(path, os.R_OK):
            raise ConfigError(CLIENT_PREFIX + name, f"cannot read {value}: permission denied")


def _commit_group(options: Mapping[str, str]) -> str | None:
    if "commit_offsets_to_group" not in options:
        return None
    group = options["commit_offsets_to_group"].strip()
    if not group:
        raise ConfigError("commit_offsets_to_group", "names the consumer group to commit positions to; it is empty")
    return group


def _read_path(text: str) -> str:
    from .read_path import NOT_BUILT, PATHS, native_available

    path = text.strip().lower()
    if path not in ("auto", *PATHS):
        raise ConfigError("read_path", f"must be auto, {' or '.join(PATHS)}, got {text!r}")
    if path == "native" and not native_available():
        raise ConfigError("read_path", NOT_BUILT.format(what="is native"))
    return path


def headers_in_rows(options: KafkaOptions) -> bool:
    """Spark's rows and the JSON envelope: a headers column or key only when asked for."""
    return options.include_headers is True


def headers_kept(options: KafkaOptions) -> bool:
    """Records written as they are: their headers kept unless ``include_headers=false``."""
    return options.include_headers is not False


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigError(key, f"must be true or false, got {raw!r}")


def _timestamp(key: str, text: str) -> int:
    raw = text.split(":", 1)[1].strip()
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(key, f"timestamp:MS needs an integer of ms since the epoch, got {raw!r}") from None
    if value < 0:
        raise ConfigError(key, f"timestamp:MS must be >= 0, got {value}")
    return value


def _assign(text: str) -> frozenset[tuple[str, int]]:
    """Spark's ``assign``: ``{"topic": [0, 1], ...}``."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError("assign", f'is not JSON like {{"topic": [0, 1]}}: {exc}') from None
    if not isinstance(data, dict) or not data:
        raise ConfigError("assign", 'must be a JSON object like {"topic": [0, 1]}')
    out: set[tuple[str, int]] = set()
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not partitions:
            raise ConfigError("assign", f"topic {topic!r} must map to a list of partition numbers")
        for partition in partitions:
            if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
                raise ConfigError("assign", f"{topic!r}: {partition!r} is not a partition number")
            out.add((topic, partition))
    return frozenset(out)


def _partition_map(key: str, text: str, minimum: int, what: str = "offset") -> dict[tuple[str, int], int]:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(key, f"is not earliest/latest/timestamp:MS or a JSON map: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(key, f'a JSON map must look like {{"topic": {{"0": {what}, ...}}}}')
    out: dict[tuple[str, int], int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise ConfigError(key, f"topic {topic!r} must map partition numbers to offsets")
        for partition, offset in partitions.items():
            try:
                p = int(partition)
            except ValueError:
                raise ConfigError(key, f"{topic!r}: partition {partition!r} is not an integer") from None
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < minimum:
                raise ConfigError(key, f"{topic}-{p}: {what} must be an integer >= {minimum}, got {offset!r}")
            out[(topic, p)] = offset
    return out


def _starting(text: str) -> StartingOffsets:
    key = "starting_offsets"
    value = text.strip()
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        return StartingOffsets(lowered)
    if _per_partition_timestamps(value):
        return StartingOffsets("timestamps", per_partition=_timestamp_map(key, value))
    if lowered.startswith("timestamp:"):
        return StartingOffsets("timestamp", timestamp_ms=_timestamp(key, value))
    if value.startswith("{"):
        return StartingOffsets("json", per_partition=_partition_map(key, value, EARLIEST))
    raise ConfigError(key, f"must be earliest, latest, timestamp:MS, timestamp:{{JSON}} or a JSON map, got {text!r}")


def _stopping(text: str) -> StoppingOffsets:
    key = "stopping_offsets"
    value = text.strip()
    lowered = value.lower()
    if lowered in ("none", "latest"):
        return StoppingOffsets(lowered)
    if _per_partition_timestamps(value):
        return StoppingOffsets("timestamps", per_partition=_timestamp_map(key, value))
    if lowered.startswith("timestamp:"):
        return StoppingOffsets("timestamp", timestamp_ms=_timestamp(key, value))
    if value.startswith("{"):
        return StoppingOffsets("json", per_partition=_partition_map(key, value, LATEST))
    raise ConfigError(key, f"must be none, latest, timestamp:MS, timestamp:{{JSON}} or a JSON map, got {text!r}")


def _per_partition_timestamps(value: str) -> bool:
    return value.lower().startswith("timestamp:") and value.split(":", 1)[1].lstrip().startswith("{")


def _timestamp_map(key: str, value: str) -> dict[tuple[str, int], int]:
    """``timestamp:{"topic": {"0": MS}}``: Spark's ``startingOffsetsByTimestamp`` /
    ``endingOffsetsByTimestamp``."""
    return _partition_map(key, value.split(":", 1)[1].strip(), 0, what="timestamp")
