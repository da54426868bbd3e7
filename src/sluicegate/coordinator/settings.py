"""Everything a coordinator worker needs: the sources it may coordinate and how to
reach Kafka. From CLI flags, a sources.toml file, or SLUICEGATE_* variables.

Bad settings fail here, at start-up, with a ConfigError naming the setting.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field, fields
from pathlib import Path
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import checked_int, checked_port, unknown_option
from sluicegate.connectors import load_source
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.silence import LIVENESS_FRACTION, MAX_SILENCE_MS, MIN_SILENCE_MS
from sluicegate.kafka.replication import ReplicationPolicy, ReplicationSettingNames
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.names import validate_namespace
from sluicegate.protocol.timing import SESSION_TIMEOUT_MS

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
#: The replication settings as environment variables (for `faust ... worker`).
REPLICATION_ENV = ReplicationSettingNames(
    "SLUICEGATE_REPLICATION_FACTOR", "SLUICEGATE_MIN_INSYNC_REPLICAS", "SLUICEGATE_ALLOW_UNREPLICATED_TOPICS"
)


def default_group_ids(namespace: str, source: str) -> tuple[str, str]:
    """The Faust app ids (consumer groups) of the deployed workers that may serve
    ``source`` unless given an ``app_id``: a worker of that source alone, and one of
    several sources of the namespace."""
    return f"{namespace}.{source}.coordinator", f"{namespace}.coordinator"


def resolve_bootstrap(value: str | None, setting: str = "--bootstrap-servers") -> str:
    bootstrap = value or os.environ.get(BOOTSTRAP_ENV, "")
    if not bootstrap.strip():
        raise ConfigError(
            f"{setting} / {BOOTSTRAP_ENV}",
            "no Kafka bootstrap address; start a local broker with `sluicegate broker start` "
            "and export the address it prints",
        )
    return bootstrap.strip()


@dataclass(frozen=True)
class SourceSettings:
    """One source: its connector and the coordinator's contract settings for it."""

    source: str
    connector: str
    max_parallelism: int
    options: Mapping[str, str] = field(default_factory=dict)
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    reader_departure_timeout_ms: int = 60_000
    watermark_announce_interval_ms: int = 1_000
    max_watermark_drift_ms: int | None = None
    check_connector: InitVar[bool] = True
    """False for a runner handed its Source by other means (``SourceRunner(make_source=...)``,
    the memory run): ``connector`` then only names it."""

    def __post_init__(self, check_connector: bool) -> None:
        self.core_config()  # validates the core's settings
        if check_connector:
            load_source(self.connector, self.options)  # fails on a bad connector or option now

    def core_config(self) -> CoordinatorConfig:
        return CoordinatorConfig(
            source=self.source,
            max_parallelism=self.max_parallelism,
            session_timeout_ms=self.session_timeout_ms,
            reader_departure_timeout_ms=self.reader_departure_timeout_ms,
            watermark_announce_interval_ms=self.watermark_announce_interval_ms,
            max_watermark_drift_ms=self.max_watermark_drift_ms,
            definition=self.definition(),
        )

    def definition(self) -> SourceDefinition:
        """What this coordinator says the source is (compared with the committed one)."""
        return SourceDefinition.of(self.connector, self.options)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str) -> SourceSettings:
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise unknown_option(key, known, where, setting=f"{where}.{key}")
        for required in ("source", "connector", "max_parallelism"):
            if required not in data:
                raise ConfigError(f"{where}.{required}", "is required")
        options = data.get("options", {})
        if not isinstance(options, Mapping):
            raise ConfigError(f"{where}.options", "must be a table of key = value")
        values = dict(data)
        values["options"] = {str(k): str(v) for k, v in options.items()}
        for key in (
            "max_parallelism",
            "session_timeout_ms",
            "reader_departure_timeout_ms",
            "watermark_announce_interval_ms",
            "max_watermark_drift_ms",
        ):
            if key in values and not isinstance(values[key], int):
                raise ConfigError(f"{where}.{key}", f"must be an integer, got {values[key]!r}")
        return cls(**values)


@dataclass(frozen=True)
class CoordinatorSettings:
    """A coordinator worker: the sources it may coordinate (the Faust partition
    assignment decides which of them it actually serves) and the cluster."""

    sources: tuple[SourceSettings, ...]
    bootstrap_servers: str
    namespace: str = "sluicegate"
    app_id: str | None = None
    """Faust app id = consumer group of the coordinator workers; workers with the same
    id share the sources, one active worker per source."""
    tick_interval_ms: int = 200
    web_port: int | None = None
    web_bind: str = "127.0.0.1"
    commit_interval_ms: int = 1_000
    """How long offset-only progress (heartbeats) may wait before it is committed."""
    takeover_silence_ms: int = 2_000
    """A standby takes a source over once its coordinator has committed nothing for this
    long (the active one commits at least every quarter of it); 0 = off, the standby
    waits for the Faust group to rebalance (session timeout). docs/deploy.md."""
    replication: ReplicationPolicy = field(default_factory=ReplicationPolicy)
    """How the control topics it creates replicate, and how existing ones are checked
    (sluicegate.kafka.replication; TOML: replication_factor, min_insync_replicas,
    allow_unreplicated_topics)."""

    def __post_init__(self) -> None:
        validate_namespace(self.namespace)
        if not self.sources:
            raise ConfigError("sources", "at least one source is required")
        names = [s.source for s in self.sources]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError("sources", f"source names must be unique, repeated: {', '.join(duplicates)}")
        checked_int("tick_interval_ms", self.tick_interval_ms, 10, 60_000)
        checked_int("commit_interval_ms", self.commit_interval_ms, 10, 60_000)
        _check_takeover_silence(self.takeover_silence_ms, self.tick_interval_ms)
        if self.web_port is not None:
            checked_port("web_port", self.web_port)

    @property
    def group_id(self) -> str:
        if self.app_id:
            return self.app_id
        single, shared = default_group_ids(self.namespace, self.sources[0].source)
        return single if len(self.sources) == 1 else shared

    def source(self, name: str) -> SourceSettings:
        for settings in self.sources:
            if settings.source == name:
                return settings
        raise KeyError(name)

    @classmethod
    def from_toml(cls, path: Path, bootstrap_servers: str | None = None, **overrides: Any) -> CoordinatorSettings:
        """sources.toml: top-level namespace, app_id, tick_interval_ms, web_port,
        bootstrap_servers, the replication settings; one [[source]] table per source."""
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError("--config", f"{path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("--config", f"{path} is not valid TOML: {exc}") from None
        tables = data.pop("source", [])
        if not isinstance(tables, list):
            raise ConfigError("source", "use [[source]] tables, one per source")
        sources = tuple(SourceSettings.from_mapping(t, f"source[{i}]") for i, t in enumerate(tables))
        bootstrap = resolve_bootstrap(bootstrap_servers or data.pop("bootstrap_servers", None))
        known = {
            "namespace",
            "app_id",
            "tick_interval_ms",
            "web_port",
            "web_bind",
            "commit_interval_ms",
            "takeover_silence_ms",
        }
        replication = ReplicationPolicy(
            factor=data.pop("replication_factor", None),
            min_insync=data.pop("min_insync_replicas", None),
            allow_unreplicated=_boolean(data.pop("allow_unreplicated_topics", False), "allow_unreplicated_topics"),
        )
        for key in data:
            if key not in known:
                raise unknown_option(key, known | set(_REPLICATION_KEYS), f"the top level of {path}")
        data.update({k: v for k, v in overrides.items() if v is not None})
        data.setdefault("replication", replication)
        return cls(sources=sources, bootstrap_servers=bootstrap, **data)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CoordinatorSettings:
        """For `faust -A sluicegate.coordinator.app worker`: SLUICEGATE_CONFIG (a sources.toml),
        or one source from SLUICEGATE_SOURCE, SLUICEGATE_CONNECTOR, SLUICEGATE_MAX_PARALLELISM,
        SLUICEGATE_OPTIONS ("k=v,k=v"), SLUICEGATE_SESSION_TIMEOUT_MS ...; plus
        SLUICEGATE_NAMESPACE, SLUICEGATE_WEB_PORT, SLUICEGATE_TAKEOVER_SILENCE_MS and
        KAFKA_BOOTSTRAP_SERVERS."""
        env = os.environ if env is None else env

        def integer(name: str) -> int | None:
            raw = env.get(name, "").strip()
            if not raw:
                return None
            try:
                return int(raw)
            except ValueError:
                raise ConfigError(name, f"must be an integer, got {raw!r}") from None

        bootstrap = resolve_bootstrap(env.get(BOOTSTRAP_ENV), BOOTSTRAP_ENV)
        common: dict[str, Any] = {
            "web_port": integer("SLUICEGATE_WEB_PORT"),
            "web_bind": env.get("SLUICEGATE_WEB_BIND"),
            "takeover_silence_ms": integer("SLUICEGATE_TAKEOVER_SILENCE_MS"),
        }
        names = REPLICATION_ENV
        if any(env.get(name, "").strip() for name in (names.factor, names.min_insync, names.allow_unreplicated)):
            common["replication"] = ReplicationPolicy(
                factor=integer(names.factor),
                min_insync=integer(names.min_insync),
                allow_unreplicated=_boolean(
                    env.get(names.allow_unreplicated, "").strip() or "false", names.allow_unreplicated
                ),
                names=names,
            )
        if env.get("SLUICEGATE_NAMESPACE"):
            common["namespace"] = env["SLUICEGATE_NAMESPACE"]
        if env.get("SLUICEGATE_CONFIG"):
            return cls.from_toml(Path(env["SLUICEGATE_CONFIG"]), bootstrap, **common)
        options: dict[str, str] = {}
        for pair in filter(None, (p.strip() for p in env.get("SLUICEGATE_OPTIONS", "").split(","))):
            key, sep, value = pair.partition("=")
            if not sep:
                raise ConfigError("SLUICEGATE_OPTIONS", f"expected key=value pairs separated by commas, got {pair!r}")
            options[key.strip()] = value.strip()
        source: dict[str, Any] = {"options": options}
        for name, key in (("SLUICEGATE_SOURCE", "source"), ("SLUICEGATE_CONNECTOR", "connector")):
            if not env.get(name, "").strip():
                raise ConfigError(name, "is not set (or set SLUICEGATE_CONFIG to a sources.toml)")
            source[key] = env[name].strip()
        for name, key in (
            ("SLUICEGATE_MAX_PARALLELISM", "max_parallelism"),
            ("SLUICEGATE_SESSION_TIMEOUT_MS", "session_timeout_ms"),
            ("SLUICEGATE_READER_DEPARTURE_TIMEOUT_MS", "reader_departure_timeout_ms"),
            ("SLUICEGATE_WATERMARK_ANNOUNCE_INTERVAL_MS", "watermark_announce_interval_ms"),
            ("SLUICEGATE_MAX_WATERMARK_DRIFT_MS", "max_watermark_drift_ms"),
        ):
            number = integer(name)
            if number is not None:
                source[key] = number
        if "max_parallelism" not in source:
            raise ConfigError("SLUICEGATE_MAX_PARALLELISM", "is not set")
        return cls(
            sources=(SourceSettings.from_mapping(source, "SLUICEGATE"),),
            bootstrap_servers=bootstrap,
            **{k: v for k, v in common.items() if v is not None},
        )


_REPLICATION_KEYS = ("replication_factor", "min_insync_replicas", "allow_unreplicated_topics")
_TRUE, _FALSE = frozenset({"true", "1", "yes", "on"}), frozenset({"false", "0", "no", "off"})


def _boolean(value: object, setting: str) -> bool:
    """A TOML boolean, or one of true/false/1/0/yes/no/on/off from the environment."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(setting, f"must be true or false, got {value!r}")


def _check_takeover_silence(silence_ms: object, tick_interval_ms: int) -> None:
    """0 (off), or long enough that an active coordinator, whose loop wakes every
    tick_interval_ms, can commit four times within it."""
    if not isinstance(silence_ms, int) or isinstance(silence_ms, bool):
        raise ConfigError("takeover_silence_ms", f"must be an integer, got {silence_ms!r}")
    if silence_ms == 0:
        return
    lowest = max(MIN_SILENCE_MS, LIVENESS_FRACTION * tick_interval_ms)
    if not lowest <= silence_ms <= MAX_SILENCE_MS:
        raise ConfigError(
            "takeover_silence_ms",
            f"must be 0 (off) or between {lowest} ({LIVENESS_FRACTION} x tick_interval_ms, at least "
            f"{MIN_SILENCE_MS}) and {MAX_SILENCE_MS}, got {silence_ms}",
        )
