"""Everything a coordinator process needs, from CLI flags or SLUICEGATE_* variables.

Bad settings fail here, at start-up, with a ConfigError naming the setting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from sluicegate.api.errors import ConfigError
from sluicegate.coordinator.config import CoordinatorConfig, validate_source_name

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


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
class CoordinatorSettings:
    source: str
    connector: str
    max_parallelism: int
    bootstrap_servers: str
    options: Mapping[str, str] = field(default_factory=dict)
    namespace: str = "sluicegate"
    session_timeout_ms: int = 10_000
    reader_departure_timeout_ms: int = 60_000
    watermark_announce_interval_ms: int = 1_000
    max_watermark_drift_ms: int | None = None
    tick_interval_ms: int = 200
    web_port: int | None = None

    def __post_init__(self) -> None:
        validate_source_name(self.source)
        validate_source_name(self.namespace, "namespace")
        if not 10 <= self.tick_interval_ms <= 60_000:
            raise ConfigError("tick_interval_ms", f"must be between 10 and 60000, got {self.tick_interval_ms}")
        if self.web_port is not None and not 0 <= self.web_port <= 65535:
            raise ConfigError("web_port", f"must be a TCP port, got {self.web_port}")
        self.core_config()  # validates the core's settings too

    def core_config(self) -> CoordinatorConfig:
        return CoordinatorConfig(
            source=self.source,
            max_parallelism=self.max_parallelism,
            session_timeout_ms=self.session_timeout_ms,
            reader_departure_timeout_ms=self.reader_departure_timeout_ms,
            watermark_announce_interval_ms=self.watermark_announce_interval_ms,
            max_watermark_drift_ms=self.max_watermark_drift_ms,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CoordinatorSettings:
        """For `faust -A sluicegate.coordinator.app worker`: SLUICEGATE_SOURCE, SLUICEGATE_CONNECTOR,
        SLUICEGATE_MAX_PARALLELISM, SLUICEGATE_OPTIONS ("k=v,k=v"), SLUICEGATE_NAMESPACE,
        SLUICEGATE_SESSION_TIMEOUT_MS, ... and KAFKA_BOOTSTRAP_SERVERS."""
        env = os.environ if env is None else env

        def required(name: str) -> str:
            value = env.get(name, "").strip()
            if not value:
                raise ConfigError(name, "is not set")
            return value

        def integer(name: str, default: int | None) -> int | None:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                return int(raw)
            except ValueError:
                raise ConfigError(name, f"must be an integer, got {raw!r}") from None

        options: dict[str, str] = {}
        for pair in filter(None, (p.strip() for p in env.get("SLUICEGATE_OPTIONS", "").split(","))):
            key, sep, value = pair.partition("=")
            if not sep:
                raise ConfigError("SLUICEGATE_OPTIONS", f"expected key=value pairs separated by commas, got {pair!r}")
            options[key.strip()] = value.strip()
        max_parallelism = integer("SLUICEGATE_MAX_PARALLELISM", None)
        if max_parallelism is None:
            raise ConfigError("SLUICEGATE_MAX_PARALLELISM", "is not set")
        return cls(
            source=required("SLUICEGATE_SOURCE"),
            connector=required("SLUICEGATE_CONNECTOR"),
            max_parallelism=max_parallelism,
            bootstrap_servers=resolve_bootstrap(env.get(BOOTSTRAP_ENV), BOOTSTRAP_ENV),
            options=options,
            namespace=env.get("SLUICEGATE_NAMESPACE", "sluicegate"),
            session_timeout_ms=integer("SLUICEGATE_SESSION_TIMEOUT_MS", 10_000) or 10_000,
            reader_departure_timeout_ms=integer("SLUICEGATE_READER_DEPARTURE_TIMEOUT_MS", 60_000) or 60_000,
            watermark_announce_interval_ms=integer("SLUICEGATE_WATERMARK_ANNOUNCE_INTERVAL_MS", 1_000) or 1_000,
            max_watermark_drift_ms=integer("SLUICEGATE_MAX_WATERMARK_DRIFT_MS", None),
            web_port=integer("SLUICEGATE_WEB_PORT", None),
        )
