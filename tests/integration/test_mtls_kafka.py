"""sluicegate over mutual TLS: an SSL listener that requires client certificates, with ACLs
by certificate principal.

The module starts its own broker (``sluicegate broker start --secure DIR --mtls``: a CA,
the broker's key store and a certificate per user made with openssl, encrypted keys,
``ssl.client.auth=required``, StandardAuthorizer, ``ssl.principal.mapping.rules`` that
name the dev users ``User:<name>``). Besides, the test makes certificates of its own with
``cryptography``: one the broker's CA signs for a subject outside the mapping rule (its
principal is its whole DN) and one from a CA the broker does not trust.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from certificates import load_ca, new_ca, write_ca, write_client
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka_data import READER_TIMING, kafka_options, option_args
from processes import ProcessGroup, value_counts

from sluicegate.devtools.broker.local import LocalKafkaBroker
from sluicegate.devtools.broker.mtls import MtlsSetup
from sluicegate.kafka.clients import plain_producer
from sluicegate.kafka.security import KafkaSecurity

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        shutil.which("java") is None or shutil.which("openssl") is None, reason="needs java and openssl"
    ),
]

OUTSIDER_DN = "CN=auditor,OU=ops,O=example"
"""A subject the broker's mapping rule does not match: its principal is the whole DN."""


@dataclass(frozen=True)
class Cluster:
    bootstrap: str
    setup: MtlsSetup
    outsider: KafkaSecurity
    """Signed by the broker's CA, key unencrypted, principal ``User:`` + OUTSIDER_DN."""
    untrusted: KafkaSecurity
    """Signed by a CA of the test's own, which the broker does not trust."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("mtls-kafka")
    broker = LocalKafkaBroker(
        run_dir=base / "run", secure_dir=base / "secure", secure_mode="mtls", die_with_parent=True
    )
    bootstrap = broker.start(timeout_s=120)
    setup = broker.secure
    assert isinstance(setup, MtlsSetup)
    ours = base / "ours"
    ours.mkdir()
    cert, key = write_client(load_ca(setup.ca, setup.ca_key), OUTSIDER_DN, ours, "auditor")
    outsider = KafkaSecurity("SSL", ssl_ca_location=setup.ca, ssl_cert_location=cert, ssl_key_location=key)
    rogue = new_ca("CN=rogue-ca")
    write_ca(rogue, ours / "rogue-ca.pem")
    rogue_cert, rogue_key = write_client(rogue, "CN=reader,OU=sluicegate-dev,O=sluicegate", ours, "rogue")
    untrusted = KafkaSecurity("SSL", ssl_ca_location=setup.ca, ssl_cert_location=rogue_cert, ssl_key_location=rogue_key)
    try:
        yield Cluster(bootstrap, setup, outsider, untrusted)
    finally:
        broker.stop()


def login(setup: MtlsSetup, user: str) -> dict[str, str]:
    """The SLUICEGATE_KAFKA_* variables of ``user`` (its env file)."""
    lines = setup.env_file(user).read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line)


def env_of(security: KafkaSecurity) -> dict[str, str]:
    """The SLUICEGATE_KAFKA_* variables of settings without a key password."""
    assert security.ssl_key_password is None
    return {
        "SLUICEGATE_KAFKA_SECURITY_PROTOCOL": security.protocol,
        "SLUICEGATE_KAFKA_SSL_CA_LOCATION": str(security.ssl_ca_location),
        "SLUICEGATE_KAFKA_SSL_CERT_LOCATION": str(security.ssl_cert_location),
        "SLUICEGATE_KAFKA_SSL_KEY_LOCATION": str(security.ssl_key_location),
    }


def run(procs: ProcessGroup, name: str, args: list[str], env: dict[str, str], timeout_s: float = 60) -> tuple[int, str]:
    proc = procs.start(name, args, env=env)
    code = proc.wait(timeout_s)
    return code, proc.log()


@pytest.fixture
def procs(cluster: Cluster, tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, cluster.bootstrap)
    try:
        yield group
    finally:
        group.stop_all()


def prepare(procs: ProcessGroup, cluster: Cluster, source: str, parallelism: int) -> None:
    """Topics and ACLs as the admin certificate; the audit role is the outsider's whole DN."""
    admin = login(cluster.setup, "admin")
    code, log = run(
        procs, "topics", ["topics", "apply", "--source", source, "--max-parallelism", str(parallelism)], admin
    )
    assert code == 0, log
    acls = ["acls", "--source", source, "--audit-principal", f"User:{OUTSIDER_DN}", "--apply"]
    code, log = run(procs, "acls", acls, admin)
    assert code == 0, log


def test_coordinator_and_readers_copy_every_record_once_with_client_certificates(
    cluster: Cluster, procs: ProcessGroup, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    prepare(procs, cluster, source, 2)
    options = {"splits": "6", "records_per_split": "200"}
    coordinator = procs.start(
        "coordinator",
        ProcessGroup.coordinator_args(source, 2, options, "--session-timeout-ms", "3000"),
        env=login(cluster.setup, "coordinator"),
    )
    coordinator.wait_for_log("is serving", timeout_s=90)
    outs = [tmp_path / f"reader-{k}.jsonl" for k in range(2)]
    readers = [
        procs.start(
            f"reader-{k}",
            ProcessGroup.reader_args(source, k, options, outs[k], *READER_TIMING),
            env=login(cluster.setup, "reader"),
        )
        for k in range(2)
    ]
    assert [r.wait(90) for r in readers] == [0, 0], procs.describe()
    counts = value_counts(*outs)
    assert set(counts) == set(range(6 * 200)) and max(counts.values()) == 1

    code, log = run(procs, "audit", ["audit", "--source", source], env_of(cluster.outsider))
    assert code == 0, log
    assert "Authorization" not in coordinator.log(), coordinator.tail()
    for user in ("coordinator", "reader"):
        password = cluster.setup.key_password_file(user).read_text(encoding="utf-8").strip()
        assert password not in procs.describe() and password not in coordinator.log()


@pytest.mark.parametrize("certificate", ["none", "untrusted"])
def test_a_client_without_an_accepted_certificate_is_refused_at_once_with_one_clear_line(
    cluster: Cluster, procs: ProcessGroup, unique_source: str, certificate: str
) -> None:
    env = {"SLUICEGATE_KAFKA_SECURITY_PROTOCOL": "SSL", "SLUICEGATE_KAFKA_SSL_CA_LOCATION": str(cluster.setup.ca)}
    expected = "its listener requires a client certificate and this client presents none"
    if certificate == "untrusted":
        env = env_of(cluster.untrusted)
        expected = f"it does not accept the client certificate {cluster.untrusted.ssl_cert_location}"
    reader_args = ProcessGroup.reader_args(unique_source, 0, {}, Path("/dev/null"))
    for name, command in (
        ("topics", ["topics", "list", "--source", unique_source]),
        ("audit", ["audit", "--source", unique_source]),
        ("reader", reader_args),  # a reader waits for a broker that is down; this one is up and refuses
    ):
        started = time.monotonic()
        code, log = run(procs, f"{name}-{certificate}", command, env)
        assert code != 0 and expected in log, log
        assert "Traceback" not in log, log
        assert time.monotonic() - started < 30, f"{name} took {time.monotonic() - started:.0f} s to give up"


async def test_acls_by_certificate_principal_are_enforced(
    cluster: Cluster, procs: ProcessGroup, unique_source: str
) -> None:
    """The reader certificate (``User:reader`` by the mapping rule) may write the
    coordinator's inbox but not the readers' topic; the outsider (``User:`` + its DN, the
    audit principal) may write neither."""
    prepare(procs, cluster, unique_source, 1)
    inbox, readers = f"sluicegate.{unique_source}.coordinator", f"sluicegate.{unique_source}.readers"
    reader = plain_producer(cluster.bootstrap, "test-reader", security=cluster.setup.security("reader"))
    await reader.start()
    try:
        await reader.send_and_wait(inbox, b"{}", key=b"probe", partition=0)
        with pytest.raises(TopicAuthorizationFailedError):
            await reader.send_and_wait(readers, b"{}", key=b"probe", partition=0)
    finally:
        await reader.stop()
    # Writing no topic at all, the outsider may not even get an idempotent producer id.
    outsider = plain_producer(cluster.bootstrap, "test-outsider", security=cluster.outsider)
    try:
        with pytest.raises((ClusterAuthorizationFailedError, TopicAuthorizationFailedError)):
            await outsider.start()
            await outsider.send_and_wait(inbox, b"{}", key=b"probe", partition=0)
    finally:
        await outsider.stop()


def test_the_kafka_connector_reads_a_data_cluster_with_client_certificates(
    cluster: Cluster, procs: ProcessGroup, unique_source: str
) -> None:
    """The data cluster's clients (librdkafka: the coordinator's discovery, the reader's
    consumer) take the certificate as ``kafka.ssl.*`` connector options; here the
    outsider's, whose principal (its DN) may read the data topic and nothing else of it."""
    source, data, out = unique_source, f"{unique_source}.in", f"{unique_source}.out"
    prepare(procs, cluster, source, 1)
    admin = {"bootstrap.servers": cluster.bootstrap, **cluster.setup.security("admin").librdkafka_config()}
    admin_client = AdminClient(admin)
    for topic in (data, out):
        admin_client.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    grants = [
        (data, f"User:{OUTSIDER_DN}", AclOperation.READ),  # the data cluster's principal
        (out, "User:reader", AclOperation.WRITE),  # the reader writes its output as the control's
    ]
    bindings = [
        AclBinding(ResourceType.TOPIC, t, ResourcePatternType.LITERAL, p, "*", op, AclPermissionType.ALLOW)
        for t, p, op in grants
    ]
    for future in admin_client.create_acls(bindings).values():
        future.result(30)
    producer = Producer(admin)
    for n in range(400):
        producer.produce(data, key=str(n), value=str(n), partition=n % 2)
    assert producer.flush(30) == 0

    outsider = cluster.outsider
    options = kafka_options(
        cluster.bootstrap,
        topics=data,
        stopping_offsets="latest",
        **{
            "kafka.security.protocol": "ssl",
            "kafka.ssl.ca.location": str(outsider.ssl_ca_location),
            "kafka.ssl.certificate.location": str(outsider.ssl_cert_location),
            "kafka.ssl.key.location": str(outsider.ssl_key_location),
        },
    )
    coordinator_args = ["coordinator", "--source", source, "--connector", "kafka", "--max-parallelism", "1"]
    coordinator = procs.start(
        "coordinator", [*coordinator_args, *option_args(options)], env=login(cluster.setup, "coordinator")
    )
    coordinator.wait_for_log("is serving", timeout_s=90)
    reader_args = [
        *("reader", "--source", source, "--subtask", "0", "--connector", "kafka"),
        *("--output", f"kafka:{out}", "--output-format", "envelope", *READER_TIMING),
        *option_args(options),
    ]
    reader = procs.start("reader", reader_args, env=login(cluster.setup, "reader"))
    assert reader.wait(90) == 0, procs.describe()
    copies = Counter((row["value"]["partition"], row["value"]["offset"]) for row in read_committed(admin, out))
    assert len(copies) == 400 and set(copies.values()) == {1}, copies.most_common(3)


def read_committed(config: dict[str, str], topic: str, partitions: int = 2) -> list[dict[str, Any]]:
    """Every committed envelope of ``topic``, read to its end."""
    consumer = Consumer(
        {**config, "group.id": "test-unused", "isolation.level": "read_committed", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rows: list[dict[str, Any]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for message in consumer.consume(num_messages=1000, timeout=0.2):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    at_end.add(message.partition())
                else:
                    rows.append(orjson.loads(message.value()))
    finally:
        consumer.close()
    return rows
