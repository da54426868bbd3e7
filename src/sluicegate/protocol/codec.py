"""orjson encoding and schema-checked decoding of control records.

The JSON Schemas in src/sluicegate_topics/schemas are the single source of truth for what a
valid record is; this module compiles them once and checks every decoded record.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable
from dataclasses import fields
from importlib import resources
from typing import Any

import orjson
from jsonschema import Draft202012Validator

from sluicegate.protocol.messages import (
    ACCEPTED_VERSIONS,
    BODY_TYPES,
    Body,
    Direction,
    Envelope,
)


class DecodeErrorKind(enum.StrEnum):
    MALFORMED = "malformed"
    UNKNOWN_VERSION = "unknown-version"
    UNKNOWN_TYPE = "unknown-type"
    SCHEMA = "schema"


class DecodeError(ValueError):
    """A record that is not a valid control message. Never fatal: dead-lettered and skipped."""

    def __init__(self, kind: DecodeErrorKind, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def encode(env: Envelope) -> bytes:
    return orjson.dumps(env.to_json())


def encode_key(subtask: int) -> bytes:
    """Records are keyed by the subtask as a decimal string (docs/protocol.md, Topics)."""
    return str(subtask).encode()


def decode_key(key: bytes | None) -> int | None:
    """The subtask a record's key names; None for a key ``encode_key`` did not write."""
    if key is None or not key.isdigit():
        return None
    return int(key)


def _load_schema(relative: str) -> dict[str, Any]:
    text = resources.files("sluicegate_topics").joinpath("schemas", relative).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _envelope_validator() -> Draft202012Validator:
    return Draft202012Validator(_load_schema("envelope.schema.json"))


@functools.cache
def _body_validator(direction: Direction, type_: str) -> Draft202012Validator:
    return Draft202012Validator(_load_schema(f"{direction.value}/{type_}.schema.json"))


def _first_error(validator: Draft202012Validator, instance: Any, where: str) -> str | None:
    error = next(iter(validator.iter_errors(instance)), None)
    if error is None:
        return None
    path = "/".join(str(p) for p in error.absolute_path)
    return f"{where}{'/' + path if path else ''}: {error.message}"


def decode(raw: bytes | None, direction: Direction) -> Envelope:
    """Decode one record value sent in ``direction``; raises DecodeError."""
    if raw is None:
        raise DecodeError(DecodeErrorKind.MALFORMED, "record has no value")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(DecodeErrorKind.MALFORMED, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DecodeError(DecodeErrorKind.MALFORMED, "not a JSON object")
    v = data.get("v")
    if type(v) is not int or v not in ACCEPTED_VERSIONS:
        raise DecodeError(
            DecodeErrorKind.UNKNOWN_VERSION, f"protocol version {v!r} is not one of {sorted(ACCEPTED_VERSIONS)}"
        )
    type_ = data.get("type")
    body_cls = BODY_TYPES.get((direction, type_)) if isinstance(type_, str) else None
    if body_cls is None or not isinstance(type_, str):
        raise DecodeError(DecodeErrorKind.UNKNOWN_TYPE, f"unknown message type {type_!r} for {direction.value}")
    problem = _first_error(_envelope_validator(), data, "envelope")
    if problem is None:
        problem = _check_body(direction, type_, data["body"])
    if problem is not None:
        raise DecodeError(DecodeErrorKind.SCHEMA, f"{type_}: {problem}")
    body_data: dict[str, Any] = data["body"]
    # Fields a version-1 sender does not know (v2 additions) keep their defaults.
    body = body_cls(**{name: body_data[name] for name in _FIELD_NAMES[body_cls] if name in body_data})
    return Envelope(
        type=type_,
        source=data["source"],
        subtask=data["subtask"],
        attempt=data["attempt"],
        epoch=data["epoch"],
        ts=data["ts"],
        body=body,
        v=v,
        inbox_offset=data.get("inbox_offset"),
        cseq=data.get("cseq"),
        incarnation=data.get("incarnation"),
    )


def _split_problem(split: Any) -> str | None:
    if not isinstance(split, dict):
        return f"{split!r} is not of type 'object'"
    split_id = split.get("split_id")
    if not isinstance(split_id, str) or not split_id:
        return f"split_id must be a non-empty string, got {split_id!r}"
    return None


def _split_id_problem(split_id: Any) -> str | None:
    return None if isinstance(split_id, str) else f"{split_id!r} is not of type 'string'"


LIST_ITEM_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "splits": _split_problem,
    "reported_splits": _split_problem,
    "returned": _split_problem,
    "split_ids": _split_id_problem,
    "dropped_split_ids": _split_id_problem,
}
"""Body fields holding lists of splits or split ids, and the schema's rule for one item.
An AddSplits or SplitsReleased may carry thousands of items; the JSON Schema walk costs
~30 us per split (a 6,250-id SplitsReleased took ~35 ms), so the items are checked here
and the rest of the body by the schema."""


def _check_body(direction: Direction, type_: str, body: Any) -> str | None:
    if not isinstance(body, dict):
        return "body: not an object"
    lists = {f: body[f] for f in LIST_ITEM_CHECKS if isinstance(body.get(f), list)}
    for field_name, items in lists.items():
        check = LIST_ITEM_CHECKS[field_name]
        for i, item in enumerate(items):
            problem = check(item)
            if problem is not None:
                return f"body/{field_name}/{i}: {problem}"
    if lists:
        body = {**body, **{f: [] for f in lists}}
    return _first_error(_body_validator(direction, type_), body, "body")


_FIELD_NAMES: dict[type[Body], tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in BODY_TYPES.values()
}
