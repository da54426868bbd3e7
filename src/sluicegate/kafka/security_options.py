"""The --kafka-* flags every `sluicegate` command takes (given before the command name).

The flags are written to the SLUICEGATE_KAFKA_* variables they stand for, so the
environment is the one place the settings live: the process default is resolved
from it, and processes this one starts (the demo's readers) inherit it. Passwords
are taken only from files or the environment, never from a flag value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

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


def kafka_security_callback(
    kafka_security_protocol: Annotated[
        str | None,
        typer.Option(help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (env SLUICEGATE_KAFKA_SECURITY_PROTOCOL)"),
    ] = None,
    kafka_sasl_mechanism: Annotated[
        str | None, typer.Option(help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env SLUICEGATE_KAFKA_SASL_MECHANISM)")
    ] = None,
    kafka_sasl_username: Annotated[str | None, typer.Option(help="SASL user (env SLUICEGATE_KAFKA_SASL_USERNAME)")] = (
        None
    ),
    kafka_password_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the SASL password (env SLUICEGATE_KAFKA_SASL_PASSWORD_FILE, "
            "or the password itself in SLUICEGATE_KAFKA_SASL_PASSWORD)"
        ),
    ] = None,
    kafka_ssl_ca: Annotated[
        Path | None, typer.Option(help="PEM CA certificate(s) to trust (env SLUICEGATE_KAFKA_SSL_CA_LOCATION)")
    ] = None,
    kafka_ssl_cert: Annotated[
        Path | None, typer.Option(help="PEM client certificate (env SLUICEGATE_KAFKA_SSL_CERT_LOCATION)")
    ] = None,
    kafka_ssl_key: Annotated[
        Path | None, typer.Option(help="PEM client key (env SLUICEGATE_KAFKA_SSL_KEY_LOCATION)")
    ] = None,
    kafka_ssl_key_password_file: Annotated[
        Path | None,
        typer.Option(help="File holding the client key's password (env SLUICEGATE_KAFKA_SSL_KEY_PASSWORD_FILE)"),
    ] = None,
) -> None:
    """Resolve the control-plane Kafka client settings of this process; bad ones end it now."""
    given = {
        "kafka_security_protocol": kafka_security_protocol,
        "kafka_sasl_mechanism": kafka_sasl_mechanism,
        "kafka_sasl_username": kafka_sasl_username,
        "kafka_password_file": kafka_password_file,
        "kafka_ssl_ca": kafka_ssl_ca,
        "kafka_ssl_cert": kafka_ssl_cert,
        "kafka_ssl_key": kafka_ssl_key,
        "kafka_ssl_key_password_file": kafka_ssl_key_password_file,
    }
    env = dict(os.environ)
    for flag, value in given.items():
        if value is not None:
            env[ENV_PREFIX + _FLAG_TO_ENV[flag]] = str(value)
    if kafka_password_file is not None:
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
    if kafka_password_file is not None:
        os.environ.pop(ENV_PREFIX + "SASL_PASSWORD", None)
