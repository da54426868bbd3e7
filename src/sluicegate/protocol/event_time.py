"""Event times and watermarks as people read them.

On the wire and in metrics they stay milliseconds since the epoch (UTC); where a person
reads one (progress lines, the audit's tables), the ISO 8601 time comes first and the raw
value after it, so a log can be searched by either."""

from __future__ import annotations

from datetime import UTC, datetime

NO_WATERMARK_TEXT = "none"


def event_time_text(ms: int | None) -> str:
    """``2026-01-01T00:00:00.000Z (1767225600000)``; ``none`` for no value. Values out
    of datetime's range (a minimum watermark) show raw."""
    if ms is None:
        return NO_WATERMARK_TEXT
    try:
        when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return f"{when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} ({ms})"
