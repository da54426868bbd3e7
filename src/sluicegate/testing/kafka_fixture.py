"""A real Kafka broker for the test session, found or started in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` if set (checked to answer);
2. testcontainers' ``KafkaContainer`` (KRaft) if a Docker engine answers;
3. a ``LocalKafkaBroker`` (Kafka jars from Maven Central, needs java + mvn) in a session
   temp dir, stopped at the end of the session.

``SLUICEGATE_TEST_KAFKA=local|testcontainers`` forces path 2 or 3. Whichever path is used,
``KAFKA_BOOTSTRAP_SERVERS`` is set for the session so subprocesses started by tests inherit it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate.devtools.broker.local import LocalKafkaBroker, probe_broker

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
FORCE_ENV = "SLUICEGATE_TEST_KAFKA"
CP_KAFKA_IMAGE = "confluentinc/cp-kafka:7.6.1"

log = logging.getLogger("sluicegate.tests.kafka")


def docker_available(timeout_s: float = 2.0) -> bool:
    """True if a Docker engine answers a ping within ``timeout_s``."""
    try:
        import docker  # type: ignore[import-untyped, unused-ignore]

        client = docker.from_env(timeout=int(max(1, timeout_s)))  # type: ignore[attr-defined, unused-ignore]
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextlib.contextmanager
def testcontainers_kafka() -> Iterator[str]:
    """A Confluent Kafka container in KRaft mode, auto-create off, transactions on one broker."""
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers < 4.10
        from testcontainers.kafka import KafkaContainer

    container = (
        KafkaContainer(CP_KAFKA_IMAGE)
        .with_kraft()
        .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_MIN_INSYNC_REPLICAS", "1")
        .with_env("KAFKA_DEFAULT_REPLICATION_FACTOR", "1")
    )
    with container as kafka:
        yield str(kafka.get_bootstrap_server())


@contextlib.contextmanager
def local_broker(run_dir: Path, timeout_s: float = 180.0) -> Iterator[str]:
    """A LocalKafkaBroker in ``run_dir``; killed with the session even without teardown.
    It compiles with C1 only (``quick_jit``): a test session's broker lives for minutes."""
    broker = LocalKafkaBroker(run_dir=run_dir, die_with_parent=True, echo=log.info, quick_jit=True)
    bootstrap = broker.start(timeout_s=timeout_s)
    try:
        yield bootstrap
    finally:
        broker.stop()


@contextlib.contextmanager
def provide_kafka(make_dir: Callable[[], Path]) -> Iterator[tuple[str, str]]:
    """Yield ``(bootstrap, how)`` for the first available path (see the module docstring)."""
    existing = os.environ.get(BOOTSTRAP_ENV, "").strip()
    forced = os.environ.get(FORCE_ENV, "").strip().lower()
    if existing and not forced:
        if not probe_broker(existing, timeout_s=15.0):
            raise RuntimeError(f"{BOOTSTRAP_ENV}={existing} is set but no Kafka broker answers")
        yield existing, f"{BOOTSTRAP_ENV}={existing}"
        return
    if forced not in ("", "local", "testcontainers"):
        raise RuntimeError(f"{FORCE_ENV} must be 'local' or 'testcontainers', not {forced!r}")
    if forced == "testcontainers" or (forced == "" and docker_available()):
        with testcontainers_kafka() as bootstrap:
            yield bootstrap, f"testcontainers {CP_KAFKA_IMAGE} (KRaft)"
        return
    run_dir = make_dir()
    with local_broker(run_dir) as bootstrap:
        yield bootstrap, f"local Kafka broker from Maven Central jars (run dir {run_dir})"


def _announce(config: pytest.Config, message: str) -> None:
    """Show ``message`` in the terminal even while output is captured."""
    log.warning("%s", message)
    reporter: Any = config.pluginmanager.getplugin("terminalreporter")
    capture: Any = config.pluginmanager.getplugin("capturemanager")
    if reporter is None:
        return
    ctx = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with ctx:
        reporter.write_line(f"\n[sluicegate] {message}")


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real Kafka broker for the whole session (see module docstring)."""
    with provide_kafka(lambda: tmp_path_factory.mktemp("kafka-broker")) as (bootstrap, how):
        _announce(request.config, f"Kafka for this session: {bootstrap} via {how}")
        previous = os.environ.get(BOOTSTRAP_ENV)
        os.environ[BOOTSTRAP_ENV] = bootstrap
        try:
            yield bootstrap
        finally:
            if previous is None:
                os.environ.pop(BOOTSTRAP_ENV, None)
            else:
                os.environ[BOOTSTRAP_ENV] = previous


@pytest.fixture
def unique_source() -> str:
    """A fresh source name per test (``t-<8 hex>``), so tests never share topics."""
    return f"t-{secrets.token_hex(4)}"
