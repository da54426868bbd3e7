"""A real PostgreSQL server (Debian's package, which ``make test`` installs) on 127.0.0.1 for
the tests: ``initdb`` into a temporary directory, ``wal_level=logical``, started with
``pg_ctl`` on a free port, stopped at the end. PostgreSQL refuses to run as root: as root
the server runs as the ``postgres`` user the package creates."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from local_http import free_port

SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "40",
    "max_wal_senders": "40",
    "max_connections": "200",
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",  # a test server: durability across a machine crash is not what is tested
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "128MB",
    "log_min_messages": "warning",
}


def server_binary(name: str) -> str:
    """``initdb``/``pg_ctl`` from PATH or Debian's versioned directory; the test is skipped,
    saying how to get it, where neither has it."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        pytest.skip(f"{name} is not installed: `make postgres` installs Debian's postgresql package")
    return found


class PostgresServer:
    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.data = root / "data"
        self._as_user = _unprivileged_user()

    @property
    def url(self) -> str:
        """As Spark's JDBC source takes it."""
        return f"jdbc:postgresql://127.0.0.1:{self.port}/postgres"

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def options(self, **more: str) -> dict[str, str]:
        """Connector options that reach this server."""
        return {"url": self.url, "user": "postgres", **more}

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.conninfo, autocommit=True)

    def _run(self, *args: str) -> None:
        command = list(args)
        if self._as_user is not None:
            command = ["runuser", "-u", self._as_user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def initialize(self) -> None:
        if self._as_user is not None:
            shutil.chown(self.root, self._as_user)
        self._run(server_binary("initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        settings = {**SETTINGS, "port": str(self.port), "unix_socket_directories": f"'{self.root}'"}
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def start(self) -> None:
        self._run(server_binary("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(server_binary("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()


def _unprivileged_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no postgres user to run PostgreSQL as")
    return "postgres"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One server for the session; each test makes its own tables (and slots)."""
    root = Path(tempfile.mkdtemp(prefix="sluicegate-pg-"))
    os.chmod(root, 0o755)
    server = PostgresServer(root, free_port())
    server.initialize()
    server.start()
    try:
        yield server
    finally:
        try:
            server.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)
