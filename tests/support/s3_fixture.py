"""An S3-compatible endpoint for the test session: moto's server on 127.0.0.1 (a free
port), started once and stopped at the end. Tests reach it through s3fs, with the
``storage.*`` options of the ``files`` connector."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

ACCESS_KEY = "sluicegate-test-key"
SECRET_KEY = "sluicegate-test-secret-9f2c"
"""Not a real secret; tests check that it never reaches a log."""


@dataclass(frozen=True)
class S3Endpoint:
    url: str

    def storage_options(self) -> dict[str, str]:
        """The ``files`` connector's options for this endpoint."""
        return {
            "storage.endpoint_url": self.url,
            "storage.key": ACCESS_KEY,
            "storage.secret": SECRET_KEY,
            "storage.client_kwargs.region_name": "us-east-1",
        }

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(
            endpoint_url=self.url, key=ACCESS_KEY, secret=SECRET_KEY, client_kwargs={"region_name": "us-east-1"}
        )

    def new_bucket(self) -> str:
        import boto3

        name = f"sg-{uuid.uuid4().hex[:12]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)
        return name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Endpoint(f"http://127.0.0.1:{port}")
    finally:
        server.stop()
