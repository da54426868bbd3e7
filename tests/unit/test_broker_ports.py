"""The local broker's free-port check accepts a port whose old connections sit in TIME_WAIT."""

from __future__ import annotations

import socket

from sluicegate.devtools.broker.local import _port_is_free


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
