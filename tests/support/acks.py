"""What one attempt's acknowledgements say its checkpoint holds, read off the inbox.

Since protocol v7 an attempt's first ``CheckpointAck`` names every split and each later one
only those that moved (``base_checkpoint_id``), so the last ack alone no longer says what a
reader held: the acks are applied in order, as the coordinator's tracker applies them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def acknowledged_splits(records: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Mapping[str, Any]]:
    """Split id -> split as last acknowledged, after ``records`` (type and JSON body of one
    attempt's inbox records, in order): a whole ack (piece 0 of one) replaces what was held,
    an ack of changes updates it, and ``SplitsFinished`` and an ack's ``returned`` take
    splits out."""
    held: dict[str, Mapping[str, Any]] = {}
    for type_, body in records:
        if type_ == "SplitsFinished":
            for split_id in body["split_ids"]:
                held.pop(split_id, None)
        elif type_ == "CheckpointAck":
            if body.get("base_checkpoint_id") is None and body.get("piece", 0) == 0:
                held = {}
            held.update((split["split_id"], split) for split in body["splits"])
            for split in body.get("returned", []):
                held.pop(split["split_id"], None)
    return held
