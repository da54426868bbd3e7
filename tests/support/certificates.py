"""Certificates made in the tests with the ``cryptography`` package: independent of the
openssl-made ones of the local broker (sluicegate.devtools.broker.certificates), so a
test can present a certificate no sluicegate code wrote: one from a CA of its own
(untrusted), or one the broker's CA signs for a subject of the test's choice."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_ATTRIBUTES = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME}


@dataclass(frozen=True)
class Issuer:
    certificate: x509.Certificate
    key: CertificateIssuerPrivateKeyTypes


def subject(dn: str) -> x509.Name:
    """``CN=reader,OU=ops,O=example`` (RFC 2253 order, most specific first) as a Name."""
    parts = [part.split("=", 1) for part in dn.split(",")]
    return x509.Name([x509.NameAttribute(_ATTRIBUTES[k], v) for k, v in reversed(parts)])


def new_ca(dn: str = "CN=test-ca") -> Issuer:
    key = ec.generate_private_key(ec.SECP256R1())
    name = subject(dn)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Issuer(cert, key)


def load_ca(cert: Path, key: Path) -> Issuer:
    """An openssl-made CA (PEM certificate, unencrypted key)."""
    loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert isinstance(loaded, rsa.RSAPrivateKey), "the dev CA's key is RSA (certificates.py)"
    return Issuer(x509.load_pem_x509_certificate(cert.read_bytes()), loaded)


def write_ca(issuer: Issuer, path: Path) -> Path:
    path.write_bytes(issuer.certificate.public_bytes(serialization.Encoding.PEM))
    return path


def write_client(
    issuer: Issuer, dn: str, directory: Path, name: str, key_password: str | None = None, one_file: bool = False
) -> tuple[Path, Path]:
    """A client certificate for ``dn`` signed by ``issuer``, as ``name.pem`` and a PKCS#8 key
    ``name.key`` (encrypted with ``key_password``); ``one_file``: the key in ``name.pem`` too
    (a PEM key store, as Java's clients take one). Returns (certificate, key) paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(subject(dn), issuer.certificate.subject, key.public_key())
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(issuer.key, hashes.SHA256())
    )
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(key_password.encode()) if key_password else serialization.NoEncryption()
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(key_pem + cert_pem if one_file else cert_pem)
    key_path.write_bytes(key_pem)
    return cert_path, key_path


def _builder(name: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
