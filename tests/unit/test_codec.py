"""The wire codec: orjson encoding, schema-checked decoding, DecodeError kinds."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.protocol import (
    PROTOCOL_VERSION,
    AddSplits,
    Body,
    CheckpointAck,
    CoordinatorSourceEvent,
    DecodeError,
    DecodeErrorKind,
    Direction,
    Envelope,
    Heartbeat,
    MaxParallelismRaised,
    NoMoreSplits,
    ReaderLeaving,
    ReaderRegistered,
    ReaderRegistration,
    ReaderSourceEvent,
    RegistrationRefused,
    ReleaseRequest,
    RequestSplit,
    SlotGranted,
    SlotRequest,
    SourceRedefined,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
    decode,
    encode,
    encode_key,
    envelope,
)

SPLIT = {"split_id": "seq-00001", "start": 10, "end": 20, "position": 13}

EXAMPLES: list[Body] = [
    ReaderRegistration(incarnation="3f2a", location="host-1", reported_splits=[SPLIT], restored_checkpoint_id=7),
    ReaderRegistration(incarnation="3f2b", location="", reported_splits=[], restored_checkpoint_id=None),
    ReaderRegistration(
        incarnation="3f2c", location="driver", reported_splits=[], restored_checkpoint_id=None, exclusive=True
    ),
    SlotRequest(incarnation="3f2d", location="host-2", name="reader-a"),
    SlotRequest(incarnation="3f2e", location="host-2"),
    MaxParallelismRaised(max_parallelism=16),
    SourceRedefined(definition={"connector": "kafka", "options": {"topics": "b"}}),
    SourceRedefined(
        definition={"connector": "kafka", "options": {"topics": "b"}},
        previous={"connector": "kafka", "options": {"topics": "a"}},
    ),
    ReaderRegistration(
        incarnation="3f2f",
        location="host-2",
        reported_splits=[],
        restored_checkpoint_id=None,
        definition={"connector": "sequence", "options": {"splits": "8"}},
    ),
    RequestSplit(hostname="host-1"),
    RequestSplit(hostname=None),
    ReaderSourceEvent(payload={"kind": "lag", "values": [1, 2.5, None, True, "x"]}),
    Heartbeat(watermark=1_763_800_000_123, idle=False),
    Heartbeat(watermark=None, idle=True),
    CheckpointAck(checkpoint_id=12, applied_seq=4, splits=[SPLIT]),
    CheckpointAck(checkpoint_id=13, applied_seq=5, splits=[], returned=[SPLIT]),
    CheckpointAck(checkpoint_id=14, applied_seq=5, splits=[SPLIT], base_checkpoint_id=13),
    SplitsFinished(split_ids=["seq-00001", "seq-00002"]),
    ReaderLeaving(splits=[SPLIT]),
    ReaderRegistered(incarnation="3f2a", attempt=3),
    SlotGranted(incarnation="3f2d", name="reader-a"),
    SlotGranted(incarnation="3f2e"),
    RegistrationRefused(incarnation="3f2c", reason="held", holder_incarnation="3f2a", holder_location="host-1"),
    RegistrationRefused(incarnation="3f2e", reason="no free slot"),
    RegistrationRefused(incarnation="3f2g", reason="another definition", cause="definition"),
    ReleaseRequest(seq=4, split_ids=["a"]),
    AddSplits(seq=1, splits=[SPLIT, {"split_id": "other"}]),
    NoMoreSplits(seq=9),
    CoordinatorSourceEvent(payload=["any", {"json": 1}]),
    WatermarkAnnouncement(low_watermark=100, max_allowed_watermark=5100),
    WatermarkAnnouncement(low_watermark=None, max_allowed_watermark=None),
    SplitsReleased(reason="fenced", failed_attempt=2, split_ids=["a", "b"]),
    SplitsReleased(reason="departed", failed_attempt=None, split_ids=[]),
    SplitsReleased(
        reason="fenced", failed_attempt=3, split_ids=[], successor_incarnation="9c", successor_location="host-2"
    ),
    SplitsReleased(reason="returned", failed_attempt=None, split_ids=["a"]),
]


def _env(body: Body, **overrides: Any) -> Envelope:
    fields: dict[str, Any] = {
        "source": "orders",
        "subtask": 3,
        "attempt": 2,
        "epoch": 5,
        "ts": 1_763_800_000_123,
    }
    fields.update(overrides)
    return envelope(body, **fields)


def _raw(message: Body, **overrides: Any) -> dict[str, Any]:
    data = _env(message).to_json()
    data.update(overrides)
    return data


def _decode_error(data: Any, direction: Direction = Direction.TO_COORDINATOR) -> DecodeError:
    raw = data if isinstance(data, bytes) or data is None else orjson.dumps(data)
    with pytest.raises(DecodeError) as info:
        decode(raw, direction)
    return info.value


def test_every_message_type_is_covered_by_the_examples() -> None:
    from sluicegate.protocol.messages import BODY_TYPES

    assert {type(b) for b in EXAMPLES} == set(BODY_TYPES.values())


@pytest.mark.parametrize("body", EXAMPLES, ids=lambda b: f"{b.DIRECTION.value}:{b.TYPE}")
def test_round_trip_of_every_message_type(body: Body) -> None:
    env = _env(body, inbox_offset=41, cseq=99) if body.DIRECTION is Direction.TO_READER else _env(body)
    decoded = decode(encode(env), body.DIRECTION)
    assert decoded == env
    assert type(decoded.body) is type(body)
    assert decoded.v == PROTOCOL_VERSION == 8


def test_encoded_record_is_the_documented_envelope() -> None:
    env = _env(AddSplits(seq=1, splits=[SPLIT]), inbox_offset=7, cseq=8)
    data = orjson.loads(encode(env))
    assert data == {
        "v": 8,
        "type": "AddSplits",
        "source": "orders",
        "subtask": 3,
        "attempt": 2,
        "epoch": 5,
        "ts": 1_763_800_000_123,
        "body": {"seq": 1, "splits": [SPLIT]},
        "inbox_offset": 7,
        "cseq": 8,
    }
    # without them, the optional v2 fields are left out
    assert "cseq" not in orjson.loads(encode(_env(NoMoreSplits(seq=1))))
    assert encode_key(12) == b"12"


def test_the_same_type_name_decodes_per_direction() -> None:
    raw = encode(_env(ReaderSourceEvent(payload=1)))
    assert isinstance(decode(raw, Direction.TO_COORDINATOR).body, ReaderSourceEvent)
    assert isinstance(decode(raw, Direction.TO_READER).body, CoordinatorSourceEvent)


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe", b'{"v": 2,'])
def test_malformed_json_is_a_malformed_decode_error(raw: bytes) -> None:
    assert _decode_error(raw).kind is DecodeErrorKind.MALFORMED


def test_a_record_without_value_is_malformed() -> None:
    assert _decode_error(None).kind is DecodeErrorKind.MALFORMED


@pytest.mark.parametrize("data", [[1, 2], "text", 3, None, True])
def test_a_json_value_that_is_not_an_object_is_malformed(data: Any) -> None:
    error = _decode_error(orjson.dumps(data))
    assert error.kind is DecodeErrorKind.MALFORMED
    assert "object" in error.detail


@pytest.mark.parametrize("v", [9, 0, -1, "2", 2.0, True, None])
def test_unknown_version(v: Any) -> None:
    error = _decode_error(_raw(Heartbeat(watermark=1, idle=False), v=v))
    assert error.kind is DecodeErrorKind.UNKNOWN_VERSION


def test_missing_version_is_unknown_version() -> None:
    data = _raw(Heartbeat(watermark=1, idle=False))
    del data["v"]
    assert _decode_error(data).kind is DecodeErrorKind.UNKNOWN_VERSION


@pytest.mark.parametrize("type_", ["Nope", "", 7, None, "heartbeat"])
def test_unknown_type(type_: Any) -> None:
    error = _decode_error(_raw(Heartbeat(watermark=1, idle=False), type=type_))
    assert error.kind is DecodeErrorKind.UNKNOWN_TYPE


def test_a_type_of_the_other_direction_is_unknown() -> None:
    raw = encode(_env(AddSplits(seq=1, splits=[])))
    assert _decode_error(raw, Direction.TO_COORDINATOR).kind is DecodeErrorKind.UNKNOWN_TYPE
    raw = encode(_env(Heartbeat(watermark=None, idle=True)))
    assert _decode_error(raw, Direction.TO_READER).kind is DecodeErrorKind.UNKNOWN_TYPE


@pytest.mark.parametrize(
    ("direction", "data"),
    [
        (Direction.TO_READER, _raw(AddSplits(seq=1, splits=[]), body={"seq": 0, "splits": []})),
        (
            Direction.TO_READER,
            _raw(AddSplits(seq=1, splits=[]), body={"seq": 1, "splits": [{"start": 1}]}),
        ),
        (
            Direction.TO_READER,
            _raw(AddSplits(seq=1, splits=[]), body={"seq": 1, "splits": [{"split_id": ""}]}),
        ),
        (Direction.TO_READER, _raw(AddSplits(seq=1, splits=[]), body={"splits": []})),
        (Direction.TO_READER, _raw(NoMoreSplits(seq=1), body={"seq": "1"})),
        (
            Direction.TO_READER,
            _raw(
                SplitsReleased(reason="left", failed_attempt=None, split_ids=[]),
                body={"reason": "bored", "failed_attempt": None, "split_ids": []},
            ),
        ),
        (
            Direction.TO_COORDINATOR,
            _raw(Heartbeat(watermark=1, idle=False), body={"watermark": 1, "idle": "no"}),
        ),
        (
            Direction.TO_COORDINATOR,
            _raw(Heartbeat(watermark=1, idle=False), body={"watermark": 1.5, "idle": False}),
        ),
        (
            Direction.TO_COORDINATOR,
            _raw(
                CheckpointAck(checkpoint_id=1, applied_seq=0, splits=[]),
                body={"checkpoint_id": 1, "applied_seq": -1, "splits": []},
            ),
        ),
        (Direction.TO_COORDINATOR, _raw(SplitsFinished(split_ids=[]), body={"split_ids": [1]})),
        (
            Direction.TO_COORDINATOR,
            _raw(
                ReaderRegistration(incarnation="x", location="h", reported_splits=[], restored_checkpoint_id=None),
                body={
                    "incarnation": "",
                    "location": "h",
                    "reported_splits": [],
                    "restored_checkpoint_id": None,
                },
            ),
        ),
        (Direction.TO_COORDINATOR, _raw(RequestSplit(hostname=None), body=[])),
    ],
    ids=lambda x: x["type"] + ":" + orjson.dumps(x["body"]).decode() if isinstance(x, dict) else "",
)
def test_a_body_failing_its_schema(direction: Direction, data: dict[str, Any]) -> None:
    error = _decode_error(data, direction)
    assert error.kind is DecodeErrorKind.SCHEMA
    assert data["type"] in error.detail


@pytest.mark.parametrize(
    "overrides",
    [
        {"source": "Orders"},
        {"subtask": -2},
        {"subtask": "3"},
        {"epoch": -1},
        {"ts": "now"},
        {"attempt": "2"},
        {"cseq": "x"},
    ],
)
def test_an_envelope_failing_its_schema(overrides: dict[str, Any]) -> None:
    error = _decode_error(_raw(Heartbeat(watermark=1, idle=False), **overrides))
    assert error.kind is DecodeErrorKind.SCHEMA


def test_missing_envelope_field_is_a_schema_error() -> None:
    data = _raw(Heartbeat(watermark=1, idle=False))
    del data["ts"]
    assert _decode_error(data).kind is DecodeErrorKind.SCHEMA


def test_version_1_records_are_accepted() -> None:
    data = {
        "v": 1,
        "type": "CheckpointAck",
        "source": "orders",
        "subtask": 0,
        "attempt": 1,
        "epoch": 1,
        "ts": 5,
        "body": {"checkpoint_id": 3, "applied_seq": 2, "splits": [SPLIT]},
    }
    env = decode(orjson.dumps(data), Direction.TO_COORDINATOR)
    assert env.v == 1
    assert env.body == CheckpointAck(checkpoint_id=3, applied_seq=2, splits=[SPLIT])
    assert env.cseq is None and env.inbox_offset is None
    v1_to_reader = {**data, "type": "AddSplits", "body": {"seq": 1, "splits": [SPLIT]}}
    assert decode(orjson.dumps(v1_to_reader), Direction.TO_READER).body == AddSplits(seq=1, splits=[SPLIT])


def test_unknown_body_fields_are_ignored() -> None:
    data = _raw(RequestSplit(hostname="h"), body={"hostname": "h", "future_field": 1})
    assert decode(orjson.dumps(data), Direction.TO_COORDINATOR).body == RequestSplit(hostname="h")


# -- property: encode/decode round-trips arbitrary valid bodies --------------------------

INT64 = st.integers(min_value=-(2**53), max_value=2**53)
NAT = st.integers(min_value=0, max_value=2**53)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
ID = TEXT.filter(bool)
JSON = st.recursive(
    st.none() | st.booleans() | INT64 | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
WIRE_SPLIT = st.builds(lambda sid, extra: {**extra, "split_id": sid}, ID, st.dictionaries(TEXT, JSON, max_size=3))
SPLITS = st.lists(WIRE_SPLIT, max_size=4)
OPT_INT = st.none() | INT64

BODIES: st.SearchStrategy[Body] = st.one_of(
    st.builds(
        ReaderRegistration,
        incarnation=ID,
        location=TEXT,
        reported_splits=SPLITS,
        restored_checkpoint_id=OPT_INT,
    ),
    st.builds(RequestSplit, hostname=st.none() | TEXT),
    st.builds(ReaderSourceEvent, payload=JSON),
    st.builds(Heartbeat, watermark=OPT_INT, idle=st.booleans()),
    st.builds(CheckpointAck, checkpoint_id=INT64, applied_seq=NAT, splits=SPLITS),
    st.builds(SplitsFinished, split_ids=st.lists(TEXT, max_size=4)),
    st.builds(ReaderLeaving, splits=SPLITS),
    st.builds(ReaderRegistered, incarnation=TEXT, attempt=st.integers(1, 2**53)),
    st.builds(AddSplits, seq=st.integers(1, 2**53), splits=SPLITS),
    st.builds(NoMoreSplits, seq=st.integers(1, 2**53)),
    st.builds(CoordinatorSourceEvent, payload=JSON),
    st.builds(WatermarkAnnouncement, low_watermark=OPT_INT, max_allowed_watermark=OPT_INT),
    st.builds(
        SplitsReleased,
        reason=st.sampled_from(["fenced", "session-timeout", "departed", "recovery", "left"]),
        failed_attempt=OPT_INT,
        split_ids=st.lists(TEXT, max_size=4),
    ),
)
SOURCE_NAME = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(
    body=BODIES,
    source=SOURCE_NAME,
    subtask=NAT,
    attempt=st.none() | INT64,
    epoch=NAT,
    ts=INT64,
    inbox_offset=OPT_INT,
    cseq=OPT_INT,
)
def test_encode_decode_round_trips_arbitrary_valid_bodies(
    body: Body,
    source: str,
    subtask: int,
    attempt: int | None,
    epoch: int,
    ts: int,
    inbox_offset: int | None,
    cseq: int | None,
) -> None:
    env = envelope(
        body,
        source=source,
        subtask=subtask,
        attempt=attempt,
        epoch=epoch,
        ts=ts,
        inbox_offset=inbox_offset,
        cseq=cseq,
    )
    assert decode(encode(env), body.DIRECTION) == env
