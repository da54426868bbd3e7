"""What one record does to one split, in a sentence: ``split_event``. Pure.

``audit --split ID --follow`` prints the split's history as it grows: each record the
follower applies that names the split, once. A checkpoint acknowledgement is printed
only when the acknowledged position moved (a reader acknowledges every split it holds
at every checkpoint).
"""

from __future__ import annotations

from typing import Any

from sluicegate.audit.replay import ReplayRecord
from sluicegate.protocol import AddSplits, CheckpointAck, ReaderLeaving, ReleaseRequest, SplitsFinished, SplitsReleased


def _position(splits: list[dict[str, Any]], split_id: str) -> Any:
    return next((s.get("position") for s in splits if s.get("split_id") == split_id), None)


class SplitEvents:
    """The events of one split, each described once."""

    def __init__(self, split_id: str) -> None:
        self.split_id = split_id
        self._acknowledged: dict[int, Any] = {}
        """subtask -> the position last acknowledged (printed when it moves)."""

    def describe(self, record: ReplayRecord) -> str | None:
        """A sentence if ``record`` names the split (and says something new), else None."""
        env, sid = record.env, self.split_id
        who = f"subtask {env.subtask} attempt {env.attempt}"
        body = env.body
        if isinstance(body, AddSplits) and any(s.get("split_id") == sid for s in body.splits):
            return f"given to {who} at position {_position(body.splits, sid)} (seq {body.seq}, cseq {env.cseq})"
        if isinstance(body, ReleaseRequest) and sid in body.split_ids:
            return f"asked back from {who} (seq {body.seq}, cseq {env.cseq})"
        if isinstance(body, SplitsReleased) and sid in body.split_ids:
            return f"released by {who} ({body.reason}, cseq {env.cseq})"
        if isinstance(body, SplitsFinished) and sid in body.split_ids:
            return f"finished by {who} (inbox offset {record.location.offset})"
        if isinstance(body, CheckpointAck):
            returned = _position(body.returned, sid)
            if returned is not None:
                return f"returned by {who} at position {returned} (checkpoint {body.checkpoint_id})"
            position = _position(body.splits, sid)
            if position is not None and self._acknowledged.get(env.subtask) != position:
                self._acknowledged[env.subtask] = position
                return f"{who} acknowledged position {position} (checkpoint {body.checkpoint_id})"
        if isinstance(body, ReaderLeaving) and (position := _position(body.splits, sid)) is not None:
            return f"handed back by {who}, leaving, at position {position}"
        return None
