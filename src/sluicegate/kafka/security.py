"""How every sluicegate client authenticates to the control-plane Kafka cluster.

One model, ``KafkaSecurity`` (protocol, SASL PLAIN/SCRAM, TLS with a CA and an
optional client certificate), resolved once at start from ``SLUICEGATE_KAFKA_*``
variables, ``--kafka-*`` flags or Spark options, and turned into the settings of
each client library by one function each: aiokafka (every producer, consumer and
admin client), Faust (the coordinator's group membership), librdkafka
(benchmarks) and Spark's Kafka option names.

A process talks to one control-plane cluster, so the resolved settings are also
the process default (``use_security`` / ``current_security``) that the client
factories in ``clients.py`` apply when a caller passes none. Passwords come from
the environment or a file, never from a flag value (``ps`` would show it), and
are never logged: ``Secret`` hides its value in ``repr``.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.kafka.tls_files import key_is_encrypted, key_is_pkcs8, pem_blocks, readable_problem, tls_problem

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

ENV_PREFIX = "SLUICEGATE_KAFKA_"
"""SLUICEGATE_KAFKA_SECURITY_PROTOCOL, _SASL_MECHANISM, _SASL_USERNAME, _SASL_PASSWORD
(or _SASL_PASSWORD_FILE), _SSL_CA_LOCATION, _SSL_CERT_LOCATION, _SSL_KEY_LOCATION,
_SSL_KEY_PASSWORD (or _SSL_KEY_PASSWORD_FILE), _SSL_CHECK_HOSTNAME."""

SPARK_SECURITY_OPTIONS = (
    "kafka.security.protocol",
    "kafka.sasl.mechanism",
    "kafka.sasl.jaas.config",
    "kafka.sasl.username",
    "kafka.sasl.password",
    "kafka.ssl.truststore.location",
    "kafka.ssl.truststore.type",
    "kafka.ssl.keystore.location",
    "kafka.ssl.keystore.type",
    "kafka.ssl.key.password",
    "kafka.ssl.ca.location",
    "kafka.ssl.certificate.location",
    "kafka.ssl.key.location",
    "kafka.ssl.endpoint.identification.algorithm",
)
"""The options ``KafkaSecurity.from_spark_options`` reads (Spark's Kafka source names and
the librdkafka-style ones)."""


class Secret:
    """A password: ``repr`` and ``str`` never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class KafkaSecurity:
    """Authentication and encryption settings of the control-plane Kafka clients."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_ca_location: Path | None = None
    ssl_cert_location: Path | None = None
    ssl_key_location: Path | None = None
    ssl_key_password: Secret | None = None
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        protocol = self.protocol.strip().upper()
        object.__setattr__(self, "protocol", protocol)
        if protocol not in PROTOCOLS:
            raise ConfigError("security protocol", f"{self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.uses_sasl:
            mechanism = (self.sasl_mechanism or "").strip().upper()
            if mechanism not in MECHANISMS:
                raise ConfigError("sasl mechanism", f"{self.sasl_mechanism!r} is not one of {', '.join(MECHANISMS)}")
            object.__setattr__(self, "sasl_mechanism", mechanism)
            if not self.sasl_username:
                raise ConfigError("sasl username", f"is required with security protocol {protocol}")
            if self.sasl_password is None:
                raise ConfigError("sasl password", f"is required with security protocol {protocol}")
        for name in ("ssl_ca_location", "ssl_cert_location", "ssl_key_location"):
            path = getattr(self, name)
            problem = readable_problem(Path(path)) if path is not None else None
            if problem is not None:
                raise ConfigError(name.replace("_", " "), problem)
        if self.ssl_key_location is not None and self.ssl_cert_location is None:
            raise ConfigError("ssl cert location", "is required with an ssl key")
        if self.uses_ssl:
            self._check_tls_files()

    def _check_tls_files(self) -> None:
        """A CA that is not PEM or a key its password does not open fails now, named, not
        at the first handshake."""
        password = self.ssl_key_password.reveal() if self.ssl_key_password else None
        found = tls_problem(self.ssl_ca_location, self.ssl_cert_location, self.ssl_key_location, password)
        if found is not None:
            raise ConfigError(found.setting, found.problem)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """For logs: what is used, never a password."""
        parts = [self.protocol]
        if self.uses_sasl:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username}")
        if self.uses_ssl and self.ssl_ca_location:
            parts.append(f"CA {self.ssl_ca_location}")
        if self.uses_ssl and self.ssl_cert_location:
            parts.append(f"client certificate {self.ssl_cert_location}")
        return ", ".join(parts)

    # --- sources of settings --------------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """From SLUICEGATE_KAFKA_* variables; unset means PLAINTEXT."""
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(ENV_PREFIX + name, "").strip()
            return value or None

        return _checked(
            _env_name,
            protocol=get("SECURITY_PROTOCOL") or "PLAINTEXT",
            sasl_mechanism=get("SASL_MECHANISM"),
            sasl_username=get("SASL_USERNAME"),
            sasl_password=_secret(
                env.get(ENV_PREFIX + "SASL_PASSWORD"), get("SASL_PASSWORD_FILE"), ENV_PREFIX + "SASL_PASSWORD_FILE"
            ),
            ssl_ca_location=_path(get("SSL_CA_LOCATION")),
            ssl_cert_location=_path(get("SSL_CERT_LOCATION")),
            ssl_key_location=_path(get("SSL_KEY_LOCATION")),
            ssl_key_password=_secret(
                env.get(ENV_PREFIX + "SSL_KEY_PASSWORD"),
                get("SSL_KEY_PASSWORD_FILE"),
                ENV_PREFIX + "SSL_KEY_PASSWORD_FILE",
            ),
            ssl_check_hostname=_flag(get("SSL_CHECK_HOSTNAME"), ENV_PREFIX + "SSL_CHECK_HOSTNAME"),
        )

    def overridden(self, **changes: Any) -> KafkaSecurity:
        """These settings with the non-None ``changes`` (CLI flags over the environment)."""
        given = {k: v for k, v in changes.items() if v is not None}
        if not given:
            return self
        try:
            return replace(self, **given)
        except ConfigError as exc:
            raise ConfigError(f"--kafka-{exc.setting.replace(' ', '-')}", exc.problem) from None

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str], env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """From the options of ``format("sluicegate")`` (lower-cased keys), named as Spark's
        Kafka source names them (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
        ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location`` with
        ``kafka.ssl.truststore.type=PEM``, ``kafka.ssl.keystore.location`` with type PEM
        holding the certificate and key, ``kafka.ssl.key.password``; the librdkafka-style
        ``kafka.ssl.ca.location``, ``kafka.ssl.certificate.location``,
        ``kafka.ssl.key.location``, ``kafka.sasl.username``, ``kafka.sasl.password`` too).
        Without ``kafka.security.protocol``, the driver's SLUICEGATE_KAFKA_* environment; without
        a password in the options, the driver's SLUICEGATE_KAFKA_SASL_PASSWORD(_FILE)."""
        opts = {k.lower(): v for k, v in options.items()}
        if "kafka.security.protocol" not in opts:
            return cls.from_env(env)
        username, password = opts.get("kafka.sasl.username"), opts.get("kafka.sasl.password")
        if "kafka.sasl.jaas.config" in opts:
            username, password = _parse_jaas(opts["kafka.sasl.jaas.config"])
        for kind in ("truststore", "keystore"):
            store_type = opts.get(f"kafka.ssl.{kind}.type", "PEM").strip().upper()
            if f"kafka.ssl.{kind}.location" in opts and store_type != "PEM":
                raise ConfigError(
                    f"kafka.ssl.{kind}.type",
                    f"{store_type} stores are not supported; give PEM files (kafka.ssl.{kind}.type=PEM), "
                    "e.g. converted with `openssl pkcs12 -nodes`",
                )
        key_password = opts.get("kafka.ssl.key.password")
        sasl_password = Secret(password) if password is not None else None
        if sasl_password is None:  # kept out of the options (Spark shows them): the driver's env
            env = os.environ if env is None else env
            sasl_password = _secret(
                env.get(ENV_PREFIX + "SASL_PASSWORD"),
                env.get(ENV_PREFIX + "SASL_PASSWORD_FILE"),
                ENV_PREFIX + "SASL_PASSWORD_FILE",
            )
        return _checked(
            lambda setting: spark_option_for(setting, opts),
            protocol=opts["kafka.security.protocol"],
            sasl_mechanism=opts.get("kafka.sasl.mechanism"),
            sasl_username=username,
            sasl_password=sasl_password,
            ssl_ca_location=_path(opts.get("kafka.ssl.truststore.location") or opts.get("kafka.ssl.ca.location")),
            ssl_cert_location=_path(
                opts.get("kafka.ssl.keystore.location") or opts.get("kafka.ssl.certificate.location")
            ),
            ssl_key_location=_path(opts.get("kafka.ssl.key.location")),
            ssl_key_password=Secret(key_password) if key_password is not None else None,
            ssl_check_hostname=opts.get("kafka.ssl.endpoint.identification.algorithm", "https").strip() != "",
        )

    # --- conversions ---------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.uses_ssl:
            return None
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=str(self.ssl_ca_location) if self.ssl_ca_location else None
        )
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_cert_location is not None:
            context.load_cert_chain(
                str(self.ssl_cert_location),
                str(self.ssl_key_location) if self.ssl_key_location else None,
                self.ssl_key_password.reveal() if self.ssl_key_password else None,
            )
        return context

    def aiokafka_settings(self) -> dict[str, Any]:
        """Keyword arguments of AIOKafkaProducer, AIOKafkaConsumer and AIOKafkaAdminClient."""
        settings: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_ssl:
            settings["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            assert self.sasl_password is not None  # checked in __post_init__
            settings.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password.reveal(),
            )
        return settings

    def faust_credentials(self) -> Any:
        """``broker_credentials`` of a Faust app (None for PLAINTEXT)."""
        import faust

        if self.uses_sasl:
            assert self.sasl_password is not None
            return faust.SASLCredentials(
                username=self.sasl_username,
                password=self.sasl_password.reveal(),
                mechanism=self.sasl_mechanism,
                ssl_context=self.ssl_context(),
            )
        if self.uses_ssl:
            return faust.SSLCredentials(self.ssl_context())
        return None

    def librdkafka_config(self) -> dict[str, str]:
        """confluent-kafka / librdkafka configuration properties."""
        config = {"security.protocol": self.protocol.lower()}
        if self.uses_sasl:
            assert self.sasl_password is not None
            config.update(
                {
                    "sasl.mechanism": str(self.sasl_mechanism),
                    "sasl.username": str(self.sasl_username),
                    "sasl.password": self.sasl_password.reveal(),
                }
            )
        if self.uses_ssl:
            for key, path in (
                ("ssl.ca.location", self.ssl_ca_location),
                ("ssl.certificate.location", self.ssl_cert_location),
                # librdkafka reads the key only from ssl.key.location: a PEM key store's is in its one file
                ("ssl.key.location", self.ssl_key_location or self.ssl_cert_location),
            ):
                if path is not None:
                    config[key] = str(path)
            if self.ssl_key_password is not None:
                config["ssl.key.password"] = self.ssl_key_password.reveal()
            if not self.ssl_check_hostname:
                config["ssl.endpoint.identification.algorithm"] = "none"
        return config

    def spark_options(self) -> dict[str, str]:
        """The options of ``format("sluicegate")`` (and of Spark's Kafka source) for these settings."""
        options = {"kafka.security.protocol": self.protocol}
        if self.uses_sasl:
            assert self.sasl_password is not None
            module = "plain.PlainLoginModule" if self.sasl_mechanism == "PLAIN" else "scram.ScramLoginModule"
            options["kafka.sasl.mechanism"] = str(self.sasl_mechanism)
            options["kafka.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.{module} required "
                f'username="{_jaas_escape(str(self.sasl_username))}" '
                f'password="{_jaas_escape(self.sasl_password.reveal())}";'
            )
        if self.uses_ssl:
            if self.ssl_ca_location is not None:
                options["kafka.ssl.truststore.type"] = "PEM"
                options["kafka.ssl.truststore.location"] = str(self.ssl_ca_location)
            if self.ssl_cert_location is not None:
                options["kafka.ssl.keystore.type"] = "PEM"
                options["kafka.ssl.keystore.location"] = str(self.ssl_cert_location)
            if self.ssl_key_location is not None:
                options["kafka.ssl.key.location"] = str(self.ssl_key_location)
            if self.ssl_key_password is not None:
                options["kafka.ssl.key.password"] = self.ssl_key_password.reveal()
            if not self.ssl_check_hostname:
                options["kafka.ssl.endpoint.identification.algorithm"] = ""
        return options

    def java_client_settings(self) -> dict[str, str]:
        """The settings of a Java Kafka client (the executors of ``readPath=jvm``), without
        ``kafka.``. The client's identity as a PEM key store (``ssl.keystore.type=PEM``): a
        file with an encrypted key read with ``ssl.key.password``, as Kafka reads one; else the
        certificate chain and the key inline, since Kafka refuses a PEM file whose key has
        no password and takes no separate key file."""
        identity = ("kafka.ssl.keystore.location", "kafka.ssl.key.location", "kafka.ssl.key.password")
        settings = {k[len("kafka.") :]: v for k, v in self.spark_options().items() if k not in identity}
        if self.uses_ssl and self.ssl_cert_location is not None:
            settings.update(
                self._java_identity(self.ssl_cert_location, self.ssl_key_location or self.ssl_cert_location)
            )
        return settings

    def _java_identity(self, cert: Path, key: Path) -> dict[str, str]:
        if not key_is_pkcs8(key):
            raise ConfigError(
                "ssl key location",
                f"the key in {key} is not PKCS#8, the only form Java's Kafka clients read: convert it with "
                "`openssl pkcs8 -topk8` (-nocrypt for a key without a password)",
            )
        settings = {"ssl.keystore.type": "PEM"}
        if self.ssl_key_password is not None:
            settings["ssl.key.password"] = self.ssl_key_password.reveal()
        if key == cert and self.ssl_key_password is not None and key_is_encrypted(key):
            settings["ssl.keystore.location"] = str(cert)
        else:
            settings["ssl.keystore.certificate.chain"] = pem_blocks(cert, "CERTIFICATE")
            settings["ssl.keystore.key"] = pem_blocks(key, "PRIVATE KEY")
        return settings


def _checked(spell: Callable[[str], str], **settings: Any) -> KafkaSecurity:
    """KafkaSecurity(**settings), its ConfigError naming the setting as the user spelled it."""
    try:
        return KafkaSecurity(**settings)
    except ConfigError as exc:
        raise ConfigError(spell(exc.setting), exc.problem) from None


def _env_name(setting: str) -> str:
    """``ssl key password`` -> ``SLUICEGATE_KAFKA_SSL_KEY_PASSWORD``."""
    return ENV_PREFIX + setting.replace(" ", "_").upper()


_SPARK_NAMES: dict[str, tuple[str, ...]] = {
    "security protocol": ("kafka.security.protocol",),
    "sasl mechanism": ("kafka.sasl.mechanism",),
    "sasl username": ("kafka.sasl.jaas.config", "kafka.sasl.username"),
    "sasl password": ("kafka.sasl.jaas.config", "kafka.sasl.password"),
    "ssl ca location": ("kafka.ssl.truststore.location", "kafka.ssl.ca.location"),
    "ssl cert location": ("kafka.ssl.keystore.location", "kafka.ssl.certificate.location"),
    "ssl key location": ("kafka.ssl.key.location", "kafka.ssl.keystore.location", "kafka.ssl.certificate.location"),
    "ssl key password": ("kafka.ssl.key.password",),
    "ssl check hostname": ("kafka.ssl.endpoint.identification.algorithm",),
}
"""A setting of the model -> the Spark options that give it, the one read first first."""


def spark_option_for(setting: str, options: Mapping[str, str]) -> str:
    """The option of ``options`` (lower-cased keys) that gave ``setting`` (a ConfigError's),
    else the name it would be given by."""
    names = _SPARK_NAMES.get(setting, ("kafka." + setting.replace(" ", "."),))
    return next((name for name in names if name in options), names[-1])


def _path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None


def _flag(value: str | None, setting: str) -> bool:
    if value is None:
        return True
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(setting, f"must be true or false, got {value!r}")


def _secret(value: str | None, file: str | None, file_setting: str) -> Secret | None:
    if file:
        return read_secret_file(Path(file), file_setting)
    return Secret(value) if value else None


def read_secret_file(path: Path, setting: str) -> Secret:
    """The first line of ``path`` (a mounted secret), without its line break."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(setting, f"cannot read {path}: {exc.strerror}") from None
    lines = text.splitlines()
    if not lines or not lines[0]:
        raise ConfigError(setting, f"{path} is empty")
    return Secret(lines[0])


def _jaas_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _parse_jaas(config: str) -> tuple[str | None, str | None]:
    """username and password of a PlainLoginModule / ScramLoginModule JAAS line."""
    import re

    found = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', config))
    if "username" not in found or "password" not in found:
        raise ConfigError("kafka.sasl.jaas.config", 'needs username="..." and password="..."')

    def unescape(value: str) -> str:
        return re.sub(r"\\(.)", r"\1", value)

    return unescape(found["username"]), unescape(found["password"])


_current: KafkaSecurity | None = None


def use_security(security: KafkaSecurity) -> None:
    """Make ``security`` the process default (the CLI does, from flags and environment)."""
    global _current
    _current = security


def current_security() -> KafkaSecurity:
    """The process default: what ``use_security`` set, else the SLUICEGATE_KAFKA_* environment."""
    global _current
    if _current is None:
        _current = KafkaSecurity.from_env()
    return _current
