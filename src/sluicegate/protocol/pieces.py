"""How long lists travel: in pieces that each fit one control record.

A broker refuses a record over its ``max.message.bytes`` (1 MB by default), and one
decision can move a million splits (a hundred megabytes of ``AddSplits``, fifteen of split
ids); one reader's checkpoint of 15,000 Kafka partitions is over a megabyte of positions.
Whoever sends such a list cuts it here, and says in the message how the pieces belong
together (docs/protocol.md, "Records that stay small"). Two ways:

- lists whose pieces stand alone (``AddSplits``, ``SplitsFinished``, ...): ``in_pieces``,
  each piece its own message;
- records that mean something only whole (a ``CheckpointAck`` names *every* split of the
  checkpoint): ``body_in_pieces`` cuts the record into pieces numbered by ``piece``, all
  but the last with ``more``, and the receiver's ``Assembly`` puts them back together
  before anyone acts on them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import orjson

from sluicegate.protocol.messages import (
    Body,
    CheckpointAck,
    Envelope,
    ReaderLeaving,
    ReaderRegistered,
    ReaderRegistration,
)

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 900_000
"""The largest control record sent by default: below the broker's 1 MB with room to spare."""
ENVELOPE_OVERHEAD_BYTES = 512
"""What the envelope and the other fields of a message add to the list it carries."""

T = TypeVar("T")
B = TypeVar("B", bound=Body)

PIECED_LISTS: Mapping[type[Body], tuple[str, ...]] = {
    CheckpointAck: ("splits", "returned"),
    ReaderRegistration: ("reported_splits",),
    ReaderLeaving: ("splits",),
    ReaderRegistered: ("dropped_split_ids",),
}
"""The records sent in pieces (v6) and the lists that are cut; every other field is the same
in every piece."""


def in_pieces(items: list[T], max_record_bytes: int = MAX_RECORD_BYTES) -> list[list[T]]:
    """``items`` (JSON values: splits, split ids) cut in order so that a record carrying one
    piece stays within ``max_record_bytes``; one piece, maybe empty, when they all fit."""
    limit = max_record_bytes - ENVELOPE_OVERHEAD_BYTES
    if len(orjson.dumps(items)) <= limit:  # the common case: one record, one encoding pass
        return [items]
    return _cut(items, limit)


def _cut(items: list[T], limit: int) -> list[list[T]]:
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


def body_in_pieces(body: B, max_record_bytes: int = MAX_RECORD_BYTES) -> list[B]:
    """``body`` (a type of ``PIECED_LISTS``) as the records that carry it: itself when it
    fits, else pieces 0, 1, 2 ... that each fit, alike but for their lists, every one but the
    last with ``more``. The lists are cut in order, the first list's items first."""
    names = PIECED_LISTS[type(body)]
    lists = {name: getattr(body, name) for name in names}
    pieced: Any = body  # a dataclass with ``piece`` and ``more``, which B does not say
    fixed = len(orjson.dumps(dataclasses.replace(pieced, **{n: [] for n in names}).to_json()))
    limit = max_record_bytes - ENVELOPE_OVERHEAD_BYTES - fixed
    if sum(len(orjson.dumps(items)) for items in lists.values()) <= limit:
        return [body]
    tagged = [(name, item) for name in names for item in lists[name]]
    cut = _cut(tagged, limit)
    return [
        dataclasses.replace(
            pieced,
            **{n: [item for name, item in piece if name == n] for n in names},
            piece=i,
            more=i < len(cut) - 1,
        )
        for i, piece in enumerate(cut)
    ]


def may_be_a_piece(env: Envelope) -> bool:
    """Whether ``env`` is of a type that can come in pieces: any other passes an
    ``Assembly`` untouched, and a receiver holding nothing may skip it."""
    return type(env.body) in PIECED_LISTS


@dataclasses.dataclass
class _Held:
    identity: dict[str, Any]
    next_piece: int
    lists: dict[str, list[Any]]


class Assembly:
    """One sender's records in pieces, held until each is whole. Pure, and its state is
    JSON: the coordinator commits it with the sender's subtask, so a successor goes on
    assembling where its predecessor stopped.

    Rules, per record type: piece 0 starts a record (a record still held is dropped: its
    sender gave it up, and sent it again or another); piece k appends to the held record
    if that one is at k and is the same record (same attempt, incarnation and fields);
    any other piece is dropped with what is held. A held record that is dropped is counted
    and logged once (the pieces of it still to come are dropped as they arrive, and said
    once, at the last), never acted on: a record that never became whole changes nothing.
    """

    def __init__(self, held: Mapping[str, Any] | None = None) -> None:
        self._held: dict[str, _Held] = {
            type_: _Held(h["identity"], h["next_piece"], h["lists"]) for type_, h in (held or {}).items()
        }

    def __bool__(self) -> bool:
        return bool(self._held)

    def to_json(self) -> dict[str, Any]:
        """What is held, sharing its lists (encoded at once by the caller): ``asdict`` copied
        them deeply, and a held ack of 100,000 splits took seconds a step."""
        return {
            type_: {"identity": h.identity, "next_piece": h.next_piece, "lists": h.lists}
            for type_, h in self._held.items()
        }

    def take(self, env: Envelope, on_dropped: Callable[[str], None] | None = None) -> Envelope | None:
        """``env`` itself when it is no piece; the whole record at its last piece; None while
        a record is still being assembled (or a piece was dropped)."""
        names = PIECED_LISTS.get(type(env.body))
        if names is None:
            return env  # no type that comes in pieces (may_be_a_piece)
        body: Any = env.body
        if body.piece == 0 and not body.more and env.type not in self._held:
            return env  # the common case, every ack of a small reader: nothing to assemble
        held = self._held.pop(env.type, None)
        identity = _identity(env, names)
        if body.piece == 0:
            if held is not None:
                _dropped(env, held, "a new record started", on_dropped)
            if not body.more:
                return env
            self._held[env.type] = _Held(identity, 1, {n: list(getattr(body, n)) for n in names})
            return None
        if held is None or held.next_piece != body.piece or held.identity != identity:
            if held is not None:
                _dropped(env, held, f"piece {body.piece} does not follow what is held", on_dropped)
            elif not body.more:  # the rest of a record dropped before (counted then): said once
                log.warning(
                    "dropped the last piece (%d) of a %s of subtask %d whose start was not held",
                    body.piece,
                    env.type,
                    env.subtask,
                )
            return None
        for n in names:
            held.lists[n].extend(getattr(body, n))
        if body.more:
            held.next_piece += 1
            self._held[env.type] = held
            return None
        whole = dataclasses.replace(body, **held.lists, piece=0, more=False)
        return dataclasses.replace(env, body=whole)


def _identity(env: Envelope, names: tuple[str, ...]) -> dict[str, Any]:
    """What every piece of one record has in common: the sender's attempt and incarnation
    and the body's fields but its lists (the envelope's epoch and ts may move in between)."""
    fixed = {k: v for k, v in env.body.to_json().items() if k not in names and k not in ("piece", "more")}
    return {"attempt": env.attempt, "incarnation": env.incarnation, "body": fixed}


def _dropped(env: Envelope, held: _Held | None, why: str, on_dropped: Callable[[str], None] | None) -> None:
    log.warning(
        "dropped an incomplete %s of subtask %d (%s, %d pieces held): it never became whole",
        env.type,
        env.subtask,
        why,
        held.next_piece if held else 0,
    )
    if on_dropped is not None:
        on_dropped(env.type)
