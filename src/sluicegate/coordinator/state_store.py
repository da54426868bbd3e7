"""The coordinator's durable state on the compacted NS.S.coordinator-state topic.

The core's state comes in parts (``meta``, ``enumerator``, ``slot/<subtask>``);
each part is one record keyed ``<source>/<part>``, so a commit writes only the
parts that changed and compaction keeps the latest of each. The records are
written in the same Kafka transaction as the coordinator's outgoing messages,
and read back with read_committed: a successor sees exactly the last commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from sluicegate.kafka.compacted import read_all

log = logging.getLogger("sluicegate.coordinator")

STATE_RECORD_MAX_BYTES = 64 * 1024 * 1024
"""The state topic's max.message.bytes (topics.toml): an enumerator with 100,000
unassigned splits is several MB of JSON."""


def state_key(source: str, part: str) -> bytes:
    return f"{source}/{part}".encode()


def encode_parts(source: str, parts: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    return [(state_key(source, name), orjson.dumps(value)) for name, value in parts.items()]


def merge_records(source: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, Any]:
    """The latest value of each part of ``source`` (later records win)."""
    prefix = f"{source}/"
    parts: dict[str, Any] = {}
    for key, value in records:
        if key is None:
            continue
        name = key.decode(errors="replace")
        if not name.startswith(prefix):
            continue
        if value is None:  # a tombstone
            parts.pop(name[len(prefix) :], None)
        else:
            parts[name[len(prefix) :]] = orjson.loads(value)
    return parts


async def read_state(bootstrap: str, topic: str, source: str) -> dict[str, Any] | None:
    """The source's last committed state, or None if it never committed any."""
    records = await read_all(bootstrap, topic, max_record_bytes=STATE_RECORD_MAX_BYTES)
    parts = merge_records(source, records)
    if "meta" not in parts:
        return None
    log.info("restored the state of source %s: epoch %d, %d parts", source, parts["meta"]["epoch"], len(parts))
    return parts
