"""The local broker's mutual TLS mode: an SSL listener that requires a client certificate
signed by its CA, principals taken from the certificates, ACLs enforced.

``MtlsSetup(dir).ensure(users)`` writes, once (kept across restarts):

- ``ca.pem`` / ``ca.key`` and the broker's key store (certificates.py);
- per user, ``users/<name>.pem`` (subject ``/O=sluicegate/OU=sluicegate-dev/CN=<name>``),
  ``users/<name>.key`` (PKCS#8, encrypted), ``users/<name>.key-password`` and
  ``users/<name>.env``: the SLUICEGATE_KAFKA_* variables of a client presenting that
  certificate (``set -a; . users/reader.env``).

The listener's ``ssl.principal.mapping.rules`` makes those subjects ``User:<name>``, so
``sluicegate acls`` fits with its default principals, as in the SCRAM mode; any other
certificate the CA signed keeps its whole subject DN (``User:CN=x,OU=y,O=z``, Kafka's
DEFAULT rule). ``admin`` and the broker itself (``User:CN=localhost``: it connects to its
own listener with its certificate) are super users; the KRaft controller listener stays
PLAINTEXT on 127.0.0.1, reached as ANONYMOUS, a super user too. Not for production.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from sluicegate.devtools.broker.certificates import BROKER_SUBJECT, CertificateError, make_ca_and_broker, make_client
from sluicegate.devtools.broker.secure import ADMIN_USER, SecureSetupError
from sluicegate.kafka.security import ENV_PREFIX, KafkaSecurity, read_secret_file

LISTENER = "SSL"
DEV_OU = "sluicegate-dev"
PRINCIPAL_RULES = f"RULE:^CN=([^,]+),OU={DEV_OU},O=sluicegate$/$1/,DEFAULT"
"""The dev users' subjects (RFC 2253: ``CN=reader,OU=sluicegate-dev,O=sluicegate``) -> their
CN; any other subject as it is."""


def user_subject(user: str) -> str:
    """The subject of ``user``'s certificate, as openssl's ``-subj`` takes it."""
    return f"/O=sluicegate/OU={DEV_OU}/CN={user}"


@dataclass(frozen=True)
class MtlsSetup:
    """The certificates of a mutual TLS local broker, in ``directory``."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def keystore(self) -> Path:
        return self.directory / "broker.p12"

    def certificate(self, user: str) -> Path:
        return self.directory / "users" / f"{user}.pem"

    def key(self, user: str) -> Path:
        return self.directory / "users" / f"{user}.key"

    def key_password_file(self, user: str) -> Path:
        return self.directory / "users" / f"{user}.key-password"

    def env_file(self, user: str) -> Path:
        return self.directory / "users" / f"{user}.env"

    def users(self) -> list[str]:
        folder = self.directory / "users"
        return sorted(p.stem for p in folder.glob("*.pem")) if folder.is_dir() else []

    def security(self, user: str) -> KafkaSecurity:
        """The client settings of ``user``."""
        return KafkaSecurity(
            protocol=LISTENER,
            ssl_ca_location=self.ca,
            ssl_cert_location=self.certificate(user),
            ssl_key_location=self.key(user),
            ssl_key_password=read_secret_file(self.key_password_file(user), "key password"),
        )

    def ensure(self, users: tuple[str, ...]) -> None:
        """Create what is missing: the CA, the broker key store, a certificate per user."""
        (self.directory / "users").mkdir(parents=True, exist_ok=True)
        try:
            if not self.ca.is_file() or not self.keystore.is_file():
                make_ca_and_broker(self.directory)
            for user in (ADMIN_USER, *users):
                if not self.certificate(user).is_file():
                    self._make_user(user)
        except CertificateError as exc:
            raise SecureSetupError(str(exc)) from None

    def _make_user(self, user: str) -> None:
        password = secrets.token_urlsafe(18)
        self.key_password_file(user).write_text(password + "\n", encoding="utf-8")
        self.key_password_file(user).chmod(0o600)
        cert, key = make_client(self.directory / "users", user, user_subject(user), password, ca_dir=self.directory)
        env = {
            f"{ENV_PREFIX}SECURITY_PROTOCOL": LISTENER,
            f"{ENV_PREFIX}SSL_CA_LOCATION": str(self.ca),
            f"{ENV_PREFIX}SSL_CERT_LOCATION": str(cert),
            f"{ENV_PREFIX}SSL_KEY_LOCATION": str(key),
            f"{ENV_PREFIX}SSL_KEY_PASSWORD_FILE": str(self.key_password_file(user)),
        }
        self.env_file(user).write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")

    def keystore_password(self) -> str:
        return (self.directory / "broker.p12.password").read_text(encoding="utf-8").strip()

    def server_properties(self, port: int) -> dict[str, str]:
        """The broker settings of the SSL listener requiring client certificates, and the authorizer."""
        return {
            "listeners": f"{LISTENER}://127.0.0.1:{port}",
            "advertised.listeners": f"{LISTENER}://127.0.0.1:{port}",
            "inter.broker.listener.name": LISTENER,
            "listener.security.protocol.map": f"{LISTENER}:SSL,CONTROLLER:PLAINTEXT",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": self.keystore_password(),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": PRINCIPAL_RULES,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN_USER};User:{BROKER_SUBJECT.lstrip('/')};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_arguments(self) -> list[str]:
        """No users to format into the storage: a certificate is the credential."""
        return []
