"""The local broker: its free-port check accepts a port whose old connections sit in TIME_WAIT,
and its command line."""

from __future__ import annotations

import socket
from pathlib import Path

from sluicegate.devtools.broker.local import QUICK_JIT_OPTION, LocalKafkaBroker, _port_is_free


def test_a_port_with_connections_in_time_wait_is_free() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        assert not _port_is_free(port)  # listening: taken
    # The server side closes first, as a killed broker does: its end goes to TIME_WAIT.
    conn.close()
    client.recv(1)
    client.close()
    assert _port_is_free(port)


def test_a_listening_port_is_not_free() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert not _port_is_free(server.getsockname()[1])


def test_a_quick_jit_broker_compiles_with_c1_only_and_is_otherwise_the_same(tmp_path: Path) -> None:
    full = LocalKafkaBroker(run_dir=tmp_path).java_command("java", "libs/*", tmp_path / "log4j.properties")
    quick = LocalKafkaBroker(run_dir=tmp_path, quick_jit=True).java_command(
        "java", "libs/*", tmp_path / "log4j.properties"
    )
    assert QUICK_JIT_OPTION == "-XX:TieredStopAtLevel=1"
    assert QUICK_JIT_OPTION not in full
    assert [arg for arg in quick if arg != QUICK_JIT_OPTION] == full
    assert quick.index(QUICK_JIT_OPTION) < quick.index("kafka.Kafka")  # a JVM option, not the broker's
