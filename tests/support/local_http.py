"""Talking to servers a test started on 127.0.0.1: a free port for one, GET from it, and
polling until something holds."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_get(port: int, path: str, timeout_s: float = 5.0) -> tuple[int, str, bytes]:
    """(status, content type, body) of GET http://127.0.0.1:port/path; status 0 if nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()
    except (urllib.error.URLError, OSError):
        return 0, "", b""


def wait_until(predicate: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.2) -> T:
    """Poll ``predicate`` until it returns something truthy; AssertionError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def source_snapshot(port: int, source: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The coordinator's whole `/sources/{source}` snapshot. While a step runs the endpoint
    answers with the runner's state only (the core is being changed), so this polls until
    an answer names the epoch and the subtasks."""

    def whole() -> dict[str, Any] | None:
        status, _, body = http_get(port, f"/sources/{source}")
        if status != 200:
            return None
        snapshot: dict[str, Any] = orjson.loads(body)
        return snapshot if "subtasks" in snapshot else None

    return wait_until(whole, timeout_s, f"a whole /sources/{source} snapshot on port {port}")


def coordinator_metrics(port: int, source: str, timeout_s: float = 30.0) -> str:
    """A coordinator worker's `/metrics` text with the core's series of ``source``. While a
    step runs a scrape leaves them out (the core is being changed), so this polls until a
    scrape has them (its epoch gauge is one of them)."""
    epoch_series = f'sluicegate_coordinator_epoch{{source="{source}"}} '

    def whole() -> str | None:
        status, ctype, body = http_get(port, "/metrics")
        assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
        text = body.decode()
        return text if epoch_series in text else None

    return wait_until(whole, timeout_s, f"a scrape of port {port} with the core's series of {source}")
