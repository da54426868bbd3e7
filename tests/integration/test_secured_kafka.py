"""sluicegate over a secured Kafka: a SASL_SSL (SCRAM-SHA-512) listener with ACLs enforced.

The module starts its own broker (``sluicegate broker start --secure``: a CA and
broker keystore made with openssl, SCRAM users formatted into the KRaft storage,
StandardAuthorizer). Every process logs in as its own principal with the env file
the broker wrote for it; the ACLs are the ones ``sluicegate acls --apply`` creates.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka.errors import TopicAuthorizationFailedError
from kafka_data import READER_TIMING
from processes import ProcessGroup, value_counts

from sluicegate.coordinator.kafka_log import KafkaCoordinatorLog
from sluicegate.coordinator.log import ReaderFenceRefusedError
from sluicegate.devtools.broker.local import LocalKafkaBroker
from sluicegate.devtools.broker.secure import SecureSetup
from sluicegate.kafka.access import KafkaAccessError, check_access
from sluicegate.kafka.clients import plain_producer
from sluicegate.kafka.security import Secret, current_security, use_security
from sluicegate.protocol.names import coordinator_transactional_id, reader_transactional_id
from sluicegate.protocol.topics import ControlTopics

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.timeout(240),
    pytest.mark.spark,  # one test runs a query; the module shares one secured broker
    pytest.mark.skipif(
        shutil.which("java") is None or shutil.which("openssl") is None, reason="needs java and openssl"
    ),
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SecureSetup]]:
    base = tmp_path_factory.mktemp("secured-kafka")
    broker = LocalKafkaBroker(run_dir=base / "run", secure_dir=base / "secure", die_with_parent=True)
    bootstrap = broker.start(timeout_s=120)
    assert isinstance(broker.secure, SecureSetup)
    try:
        yield bootstrap, broker.secure
    finally:
        broker.stop()


def login(secure: SecureSetup, user: str) -> dict[str, str]:
    """The SLUICEGATE_KAFKA_* variables of ``user`` (its env file)."""
    lines = secure.env_file(user).read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line)


def run(procs: ProcessGroup, name: str, args: list[str], env: dict[str, str], timeout_s: float = 60) -> tuple[int, str]:
    proc = procs.start(name, args, env=env)
    code = proc.wait(timeout_s)
    return code, proc.log()


@pytest.fixture
def secured_procs(secured: tuple[str, SecureSetup], tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, secured[0])
    try:
        yield group
    finally:
        group.stop_all()


def test_the_demo_flow_runs_with_credentials_and_least_privilege_acls(
    secured: tuple[str, SecureSetup], secured_procs: ProcessGroup, unique_source: str, tmp_path: Path
) -> None:
    _, secure = secured
    procs, source = secured_procs, unique_source
    admin = login(secure, "admin")
    code, log = run(procs, "topics", ["topics", "apply", "--source", source, "--max-parallelism", "2"], admin)
    assert code == 0, log
    code, log = run(procs, "acls", ["acls", "--source", source, "--apply"], admin)
    assert code == 0, log

    options = {"splits": "6", "records_per_split": "200"}
    coordinator = procs.start(
        "coordinator",
        ProcessGroup.coordinator_args(source, 2, options, "--session-timeout-ms", "3000"),
        env=login(secure, "coordinator"),
    )
    coordinator.wait_for_log("is serving", timeout_s=90)
    outs = [tmp_path / f"reader-{k}.jsonl" for k in range(2)]
    readers = [
        procs.start(
            f"reader-{k}",
            ProcessGroup.reader_args(source, k, options, outs[k], *READER_TIMING),
            env=login(secure, "reader"),
        )
        for k in range(2)
    ]
    assert [r.wait(90) for r in readers] == [0, 0], procs.describe()
    counts = value_counts(*outs)
    assert set(counts) == set(range(6 * 200)) and max(counts.values()) == 1

    code, log = run(procs, "audit", ["audit", "--source", source], login(secure, "audit"))
    assert code == 0, log
    assert "Authorization" not in coordinator.log(), coordinator.tail()


@pytest.mark.parametrize("credentials", ["none", "wrong-password"])
def test_a_client_without_valid_credentials_is_refused_with_one_clear_line(
    secured: tuple[str, SecureSetup], secured_procs: ProcessGroup, unique_source: str, credentials: str
) -> None:
    _, secure = secured
    env: dict[str, str] = {}
    expected = "cannot connect to Kafka as PLAINTEXT"
    if credentials == "wrong-password":
        env = login(secure, "reader")
        env.pop("SLUICEGATE_KAFKA_SASL_PASSWORD_FILE")
        env["SLUICEGATE_KAFKA_SASL_PASSWORD"] = "not-the-password"
        expected = "refused the login (SASL_SSL, SCRAM-SHA-512 as reader"
    for command in (["topics", "list", "--source", unique_source], ["audit", "--source", unique_source]):
        code, log = run(secured_procs, f"{command[0]}-{credentials}", command, env)
        assert code != 0, log
        assert expected in log, log
        assert "Traceback" not in log and "not-the-password" not in log, log
    # a reader waits for a broker that is down, but this one is up and refuses: it stops at once
    reader_args = ProcessGroup.reader_args(unique_source, 0, {}, Path("/dev/null"))
    code, log = run(secured_procs, f"reader-{credentials}", reader_args, env)
    assert code != 0 and expected in log and "Traceback" not in log, log


async def test_a_reader_principal_may_write_its_requests_but_not_the_coordinators_topic(
    secured: tuple[str, SecureSetup], secured_procs: ProcessGroup, unique_source: str
) -> None:
    bootstrap, secure = secured
    admin = login(secure, "admin")
    code, log = run(
        secured_procs, "topics", ["topics", "apply", "--source", unique_source, "--max-parallelism", "1"], admin
    )
    assert code == 0, log
    code, log = run(secured_procs, "acls", ["acls", "--source", unique_source, "--apply"], admin)
    assert code == 0, log

    producer = plain_producer(bootstrap, "test-reader", security=secure.security("reader"))
    await producer.start()
    try:
        await producer.send_and_wait(f"sluicegate.{unique_source}.coordinator", b"{}", key=b"probe", partition=0)
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(f"sluicegate.{unique_source}.readers", b"{}", key=b"probe", partition=0)
    finally:
        await producer.stop()


async def test_the_coordinator_principal_may_fence_a_readers_transactional_id_and_the_audit_may_not(
    secured: tuple[str, SecureSetup], secured_procs: ProcessGroup, unique_source: str
) -> None:
    """A reader silent past its session timeout is fenced by the coordinator before its
    splits move: ``sluicegate acls`` must let the coordinator's principal do that."""
    bootstrap, secure = secured
    admin = login(secure, "admin")
    for name, args in (
        ("topics", ["topics", "apply", "--source", unique_source, "--max-parallelism", "1"]),
        ("acls", ["acls", "--source", unique_source, "--apply"]),
    ):
        code, log = run(secured_procs, name, args, admin)
        assert code == 0, log
    reader_id = reader_transactional_id("sluicegate", unique_source, 0)
    topics = ControlTopics.for_source(unique_source)
    before = current_security()
    try:
        for principal, allowed in (("coordinator", True), ("audit", False)):
            use_security(secure.security(principal))
            coordinator_log = KafkaCoordinatorLog(
                bootstrap, topics, coordinator_transactional_id("sluicegate", unique_source)
            )
            if allowed:
                await asyncio.wait_for(coordinator_log.fence_reader(reader_id), 60)
            else:
                with pytest.raises(ReaderFenceRefusedError, match=reader_id):
                    await asyncio.wait_for(coordinator_log.fence_reader(reader_id), 60)
    finally:
        use_security(before)


async def test_the_access_check_names_the_refusal(secured: tuple[str, SecureSetup]) -> None:
    bootstrap, secure = secured
    await check_access(bootstrap, secure.security("audit"))
    wrong = replace(secure.security("audit"), sasl_password=Secret("wrong"))
    with pytest.raises(KafkaAccessError, match="invalid credentials"):
        await asyncio.wait_for(check_access(bootstrap, wrong), 30)


def test_a_spark_query_reads_with_credentials_given_as_spark_kafka_options(
    secured: tuple[str, SecureSetup], secured_procs: ProcessGroup, unique_source: str, tmp_path: Path
) -> None:
    """The Spark driver logs in as the reader principal through `kafka.security.protocol`,
    `kafka.sasl.jaas.config`, `kafka.ssl.truststore.location` (type PEM) options."""
    from sluicegate.spark.job import JobSettings, expected_sequence_windows, run_job, spark_session

    bootstrap, secure = secured
    admin = login(secure, "admin")
    code, log = run(
        secured_procs, "topics", ["topics", "apply", "--source", unique_source, "--max-parallelism", "2"], admin
    )
    assert code == 0, log
    code, log = run(secured_procs, "acls", ["acls", "--source", unique_source, "--apply"], admin)
    assert code == 0, log
    options = {"splits": "4", "records_per_split": "500"}
    coordinator = secured_procs.start(
        "coordinator", ProcessGroup.coordinator_args(unique_source, 2, options), env=login(secure, "coordinator")
    )
    coordinator.wait_for_log("is serving", timeout_s=90)
    config = JobSettings(
        source=unique_source,
        output_dir=tmp_path / "out",
        checkpoint_dir=tmp_path / "checkpoint",
        bootstrap_servers=bootstrap,
        parallelism=2,
        connector_options=options,
        kafka_options=secure.security("reader").spark_options(),
    )
    spark = spark_session("sluicegate-secured", quiet=True)
    try:
        table = run_job(config, spark, timeout_s=180)
    finally:
        spark.stop()
    assert table == expected_sequence_windows(options)
    code, log = run(secured_procs, "audit", ["audit", "--source", unique_source], login(secure, "audit"))
    assert code == 0, log
