"""How long lists travel: in pieces that each fit one control record.

A broker refuses a record over its ``max.message.bytes`` (1 MB by default), and one
decision can move a million splits (a hundred megabytes of ``AddSplits``, fifteen of split
ids). Whoever sends such a list cuts it here, and says in the message how the pieces belong
together (docs/protocol.md, "Records that stay small").
"""

from __future__ import annotations

from typing import TypeVar

import orjson

MAX_RECORD_BYTES = 900_000
"""The largest control record sent by default: below the broker's 1 MB with room to spare."""
ENVELOPE_OVERHEAD_BYTES = 512
"""What the envelope and the other fields of a message add to the list it carries."""

T = TypeVar("T")


def in_pieces(items: list[T], max_record_bytes: int = MAX_RECORD_BYTES) -> list[list[T]]:
    """``items`` (JSON values: splits, split ids) cut in order so that a record carrying one
    piece stays within ``max_record_bytes``; one piece, maybe empty, when they all fit."""
    limit = max_record_bytes - ENVELOPE_OVERHEAD_BYTES
    if len(orjson.dumps(items)) <= limit:  # the common case: one record, one encoding pass
        return [items]
    pieces: list[list[T]] = [[]]
    size = 0
    for item in items:
        n = len(orjson.dumps(item)) + 1
        if pieces[-1] and size + n > limit:
            pieces.append([])
            size = 0
        pieces[-1].append(item)
        size += n
    return pieces
