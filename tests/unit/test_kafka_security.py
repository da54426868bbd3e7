"""KafkaSecurity: one settings model, resolved from env / Spark options, converted per client library."""

from __future__ import annotations

from pathlib import Path

import pytest
from certificates import new_ca, write_ca

from sluicegate.api.errors import ConfigError
from sluicegate.kafka.acls import acl_plan, kafka_acls_commands
from sluicegate.kafka.security import KafkaSecurity, Secret

SCRAM_ENV = {
    "SLUICEGATE_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
    "SLUICEGATE_KAFKA_SASL_MECHANISM": "scram-sha-512",
    "SLUICEGATE_KAFKA_SASL_USERNAME": "reader",
}


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    return write_ca(new_ca(), tmp_path / "ca.pem")  # settings with a CA load it (tls_files.py)


def test_no_settings_is_plaintext() -> None:
    security = KafkaSecurity.from_env({})
    assert security.protocol == "PLAINTEXT"
    assert security.aiokafka_settings() == {"security_protocol": "PLAINTEXT"}
    assert security.librdkafka_config() == {"security.protocol": "plaintext"}


def test_the_password_comes_from_a_file_and_is_never_shown(tmp_path: Path, ca: Path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text("s3cr3t\n")
    env = {
        **SCRAM_ENV,
        "SLUICEGATE_KAFKA_SASL_PASSWORD_FILE": str(secret_file),
        "SLUICEGATE_KAFKA_SSL_CA_LOCATION": str(ca),
    }
    security = KafkaSecurity.from_env(env)
    assert security.sasl_mechanism == "SCRAM-SHA-512" and security.protocol == "SASL_SSL"
    assert security.sasl_password == Secret("s3cr3t")
    assert "s3cr3t" not in repr(security) and "s3cr3t" not in security.describe()
    config = security.librdkafka_config()
    assert config["sasl.password"] == "s3cr3t" and config["ssl.ca.location"] == str(ca)


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"SLUICEGATE_KAFKA_SECURITY_PROTOCOL": "TLS"}, "SLUICEGATE_KAFKA_SECURITY_PROTOCOL"),
        ({**SCRAM_ENV, "SLUICEGATE_KAFKA_SASL_MECHANISM": "MD5"}, "SLUICEGATE_KAFKA_SASL_MECHANISM"),
        (SCRAM_ENV, "SLUICEGATE_KAFKA_SASL_PASSWORD"),
        ({**SCRAM_ENV, "SLUICEGATE_KAFKA_SASL_PASSWORD_FILE": "/nonexistent"}, "SLUICEGATE_KAFKA_SASL_PASSWORD_FILE"),
        (
            {"SLUICEGATE_KAFKA_SECURITY_PROTOCOL": "SSL", "SLUICEGATE_KAFKA_SSL_CA_LOCATION": "/nonexistent.pem"},
            "SLUICEGATE_KAFKA_SSL_CA_LOCATION",
        ),
    ],
)
def test_bad_settings_fail_naming_the_setting(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as raised:
        KafkaSecurity.from_env(env)
    assert raised.value.setting == setting


def test_spark_options_round_trip_through_spark_names(ca: Path) -> None:
    security = KafkaSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="spark",
        sasl_password=Secret('pa"ss'),
        ssl_ca_location=ca,
    )
    options = security.spark_options()
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert "ScramLoginModule required" in options["kafka.sasl.jaas.config"]
    assert KafkaSecurity.from_spark_options(options, env={}) == security


def test_spark_options_refuse_jks_stores_naming_the_option(ca: Path) -> None:
    options = {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": str(ca),
        "kafka.ssl.truststore.type": "JKS",
    }
    with pytest.raises(ConfigError) as raised:
        KafkaSecurity.from_spark_options(options, env={})
    assert raised.value.setting == "kafka.ssl.truststore.type"


def test_spark_options_without_a_protocol_take_the_environment() -> None:
    env = {**SCRAM_ENV, "SLUICEGATE_KAFKA_SASL_PASSWORD": "pw", "SLUICEGATE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}
    assert KafkaSecurity.from_spark_options({"source": "s"}, env=env).sasl_username == "reader"


def test_the_reader_may_write_only_the_coordinators_inbox() -> None:
    plan = acl_plan("s", "ns")
    writes = {e.name for e in plan if e.role == "reader" and e.operation == "WRITE" and e.resource == "topic"}
    assert writes == {"ns.s.coordinator", "ns.s.reader-state", "ns.s.split-state", "ns.s.dead-letter"}
    assert not [e for e in plan if e.role == "audit" and e.operation != "READ"]
    lines = kafka_acls_commands(plan)
    assert any("--transactional-id ns.s.reader- --resource-pattern-type prefixed" in line for line in lines)


def test_the_coordinator_may_fence_the_readers_transactional_ids_and_nothing_else_of_theirs() -> None:
    plan = acl_plan("s", "ns", coordinator="User:c")
    ids = {
        (e.name, e.operation, e.prefixed) for e in plan if e.role == "coordinator" and e.resource == "transactional-id"
    }
    assert ids == {("ns.s.coordinator", "WRITE", False), ("ns.s.reader-", "WRITE", True)}
    lines = kafka_acls_commands([e for e in plan if e.role == "coordinator"])
    assert any(
        "User:c" in line and "--transactional-id ns.s.reader- --resource-pattern-type prefixed" in line
        for line in lines
    )


def test_the_cli_names_a_bad_flag_and_prints_acls(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from sluicegate import cli
    from sluicegate.kafka import security

    for name in list(__import__("os").environ):
        if name.startswith("SLUICEGATE_KAFKA_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(security, "_current", None)
    monkeypatch.setenv("SLUICEGATE_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")  # restored afterwards
    runner = CliRunner()
    bad = runner.invoke(cli.app, ["--kafka-security-protocol", "TLS", "acls", "--source", "s"])
    assert bad.exit_code == 2
    assert "--kafka-security-protocol / SLUICEGATE_KAFKA_SECURITY_PROTOCOL" in bad.output
    good = runner.invoke(cli.app, ["acls", "--source", "s", "--reader-principal", "User:r"])
    assert good.exit_code == 0, good.output
    assert "--allow-principal User:r --operation Write --topic sluicegate.s.coordinator" in good.output


def test_a_spark_password_may_stay_out_of_the_options(tmp_path: Path) -> None:
    secret_file = tmp_path / "pw"
    secret_file.write_text("from-file\n")
    options = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "u"}
    security = KafkaSecurity.from_spark_options(options, env={"SLUICEGATE_KAFKA_SASL_PASSWORD_FILE": str(secret_file)})
    assert security.sasl_password == Secret("from-file")
    with pytest.raises(ConfigError) as raised:
        KafkaSecurity.from_spark_options(options, env={})
    assert raised.value.setting == "kafka.sasl.password"
