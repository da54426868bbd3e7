"""Mutual TLS settings: client certificates resolved from env, flags, connector and Spark
options, checked at start naming the setting, and mapped for every client library."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import pytest
from certificates import Issuer, new_ca, write_ca, write_client
from cryptography.hazmat.primitives import serialization

from sluicegate.api.errors import ConfigError
from sluicegate.kafka.acls import acl_plan, kafka_acls_commands, principal_problem
from sluicegate.kafka.security import KafkaSecurity, Secret
from sluicegate.spark.jvm_planner import executor_consumer_settings
from sluicegate.spark.kafka_options import read_spark_kafka_options
from sluicegate.spark.options import SparkSourceOptions
from sluicegate_connectors.kafka.options import KafkaOptions

PASSWORD = "k3y-pa55"


@pytest.fixture(scope="module")
def issuer() -> Issuer:
    return new_ca()


@pytest.fixture
def files(issuer: Issuer, tmp_path: Path) -> dict[str, Path]:
    """A CA, an unencrypted client (cert, key), an encrypted one and a PEM key store (one file)."""
    cert, key = write_client(issuer, "CN=reader,OU=eng", tmp_path, "plain")
    locked_cert, locked_key = write_client(issuer, "CN=coordinator,OU=eng", tmp_path, "locked", PASSWORD)
    store, _ = write_client(issuer, "CN=spark,OU=eng", tmp_path, "store", PASSWORD, one_file=True)
    ca = write_ca(issuer, tmp_path / "ca.pem")
    return {"ca": ca, "cert": cert, "key": key, "locked_cert": locked_cert, "locked_key": locked_key, "store": store}


def mtls_env(files: dict[str, Path], **more: str) -> dict[str, str]:
    return {
        "SLUICEGATE_KAFKA_SECURITY_PROTOCOL": "ssl",
        "SLUICEGATE_KAFKA_SSL_CA_LOCATION": str(files["ca"]),
        "SLUICEGATE_KAFKA_SSL_CERT_LOCATION": str(files["locked_cert"]),
        "SLUICEGATE_KAFKA_SSL_KEY_LOCATION": str(files["locked_key"]),
        **more,
    }


def test_a_client_certificate_from_the_environment_reaches_every_client_library(
    files: dict[str, Path], tmp_path: Path
) -> None:
    password_file = tmp_path / "key-password"
    password_file.write_text(PASSWORD + "\n")
    security = KafkaSecurity.from_env(mtls_env(files, SLUICEGATE_KAFKA_SSL_KEY_PASSWORD_FILE=str(password_file)))
    assert security.protocol == "SSL" and security.ssl_key_password == Secret(PASSWORD)
    assert PASSWORD not in repr(security) and PASSWORD not in security.describe()
    assert f"client certificate {files['locked_cert']}" in security.describe()
    context = security.aiokafka_settings()["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    assert security.librdkafka_config() == {
        "security.protocol": "ssl",
        "ssl.ca.location": str(files["ca"]),
        "ssl.certificate.location": str(files["locked_cert"]),
        "ssl.key.location": str(files["locked_key"]),
        "ssl.key.password": PASSWORD,
    }
    assert security.faust_credentials() is not None


def test_a_pem_key_store_is_one_file_for_librdkafka_too(files: dict[str, Path]) -> None:
    security = KafkaSecurity("SSL", ssl_ca_location=files["ca"], ssl_cert_location=files["store"],
                             ssl_key_password=Secret(PASSWORD))  # fmt: skip
    config = security.librdkafka_config()
    assert config["ssl.certificate.location"] == config["ssl.key.location"] == str(files["store"])


@pytest.mark.parametrize(
    ("change", "setting", "words"),
    [
        ({"SLUICEGATE_KAFKA_SSL_CERT_LOCATION": "/nonexistent/c.pem"}, "SLUICEGATE_KAFKA_SSL_CERT_LOCATION", "exist"),
        ({"SLUICEGATE_KAFKA_SSL_KEY_LOCATION": "/nonexistent/c.key"}, "SLUICEGATE_KAFKA_SSL_KEY_LOCATION", "exist"),
        ({"SLUICEGATE_KAFKA_SSL_KEY_PASSWORD": "wrong"}, "SLUICEGATE_KAFKA_SSL_KEY_PASSWORD", "does not open"),
        ({}, "SLUICEGATE_KAFKA_SSL_KEY_PASSWORD", "is encrypted"),
        ("mismatch", "SLUICEGATE_KAFKA_SSL_KEY_LOCATION", "does not belong"),
        ("ca-not-pem", "SLUICEGATE_KAFKA_SSL_CA_LOCATION", "no PEM certificate"),
        ("cert-not-pem", "SLUICEGATE_KAFKA_SSL_CERT_LOCATION", "no PEM certificate"),
    ],
)
def test_bad_certificate_settings_fail_at_start_naming_the_setting(
    files: dict[str, Path], tmp_path: Path, change: Any, setting: str, words: str
) -> None:
    env = mtls_env(files)
    if change == "mismatch":
        env.update(SLUICEGATE_KAFKA_SSL_CERT_LOCATION=str(files["cert"]), SLUICEGATE_KAFKA_SSL_KEY_PASSWORD=PASSWORD)
    elif change in ("ca-not-pem", "cert-not-pem"):
        junk = tmp_path / "junk.pem"
        junk.write_text("not a certificate\n")
        which = "CA" if change == "ca-not-pem" else "CERT"
        env.update({f"SLUICEGATE_KAFKA_SSL_{which}_LOCATION": str(junk), "SLUICEGATE_KAFKA_SSL_KEY_PASSWORD": PASSWORD})
    else:
        env.update(change)
        if "PASSWORD" not in setting:
            env.setdefault("SLUICEGATE_KAFKA_SSL_KEY_PASSWORD", PASSWORD)
    with pytest.raises(ConfigError) as raised:
        KafkaSecurity.from_env(env)
    assert raised.value.setting == setting and words in raised.value.problem
    assert PASSWORD not in str(raised.value) and "wrong" not in str(raised.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_key_fails_naming_it(files: dict[str, Path]) -> None:
    files["key"].chmod(0)
    env = mtls_env(files, SLUICEGATE_KAFKA_SSL_CERT_LOCATION=str(files["cert"]))
    env["SLUICEGATE_KAFKA_SSL_KEY_LOCATION"] = str(files["key"])
    with pytest.raises(ConfigError, match="cannot read") as raised:
        KafkaSecurity.from_env(env)
    assert raised.value.setting == "SLUICEGATE_KAFKA_SSL_KEY_LOCATION"


def test_the_cli_names_a_missing_certificate_by_its_flag(
    monkeypatch: pytest.MonkeyPatch, files: dict[str, Path]
) -> None:
    from typer.testing import CliRunner

    from sluicegate import cli
    from sluicegate.kafka import security

    for name in list(os.environ):
        if name.startswith("SLUICEGATE_KAFKA_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(security, "_current", None)
    monkeypatch.setenv("SLUICEGATE_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")  # restored afterwards
    args = ["--kafka-security-protocol", "SSL", "--kafka-ssl-ca", str(files["ca"]), "--kafka-ssl-cert", "/nope.pem"]
    bad = CliRunner().invoke(cli.app, [*args, "--kafka-ssl-key", str(files["key"]), "acls", "--source", "s"])
    assert bad.exit_code == 2
    assert "--kafka-ssl-cert / SLUICEGATE_KAFKA_SSL_CERT_LOCATION" in bad.output and "does not exist" in bad.output


def test_spark_options_name_the_option_the_bad_file_came_from(files: dict[str, Path]) -> None:
    java = {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(files["ca"]),
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.location": str(files["store"]),
        "kafka.ssl.key.password": PASSWORD,
    }
    security = KafkaSecurity.from_spark_options(java, env={})
    assert security.ssl_cert_location == files["store"] and security.ssl_key_password == Secret(PASSWORD)
    for key, value, named in (
        ("kafka.ssl.keystore.location", "/nope.pem", "kafka.ssl.keystore.location"),
        ("kafka.ssl.key.password", "wrong", "kafka.ssl.key.password"),
        ("kafka.ssl.truststore.location", "/nope.pem", "kafka.ssl.truststore.location"),
    ):
        with pytest.raises(ConfigError) as raised:
            KafkaSecurity.from_spark_options({**java, key: value}, env={})
        assert raised.value.setting == named
    librdkafka_style = {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.ca.location": str(files["ca"]),
        "kafka.ssl.certificate.location": str(files["cert"]),
        "kafka.ssl.key.location": "/nope.key",
    }
    with pytest.raises(ConfigError) as raised:
        KafkaSecurity.from_spark_options(librdkafka_style, env={})
    assert raised.value.setting == "kafka.ssl.key.location"


def test_java_clients_get_the_key_store_as_kafka_reads_pem(files: dict[str, Path], tmp_path: Path) -> None:
    separate = KafkaSecurity("SSL", ssl_ca_location=files["ca"], ssl_cert_location=files["cert"],
                             ssl_key_location=files["key"]).java_client_settings()  # fmt: skip
    assert separate["ssl.truststore.type"] == "PEM" and separate["ssl.keystore.type"] == "PEM"
    assert separate["ssl.keystore.certificate.chain"].startswith("-----BEGIN CERTIFICATE-----")
    assert separate["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert "ssl.keystore.location" not in separate and "ssl.key.location" not in separate
    store = KafkaSecurity("SSL", ssl_ca_location=files["ca"], ssl_cert_location=files["store"],
                          ssl_key_password=Secret(PASSWORD)).java_client_settings()  # fmt: skip
    assert store["ssl.keystore.location"] == str(files["store"]) and store["ssl.key.password"] == PASSWORD
    assert "ssl.keystore.key" not in store
    traditional = tmp_path / "traditional.key"
    key = serialization.load_pem_private_key(files["key"].read_bytes(), password=None)
    traditional.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    pkcs1 = KafkaSecurity("SSL", ssl_ca_location=files["ca"], ssl_cert_location=files["cert"],
                          ssl_key_location=traditional)  # fmt: skip
    with pytest.raises(ConfigError, match="pkcs8 -topk8"):
        pkcs1.java_client_settings()


def test_jvm_executors_translate_librdkafka_style_certificate_options(files: dict[str, Path]) -> None:
    given = {
        "subscribe": "t",
        "source": "orders",
        "parallelism": "1",
        "readpath": "jvm",
        "kafka.bootstrap.servers": "data:9093",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.ca.location": str(files["ca"]),
        "kafka.ssl.certificate.location": str(files["cert"]),
        "kafka.ssl.key.location": str(files["key"]),
    }

    class Source:
        class options:  # stands for KafkaOptions (a lower-case attribute)
            bootstrap_servers = "data:9093"

    settings = executor_consumer_settings(SparkSourceOptions.from_options(given), given, Source())
    assert settings["security.protocol"] == "SSL" and settings["ssl.truststore.location"] == str(files["ca"])
    assert "BEGIN PRIVATE KEY" in settings["ssl.keystore.key"]
    assert not {"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"} & set(settings)


def test_a_spark_query_gives_the_data_cluster_its_certificate_as_librdkafka_settings(files: dict[str, Path]) -> None:
    opts = {
        "subscribe": "t",
        "kafka.bootstrap.servers": "data:9093",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": str(files["ca"]),
        "kafka.ssl.keystore.location": str(files["store"]),
        "kafka.ssl.key.password": PASSWORD,
    }
    connector = read_spark_kafka_options(opts, {}).connector_options
    assert connector["kafka.ssl.certificate.location"] == connector["kafka.ssl.key.location"] == str(files["store"])
    assert connector["kafka.ssl.key.password"] == PASSWORD
    assert KafkaOptions.parse(connector).client_settings


def test_the_kafka_connector_checks_its_certificate_files_naming_the_option(files: dict[str, Path]) -> None:
    base = {"topics": "t", "bootstrap_servers": "data:9093", "kafka.security.protocol": "ssl"}
    good = {
        **base,
        "kafka.ssl.ca.location": str(files["ca"]),
        "kafka.ssl.certificate.location": str(files["locked_cert"]),
        "kafka.ssl.key.location": str(files["locked_key"]),
        "kafka.ssl.key.password": PASSWORD,
    }
    parsed = KafkaOptions.parse(good)
    assert PASSWORD not in repr(parsed)
    for key, value in (
        ("kafka.ssl.certificate.location", "/nope.pem"),
        ("kafka.ssl.ca.location", "/nope/ca.pem"),
        ("kafka.ssl.key.password", "wrong"),
        ("kafka.ssl.certificat.location", "x"),
    ):
        with pytest.raises(ConfigError) as raised:
            KafkaOptions.parse({**good, key: value})
        named = "kafka.ssl.key.location" if key == "kafka.ssl.key.password" else key  # librdkafka names the file
        assert raised.value.setting == named, raised.value


def test_acls_take_certificate_principals() -> None:
    dn = "User:CN=reader,OU=data eng,O=acme"
    lines = kafka_acls_commands(acl_plan("s", "ns", reader=dn))
    assert any("--allow-principal 'User:CN=reader,OU=data eng,O=acme' --operation Write" in line for line in lines)
    assert principal_problem("User:CN=reader,OU=eng,O=acme") is None
    assert principal_problem("User:reader") is None
    spaced = principal_problem("User:CN = reader, OU = eng")
    assert spaced is not None and "RFC 2253" in spaced
    assert principal_problem("CN=reader,OU=eng") is not None and principal_problem("User:") is not None
