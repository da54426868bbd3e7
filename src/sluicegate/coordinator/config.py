"""Coordinator settings for one source, validated at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from sluicegate.api.errors import ConfigError
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.names import validate_source
from sluicegate.protocol.timing import SESSION_TIMEOUT_MS


@dataclass(frozen=True)
class CoordinatorConfig:
    source: str
    max_parallelism: int
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    reader_departure_timeout_ms: int = 60_000
    watermark_announce_interval_ms: int = 1_000
    max_watermark_drift_ms: int | None = None
    max_message_bytes: int = 900_000
    """Largest AddSplits record; bigger assignments are split over several seqs."""
    definition: SourceDefinition | None = None
    """What the source is. A restored state's own definition takes precedence (the host
    refuses to start when they differ); None: registrations are not compared."""

    def __post_init__(self) -> None:
        validate_source(self.source)
        _positive("max_parallelism", self.max_parallelism, upper=100_000)
        _positive("session_timeout_ms", self.session_timeout_ms)
        _positive("reader_departure_timeout_ms", self.reader_departure_timeout_ms)
        _positive("watermark_announce_interval_ms", self.watermark_announce_interval_ms)
        if self.max_watermark_drift_ms is not None and self.max_watermark_drift_ms < 0:
            raise ConfigError("max_watermark_drift_ms", "must be >= 0 (or unset to turn alignment off)")
        _positive("max_message_bytes", self.max_message_bytes, lower=1024)


def _positive(setting: str, value: object, lower: int = 1, upper: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(setting, f"must be an integer, got {value!r}")
    if value < lower or (upper is not None and value > upper):
        bound = f">= {lower}" + (f" and <= {upper}" if upper is not None else "")
        raise ConfigError(setting, f"must be {bound}, got {value}")
