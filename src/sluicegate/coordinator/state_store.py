"""The coordinator's durable state on the compacted NS.S.coordinator-state topic.

The core's state comes in parts (``meta``, ``enumerator``, ``slot/<subtask>``); a
part is one record keyed ``<source>/<part>``, so a commit writes only the parts
that changed and compaction keeps the latest of each. A part whose JSON is larger
than ``INLINE_MAX_BYTES`` (64 KB) is cut into content-defined chunks (FastCDC), each a
record keyed ``<source>/<part>#<hash of the chunk>`` (zlib-compressed), and the part's own record
becomes a manifest naming its chunks in order. Chunk boundaries depend on the
bytes around them, not on offsets, so a change in the middle of a part of 80 MB
rewrites the one or two chunks around it (and the small manifest), and no record
is larger than ``STATE_RECORD_MAX_BYTES``: the broker's default limits suffice.
Chunks a manifest no longer names are tombstoned in the same transaction. A part that
encodes to what this writer last wrote for it is not written again (``meta`` excepted: it
is every commit's mark): an enumerator whose periodic discovery found nothing new is
flagged changed but is not. docs/state.md has the reasoning.

The records are written in the same Kafka transaction as the coordinator's
outgoing messages and read back with read_committed: a successor sees exactly the
last commit, manifest and chunks together.
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pyfastcdc import FastCDC

from sluicegate.kafka.compacted import read_all
from sluicegate.protocol.state_records import MANIFEST_MAGIC, chunk_key, state_key

log = logging.getLogger("sluicegate.coordinator")

STATE_RECORD_MAX_BYTES = 1_000_000
"""No state record is larger: Kafka's default max.message.bytes (1,048,588) holds it."""
READ_RECORD_MAX_BYTES = 64 * 1024 * 1024
"""What a successor accepts when reading: states written before chunking had records of up to 64 MB."""
INLINE_MAX_BYTES = 64 * 1024
"""A part up to this size is one record; a larger one is chunked (and so compressed: a
re-registration of 6,250 splits writes a 70 KB state part instead of 484 KB)."""
CHUNK_MIN_BYTES = 128 * 1024
CHUNK_AVG_BYTES = 256 * 1024
CHUNK_MAX_BYTES = 768 * 1024
CHUNK_ZLIB_LEVEL = 1
"""Chunks are compressed (JSON of splits shrinks ~7x at ~60 MB/s): a successor reads a
seventh of the bytes. The digest is of the uncompressed chunk."""
_CDC = FastCDC(avg_size=CHUNK_AVG_BYTES, min_size=CHUNK_MIN_BYTES, max_size=CHUNK_MAX_BYTES)


class StateTooLargeError(RuntimeError):
    """A state record would exceed STATE_RECORD_MAX_BYTES; no commit of this state can succeed."""


class MissingChunkError(RuntimeError):
    """A manifest names a chunk the topic does not hold: the state topic is damaged."""


def chunk_digest(chunk: bytes) -> str:
    """128 bits of SHA-256: with the CPU's SHA instructions (OpenSSL uses them) it is 3x
    faster than BLAKE2b here, 0.3 against 1 ms for a re-registration's 500 KB part. Only
    equality matters: a manifest names its chunks, so a digest of another kind in an
    older state costs one rewrite of those chunks, nothing else."""
    return hashlib.sha256(chunk).hexdigest()[:32]


ALWAYS_WRITTEN = "meta"
"""The part every commit writes, changed or not: the standbys watch the state topic move
(silence.py), and its record is what a commit is known by."""


@dataclass
class StateWriter:
    """Turns changed parts into state records, remembering which chunks each part's
    committed manifest names so that unchanged chunks are not written again, and what it
    last wrote for each part so that a part flagged changed but equal is left out.

    One writer per coordinator incarnation, seeded from the state it restored: a
    failed commit fails the incarnation, and its successor starts from what the topic
    holds.
    """

    source: str
    chunks: dict[str, list[str]]
    """Part -> the digests its last written manifest names (absent: written inline)."""
    written: dict[str, bytes] = field(default_factory=dict)
    """Part -> the SHA-256 of the JSON this writer last wrote inline for it (32 bytes: a
    source of 100,000 slots keeps ~10 MB of them). A restored writer starts without: its
    first write of each inline part is never left out."""

    @classmethod
    def restored(cls, source: str, stored: StoredState | None) -> StateWriter:
        return cls(source, dict(stored.chunks) if stored is not None else {})

    def encode(self, parts: Mapping[str, Any]) -> list[tuple[bytes, bytes | None]]:
        """(key, value) records for ``parts``, those equal to what was last written left
        out (``ALWAYS_WRITTEN`` excepted); value None is a tombstone."""
        records: list[tuple[bytes, bytes | None]] = []
        for name, value in parts.items():
            records += self._encode_part(name, orjson.dumps(value), always=name == ALWAYS_WRITTEN)
        for key, data in records:
            if data is not None and len(data) > STATE_RECORD_MAX_BYTES:
                raise StateTooLargeError(
                    f"state record {key.decode()} is {len(data):,} bytes, above the limit of "
                    f"{STATE_RECORD_MAX_BYTES:,}: this state cannot be committed"
                )
        return records

    def _encode_part(self, name: str, data: bytes, always: bool) -> list[tuple[bytes, bytes | None]]:
        old = self.chunks.pop(name, [])
        if len(data) <= INLINE_MAX_BYTES:
            json_digest = hashlib.sha256(data).digest()
            if not always and not old and self.written.get(name) == json_digest:
                return []
            self.written[name] = json_digest
            return [(state_key(self.source, name), data), *self._tombstones(name, old, set())]
        self.written.pop(name, None)
        pieces = [data[c.offset : c.offset + c.length] for c in _CDC.cut_buf(data)]
        digests = [chunk_digest(piece) for piece in pieces]
        if not always and digests == old:  # the same chunks: the manifest written names them already
            self.chunks[name] = digests
            return []
        known = set(old)
        records: list[tuple[bytes, bytes | None]] = []
        for digest, piece in zip(digests, pieces, strict=True):
            if digest not in known:
                known.add(digest)
                records.append((chunk_key(self.source, name, digest), zlib.compress(piece, CHUNK_ZLIB_LEVEL)))
        manifest = MANIFEST_MAGIC + orjson.dumps({"chunks": digests, "bytes": len(data), "codec": "zlib"})
        records.append((state_key(self.source, name), manifest))
        self.chunks[name] = digests
        return records + self._tombstones(name, old, set(digests))

    def _tombstones(self, name: str, old: Iterable[str], kept: set[str]) -> list[tuple[bytes, bytes | None]]:
        return [(chunk_key(self.source, name, d), None) for d in dict.fromkeys(old) if d not in kept]


@dataclass
class StoredState:
    parts: dict[str, Any]
    chunks: dict[str, list[str]]
    """Part -> digests named by its manifest, for the chunked parts."""


def merge_records(source: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> StoredState:
    """The latest value of each part of ``source`` (later records win), chunked parts
    put back together."""
    prefix = f"{source}/"
    latest: dict[str, bytes] = {}
    for key, value in records:
        if key is None:
            continue
        name = key.decode(errors="replace")
        if not name.startswith(prefix):
            continue
        if value is None:  # a tombstone
            latest.pop(name[len(prefix) :], None)
        else:
            latest[name[len(prefix) :]] = value
    parts: dict[str, Any] = {}
    chunks: dict[str, list[str]] = {}
    for name, value in latest.items():
        if "#" in name:
            continue  # a chunk: read through its manifest
        if value.startswith(MANIFEST_MAGIC):
            manifest = orjson.loads(value[len(MANIFEST_MAGIC) :])
            chunks[name] = manifest["chunks"]
            value = _assemble(name, manifest, latest)
        parts[name] = orjson.loads(value)
    return StoredState(parts, chunks)


def _assemble(name: str, manifest: Mapping[str, Any], latest: Mapping[str, bytes]) -> bytes:
    pieces = []
    for digest in manifest["chunks"]:
        piece = latest.get(f"{name}#{digest}")
        if piece is None:
            raise MissingChunkError(f"state part {name!r} names chunk {digest}, which the state topic does not hold")
        pieces.append(zlib.decompress(piece) if manifest.get("codec") == "zlib" else piece)
    data = b"".join(pieces)
    if len(data) != manifest["bytes"]:
        raise MissingChunkError(f"state part {name!r} is {len(data)} bytes, its manifest says {manifest['bytes']}")
    return data


async def read_state(bootstrap: str, topic: str, source: str) -> StoredState | None:
    """The source's last committed state, or None if it never committed any."""
    return restored_state(source, await read_all(bootstrap, topic, max_record_bytes=READ_RECORD_MAX_BYTES))


def restored_state(source: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> StoredState | None:
    """The source's last committed state in its state topic's ``records`` (in the order
    written), or None if it never committed any."""
    stored = merge_records(source, records)
    if "meta" not in stored.parts:
        return None
    log.info(
        "restored the state of source %s: epoch %d, %d parts (%d chunked)",
        source,
        stored.parts["meta"]["epoch"],
        len(stored.parts),
        len(stored.chunks),
    )
    return stored


def encode_parts(source: str, parts: Mapping[str, Any]) -> list[tuple[bytes, bytes | None]]:
    """The records of ``parts`` as a writer with nothing written before would make them."""
    return StateWriter(source, {}).encode(parts)
