"""Records in pieces (protocol v6, protocol/pieces.py): a record cut by its sender comes out
of the receiver's Assembly whole, exactly once, and only at its last piece."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.protocol.codec import decode, encode
from sluicegate.protocol.messages import (
    Body,
    CheckpointAck,
    Direction,
    Envelope,
    ReaderLeaving,
    ReaderRegistered,
    ReaderRegistration,
    envelope,
)
from sluicegate.protocol.pieces import Assembly, body_in_pieces


def _split(k: int, pad: int = 0) -> dict[str, Any]:
    return {"split_id": f"orders-{k}", "topic": "orders", "partition": k, "position": k * 7, "pad": "x" * pad}


def _env(body: Body, attempt: int | None = 3, incarnation: str | None = "inc-a") -> Envelope:
    return envelope(body, source="orders", subtask=2, attempt=attempt, epoch=1, ts=0, incarnation=incarnation)


def _through(assembly: Assembly, pieces: Sequence[Body]) -> list[Envelope | None]:
    return [assembly.take(_env(piece)) for piece in pieces]


def _ack(n: int, returned: int = 0, checkpoint_id: int = 9) -> CheckpointAck:
    return CheckpointAck(
        checkpoint_id=checkpoint_id,
        applied_seq=4,
        splits=[_split(k) for k in range(n)],
        returned=[_split(k) for k in range(n, n + returned)],
    )


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=300), min_size=0, max_size=120),
    returned=st.integers(min_value=0, max_value=30),
    limit=st.integers(min_value=1500, max_value=6000),
)
def test_an_ack_cut_to_any_limit_fits_it_and_comes_back_whole_at_its_last_piece(
    sizes: list[int], returned: int, limit: int
) -> None:
    body = CheckpointAck(
        checkpoint_id=7,
        applied_seq=3,
        splits=[_split(k, pad) for k, pad in enumerate(sizes)],
        returned=[_split(1000 + k) for k in range(returned)],
    )
    pieces = body_in_pieces(body, limit)
    assert [p.piece for p in pieces] == list(range(len(pieces)))
    assert [p.more for p in pieces] == [True] * (len(pieces) - 1) + [False]
    for piece in pieces:
        assert len(encode(_env(piece))) <= limit
    taken = _through(Assembly(), pieces)
    assert taken[:-1] == [None] * (len(pieces) - 1)
    whole = taken[-1]
    assert whole is not None and whole.body == body


def test_a_record_that_fits_is_sent_as_it_is() -> None:
    body = _ack(3)
    assert body_in_pieces(body) == [body]
    assert Assembly().take(_env(body)) == _env(body)


def test_every_pieced_type_round_trips_through_the_codec_and_the_assembly() -> None:
    definition = {"connector": "kafka", "options": {"topic": "orders", "startingOffsets": "latest"}}
    bodies: list[Body] = [
        _ack(60, returned=10),
        ReaderRegistration("inc-a", "host-1", [_split(k) for k in range(60)], 4, True, definition),
        ReaderLeaving([_split(k) for k in range(60)]),
    ]
    for body in bodies:
        pieces = body_in_pieces(body, 1200)
        assert len(pieces) > 2, body.TYPE
        assembly = Assembly()
        decoded = [decode(encode(_env(p)), Direction.TO_COORDINATOR) for p in pieces]
        whole = [assembly.take(env) for env in decoded][-1]
        assert whole is not None and whole.body == body
    registered = ReaderRegistered("inc-a", 5, [f"orders-{k}" for k in range(300)])
    pieces = body_in_pieces(registered, 1200)
    assert len(pieces) > 2
    envs = [envelope(p, source="orders", subtask=2, attempt=5, epoch=1, ts=0, cseq=i + 1) for i, p in enumerate(pieces)]
    assembly = Assembly()
    whole = [assembly.take(decode(encode(e), Direction.TO_READER)) for e in envs][-1]
    assert whole is not None and whole.body == registered


def test_a_record_sent_again_from_its_first_piece_is_assembled_once_without_duplicates() -> None:
    dropped: list[str] = []
    assembly = Assembly()
    pieces = body_in_pieces(_ack(50), 1500)
    assert len(pieces) >= 3
    assert _through(assembly, pieces[:2]) == [None, None]  # the sender failed here, and starts over
    *held, whole = [assembly.take(_env(p), on_dropped=dropped.append) for p in pieces]
    assert held == [None] * (len(pieces) - 1) and dropped == ["CheckpointAck"]
    assert whole is not None and whole.body == _ack(50)
    assert not assembly


def test_a_piece_that_does_not_follow_is_dropped_with_what_is_held_and_nothing_is_acted_on() -> None:
    dropped: list[str] = []
    assembly = Assembly()
    pieces = body_in_pieces(_ack(50), 1500)
    assert assembly.take(_env(pieces[0])) is None
    assert assembly.take(_env(pieces[2]), on_dropped=dropped.append) is None  # piece 1 never came
    assert [assembly.take(_env(p), on_dropped=dropped.append) for p in pieces[3:]] == [None] * len(pieces[3:])
    assert dropped == ["CheckpointAck"], "one record dropped, counted once however many pieces followed"
    assert not assembly, "nothing held: the record never became whole"


def test_a_last_piece_alone_is_not_a_record() -> None:
    pieces = body_in_pieces(_ack(50), 1500)
    assert Assembly().take(_env(pieces[-1])) is None


def test_pieces_of_another_record_or_sender_do_not_mix() -> None:
    ours = body_in_pieces(_ack(50, checkpoint_id=9), 1500)
    other_checkpoint = body_in_pieces(_ack(50, checkpoint_id=10), 1500)
    assembly = Assembly()
    assert assembly.take(_env(ours[0])) is None
    assert assembly.take(_env(other_checkpoint[1])) is None
    assert not assembly
    assert assembly.take(_env(ours[0])) is None
    assert assembly.take(_env(ours[1], attempt=4)) is None, "another attempt's piece"
    assert not assembly
    assert assembly.take(_env(ours[0])) is None
    assert assembly.take(_env(ours[1], incarnation="inc-b")) is None, "another incarnation's piece"
    assert not assembly


def test_what_is_held_survives_a_json_round_trip_and_assembly_goes_on() -> None:
    pieces = body_in_pieces(_ack(50), 1500)
    first = Assembly()
    assert _through(first, pieces[:2]) == [None, None]
    successor = Assembly(orjson.loads(orjson.dumps(first.to_json())))
    whole = _through(successor, pieces[2:])[-1]
    assert whole is not None and whole.body == _ack(50)


def test_other_records_pass_between_pieces() -> None:
    from sluicegate.protocol.messages import Heartbeat

    pieces = body_in_pieces(_ack(50), 1500)
    assembly = Assembly()
    assert assembly.take(_env(pieces[0])) is None
    beat = _env(Heartbeat(watermark=5, idle=False))
    assert assembly.take(beat) is beat
    whole = _through(assembly, pieces[1:])[-1]
    assert whole is not None and whole.body == _ack(50)
