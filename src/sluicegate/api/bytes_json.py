"""Kafka bytes in JSON, one convention for every JSON sluicegate writes of a record:
text when the bytes are UTF-8, else ``null`` with the bytes in base64 next to it
(``NAME_base64``; a header value: ``{"base64": ...}``)."""

from __future__ import annotations

import base64
from typing import Any


def put_bytes(out: dict[str, Any], name: str, data: bytes | None) -> None:
    """``out[name]`` = the text of ``data``, or None and ``out[name + "_base64"]``."""
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        out[name] = None
        out[f"{name}_base64"] = base64.b64encode(data).decode("ascii")


def header_value(data: bytes | None) -> Any:
    """A header value: its text, or ``{"base64": ...}``."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}
