"""The local broker's secured mode: TLS with a CA of its own, SCRAM users, ACLs enforced.

``SecureSetup(dir).ensure(users)`` writes, once (kept across restarts):

- ``ca.pem`` / ``ca.key``: a CA clients trust (``SLUICEGATE_KAFKA_SSL_CA_LOCATION``);
- ``broker.p12``: the broker's key and certificate (SAN 127.0.0.1 and localhost),
  signed by the CA, in a PKCS12 keystore;
- ``users/<name>.password``: a random SCRAM-SHA-512 password per user, and
  ``users/<name>.env``: the SLUICEGATE_KAFKA_* variables of a client logging in as
  that user (``set -a; . users/coordinator.env``).

``admin`` is the broker's own principal and a super user; every other user may do
only what ACLs allow (``sluicegate acls``). The KRaft controller listener stays
PLAINTEXT on 127.0.0.1: the broker reaches its controller as ANONYMOUS, which is
therefore a super user too. Good for development and tests, not for production.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from sluicegate.devtools.broker.certificates import CertificateError, make_ca_and_broker
from sluicegate.kafka.security import ENV_PREFIX, KafkaSecurity, Secret

ADMIN_USER = "admin"
DEFAULT_USERS = ("coordinator", "reader", "audit")
MECHANISM = "SCRAM-SHA-512"
LISTENER = "SASL_SSL"


class SecureSetupError(RuntimeError):
    pass


@dataclass(frozen=True)
class SecureSetup:
    """The certificates and users of a secured local broker, in ``directory``."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.directory / "broker.p12"

    def password_file(self, user: str) -> Path:
        return self.directory / "users" / f"{user}.password"

    def env_file(self, user: str) -> Path:
        return self.directory / "users" / f"{user}.env"

    def users(self) -> list[str]:
        folder = self.directory / "users"
        return sorted(p.stem for p in folder.glob("*.password")) if folder.is_dir() else []

    def password(self, user: str) -> str:
        return self.password_file(user).read_text(encoding="utf-8").strip()

    def security(self, user: str) -> KafkaSecurity:
        """The client settings of ``user``."""
        return KafkaSecurity(
            protocol="SASL_SSL",
            sasl_mechanism=MECHANISM,
            sasl_username=user,
            sasl_password=Secret(self.password(user)),
            ssl_ca_location=self.ca,
        )

    def ensure(self, users: tuple[str, ...] = DEFAULT_USERS) -> None:
        """Create what is missing: the CA, the broker keystore, a password per user."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "users").mkdir(exist_ok=True)
        if not self.ca.is_file() or not self.keystore.is_file():
            self._make_certificates()
        for user in (ADMIN_USER, *users):
            if not self.password_file(user).is_file():
                self.password_file(user).write_text(secrets.token_urlsafe(18) + "\n", encoding="utf-8")
                self.password_file(user).chmod(0o600)
            env = {
                f"{ENV_PREFIX}SECURITY_PROTOCOL": "SASL_SSL",
                f"{ENV_PREFIX}SASL_MECHANISM": MECHANISM,
                f"{ENV_PREFIX}SASL_USERNAME": user,
                f"{ENV_PREFIX}SASL_PASSWORD_FILE": str(self.password_file(user)),
                f"{ENV_PREFIX}SSL_CA_LOCATION": str(self.ca),
            }
            self.env_file(user).write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")

    def keystore_password(self) -> str:
        return (self.directory / "broker.p12.password").read_text(encoding="utf-8").strip()

    def _make_certificates(self) -> None:
        try:
            make_ca_and_broker(self.directory)
        except CertificateError as exc:
            raise SecureSetupError(str(exc)) from None

    def server_properties(self, port: int) -> dict[str, str]:
        """The broker settings of the SASL_SSL listener, TLS and the authorizer."""
        admin_jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN_USER}" password="{self.password(ADMIN_USER)}";'
        )
        return {
            "listeners": f"{LISTENER}://127.0.0.1:{port}",
            "advertised.listeners": f"{LISTENER}://127.0.0.1:{port}",
            "inter.broker.listener.name": LISTENER,
            "listener.security.protocol.map": f"{LISTENER}:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.{LISTENER.lower()}.scram-sha-512.sasl.jaas.config": admin_jaas,
            f"listener.name.{LISTENER.lower()}.scram-sha-256.sasl.jaas.config": admin_jaas,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": self.keystore_password(),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": "none",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN_USER};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments creating every user's SCRAM credentials."""
        args: list[str] = []
        for user in self.users():
            args += ["--add-scram", f"{MECHANISM}=[name={user},password={self.password(user)}]"]
        return args
