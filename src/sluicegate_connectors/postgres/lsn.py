"""WAL positions (LSNs): PostgreSQL writes them ``16/B374D848`` (two 32-bit halves in hex);
the connector keeps them as integers, which compare and travel in JSON as they are."""

from __future__ import annotations

from sluicegate.api.errors import SourceError


def parse_lsn(text: str) -> int:
    high, slash, low = text.strip().partition("/")
    if not slash:
        raise SourceError(f"{text!r} is not a WAL position (expected e.g. 16/B374D848)")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
