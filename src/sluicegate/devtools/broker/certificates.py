"""A development CA and the certificates it signs, made with the openssl command.

The local broker's secured modes share them: a CA (``ca.pem``/``ca.key``), the broker's
key and certificate (SAN 127.0.0.1 and localhost) in a PKCS12 key store, and in the
mutual TLS mode one client certificate per user. Keys are PKCS#8 (OpenSSL 3's default),
the one form Java's Kafka clients read as well as librdkafka and Python's ssl.
Good for development and tests, not for production.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path

BROKER_SUBJECT = "/CN=localhost"
"""The broker's certificate subject; with client authentication the broker also connects to
itself with it, as principal ``User:CN=localhost`` (a super user)."""


class CertificateError(RuntimeError):
    pass


def make_ca_and_broker(directory: Path) -> str:
    """Write ``ca.pem``, ``ca.key``, ``broker.pem``/``broker.key`` and ``broker.p12``; return
    the key store's password (also in ``broker.p12.password``)."""
    d = directory
    store_password = secrets.token_urlsafe(18)
    (d / "broker.p12.password").write_text(store_password + "\n", encoding="utf-8")
    extensions = d / "san.cnf"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "extendedKeyUsage=serverAuth,clientAuth\n",
        encoding="utf-8",
    )
    ca, ca_key = d / "ca.pem", d / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", "/CN=sluicegate-dev-ca",
        "-keyout", str(ca_key), "-out", str(ca),
    )  # fmt: skip
    _signed(d, "broker", BROKER_SUBJECT, extensions, d)
    _openssl(
        "pkcs12", "-export", "-in", str(d / "broker.pem"), "-inkey", str(d / "broker.key"), "-name", "broker",
        "-out", str(d / "broker.p12"), "-passout", f"pass:{store_password}",
    )  # fmt: skip
    return store_password


def make_client(
    directory: Path, name: str, subject: str, key_password: str | None = None, ca_dir: Path | None = None
) -> tuple[Path, Path]:
    """A client certificate ``directory/<name>.pem`` signed by the CA in ``ca_dir`` (default
    ``directory``) and its key ``<name>.key`` (encrypted with ``key_password`` when given);
    return both paths."""
    extensions = directory / "client.cnf"
    extensions.write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n", encoding="utf-8")
    cert, key = _signed(directory, name, subject, extensions, ca_dir or directory)
    if key_password is not None:
        plain = key.with_suffix(".plain.key")
        key.replace(plain)
        try:
            _openssl(
                "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(plain), "-out", str(key),
                "-passout", f"pass:{key_password}",
            )  # fmt: skip
        finally:
            plain.unlink()
    key.chmod(0o600)
    return cert, key


def _signed(directory: Path, name: str, subject: str, extensions: Path, ca_dir: Path) -> tuple[Path, Path]:
    key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_dir / "ca.pem"), "-CAkey", str(ca_dir / "ca.key"),
        "-CAcreateserial", "-days", "3650", "-extfile", str(extensions), "-out", str(cert),
    )  # fmt: skip
    csr.unlink()
    return cert, key


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertificateError("openssl is needed to create the secured broker's certificates")
    done = subprocess.run([openssl, *args], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {done.stderr.strip()}")
