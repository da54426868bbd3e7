"""Coordinator settings for one source, validated at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import checked_int
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.names import validate_source
from sluicegate.protocol.pieces import MAX_RECORD_BYTES
from sluicegate.protocol.timing import SESSION_TIMEOUT_MS


@dataclass(frozen=True)
class CoordinatorConfig:
    source: str
    max_parallelism: int
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    reader_departure_timeout_ms: int = 60_000
    watermark_announce_interval_ms: int = 1_000
    max_watermark_drift_ms: int | None = None
    max_message_bytes: int = MAX_RECORD_BYTES
    """Largest record sent to readers; longer lists go in pieces (protocol/pieces.py)."""
    definition: SourceDefinition | None = None
    """What the source is. A restored state's own definition takes precedence (the host
    refuses to start when they differ); None: registrations are not compared."""

    def __post_init__(self) -> None:
        validate_source(self.source)
        checked_int("max_parallelism", self.max_parallelism, 1, 100_000)
        checked_int("session_timeout_ms", self.session_timeout_ms, 1)
        checked_int("reader_departure_timeout_ms", self.reader_departure_timeout_ms, 1)
        checked_int("watermark_announce_interval_ms", self.watermark_announce_interval_ms, 1)
        if self.max_watermark_drift_ms is not None and self.max_watermark_drift_ms < 0:
            raise ConfigError("max_watermark_drift_ms", "must be >= 0 (or unset to turn alignment off)")
        checked_int("max_message_bytes", self.max_message_bytes, 1024)
