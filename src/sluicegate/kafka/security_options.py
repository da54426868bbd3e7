"""The --kafka-* flags every `sluicegate` command takes (given before the command name;
cli.py declares them).

The flags are written to the SLUICEGATE_KAFKA_* variables they stand for, so the
environment is the one place the settings live: the process default is resolved
from it, and processes this one starts (the demo's readers) inherit it. Passwords
are taken only from files or the environment, never from a flag value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import typer

from sluicegate.api.errors import ConfigError
from sluicegate.kafka.security import ENV_PREFIX, KafkaSecurity, use_security

_FLAG_TO_ENV = {
    "kafka_security_protocol": "SECURITY_PROTOCOL",
    "kafka_sasl_mechanism": "SASL_MECHANISM",
    "kafka_sasl_username": "SASL_USERNAME",
    "kafka_password_file": "SASL_PASSWORD_FILE",
    "kafka_ssl_ca": "SSL_CA_LOCATION",
    "kafka_ssl_cert": "SSL_CERT_LOCATION",
    "kafka_ssl_key": "SSL_KEY_LOCATION",
    "kafka_ssl_key_password_file": "SSL_KEY_PASSWORD_FILE",
}


def use_security_flags(given: Mapping[str, object | None]) -> None:
    """Resolve the control-plane Kafka client settings of this process from the
    ``--kafka-*`` flags given (by their parameter names; None: not given) and the
    environment; bad ones end it now."""
    env = dict(os.environ)
    for flag, value in given.items():
        if value is not None:
            env[ENV_PREFIX + _FLAG_TO_ENV[flag]] = str(value)
    if given.get("kafka_password_file") is not None:
        env.pop(ENV_PREFIX + "SASL_PASSWORD", None)  # the file wins over an inherited password
    try:
        use_security(KafkaSecurity.from_env(env))
    except ConfigError as exc:
        flags = [f"--{f.replace('_', '-')}" for f, e in _FLAG_TO_ENV.items() if exc.setting == ENV_PREFIX + e]
        where = " / ".join([*flags, exc.setting])
        typer.echo(f"sluicegate: invalid setting {where!r}: {exc.problem}", err=True)
        raise typer.Exit(2) from None
    # Valid: the environment now holds them, for the processes this one starts.
    changed = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX) and os.environ.get(k) != v}
    os.environ.update(changed)
    if given.get("kafka_password_file") is not None:
        os.environ.pop(ENV_PREFIX + "SASL_PASSWORD", None)
