"""The PEM files of a TLS client: checked once at start, and read for Java's Kafka clients.

A CA file that is not PEM, a client key that does not open with its password or does
not belong to its certificate would otherwise surface as a failed handshake at the
first connection, long after start and far from the setting to fix. ``tls_problem``
loads them the way every client library will (OpenSSL, through Python's ``ssl``) and
says which file is wrong.

Java's Kafka clients (the executors of ``readPath=jvm``) take a PEM key store either
as one file holding an *encrypted* key and its certificate (``ssl.keystore.location``,
which Kafka refuses without ``ssl.key.password``) or inline (``ssl.keystore.key`` and
``ssl.keystore.certificate.chain``); ``pem_blocks`` reads the inline values.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from pathlib import Path

_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----\r?\n?", re.DOTALL)


@dataclass(frozen=True)
class TlsProblem:
    """Which file (by the model's setting name, e.g. ``ssl key location``) and why."""

    setting: str
    problem: str


def readable_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file, or None."""
    if not path.is_file():
        return f"{path} is not a readable file" + ("" if path.exists() else " (it does not exist)")
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    return None


def tls_problem(ca: Path | None, cert: Path | None, key: Path | None, key_password: str | None) -> TlsProblem | None:
    """What is wrong with these files as a TLS client's trust and identity, or None.
    ``key`` None: the key is in ``cert`` (a PEM key store)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca is not None:
        try:
            context.load_verify_locations(cafile=str(ca))
        except ssl.SSLError as exc:
            return TlsProblem("ssl ca location", f"{ca} holds no PEM certificate ({exc.reason or exc})")
    if cert is None:
        return None
    try:
        # A password is always passed: without one, OpenSSL would prompt on the terminal.
        context.load_cert_chain(str(cert), str(key) if key else None, password=key_password or "")
    except ssl.SSLError as exc:
        return _identity_problem(exc, cert, key, key_password)
    return None


def _identity_problem(exc: ssl.SSLError, cert: Path, key: Path | None, key_password: str | None) -> TlsProblem:
    reason = str(exc.reason or exc)
    key_file = key or cert
    if reason == "KEY_VALUES_MISMATCH":
        return TlsProblem("ssl key location", f"the key in {key_file} does not belong to the certificate {cert}")
    if not _has_block(cert, "CERTIFICATE"):
        return TlsProblem("ssl cert location", f"{cert} holds no PEM certificate")
    if not _has_key(key_file):
        return TlsProblem("ssl key location", f"{key_file} holds no PEM private key")
    if key_password is None:
        return TlsProblem("ssl key password", f"is required: the key in {key_file} is encrypted ({reason})")
    return TlsProblem("ssl key password", f"does not open the key in {key_file} ({reason})")


def pem_blocks(path: Path, kind: str) -> str:
    """The PEM blocks of ``path`` whose label ends with ``kind`` (``CERTIFICATE``,
    ``PRIVATE KEY``: also ``ENCRYPTED PRIVATE KEY``), joined."""
    text = path.read_text(encoding="ascii", errors="replace")
    return "".join(m.group(0) for m in _BLOCK.finditer(text) if m.group(1).endswith(kind))


def key_is_pkcs8(path: Path) -> bool:
    """Whether the key in ``path`` is PKCS#8 (``PRIVATE KEY`` / ``ENCRYPTED PRIVATE KEY``),
    the only form Java's Kafka clients read; ``openssl pkcs8 -topk8`` converts the others."""
    labels = [m.group(1) for m in _BLOCK.finditer(path.read_text(encoding="ascii", errors="replace"))]
    return any(label in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY") for label in labels)


def key_is_encrypted(path: Path) -> bool:
    return "ENCRYPTED PRIVATE KEY" in {
        m.group(1) for m in _BLOCK.finditer(path.read_text(encoding="ascii", errors="replace"))
    }


def _has_block(path: Path, kind: str) -> bool:
    return bool(pem_blocks(path, kind))


def _has_key(path: Path) -> bool:
    return bool(pem_blocks(path, "PRIVATE KEY"))
