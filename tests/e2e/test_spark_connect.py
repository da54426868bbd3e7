"""``format("sluicegate")`` over Spark Connect (issue 52, item 4b): a client session
(``sc://``) of the Spark Connect server that ships with pyspark, started here with this
venv's Python for its workers (``PYSPARK_PYTHON``), reads a Kafka topic and a Parquet
directory, batch (``spark.read``) and streaming (``readStream``, ``availableNow``, into a
memory sink), every record exactly once; ``readPath=jvm`` fails when the query is first
analysed, naming what Spark Connect lacks (a driver-side JVM gateway). A second server has
what a server can get wrong: its workers' Python has no sluicegate, and ``register`` fails
naming ``PYSPARK_PYTHON`` (both servers have ``spark.pyspark.python`` naming this
interpreter, which their workers do not take); and sluicegate's jar is in its
``spark.jars``, so the Java source owns ``format("sluicegate")``: ``register`` leaves it
the name, and ``readPath=jvm`` fails in the JVM, naming Spark Connect. The two start at once.

The client runs in this process without touching its environment
(``pyspark.sql.connect.session.SparkSession.builder.remote(...).create()``: the generic
builder would set ``SPARK_CONNECT_MODE_ENABLED`` for the rest of the process, and every
classic session a later test makes would then be refused).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
from kafka_data import DataWriter, Expected, create_topic
from pyspark.sql.connect.session import SparkSession as ConnectSession

from sluicegate.api.errors import ConfigError
from sluicegate.devtools.broker.local import free_port
from sluicegate.spark import jvm_read_path_jars, register

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(300)]

PARTITIONS = 3
PER_PARTITION = 200
FILES = 3
ROWS = 1_000
SCHEMA = "id BIGINT, name STRING"
START_S = 120
"""How long a server may take to answer (a JVM and a SparkSession on 2 busy cores)."""


class ConnectServer:
    """A Spark Connect server (``SparkConnectServer`` through pyspark's ``spark-submit``) on
    ``local[2]``, its Python workers ``python`` (``PYSPARK_PYTHON``), sluicegate's ``jars``
    in its ``spark.jars``; its log in ``log``. It starts at once; ``wait_until_it_answers``
    waits for its port. Its ``spark.pyspark.python`` is this interpreter, which its workers
    do not take (the ``bare`` server shows it)."""

    def __init__(self, log: Path, python: str, jars: list[str]) -> None:
        self.port = free_port()
        self.log = log
        self.jars = jars
        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.pyspark.python": sys.executable,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
        }
        if jars:
            conf["spark.jars"] = ",".join(jars)
        args = [str(submit), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
        args += ["--name", "sluicegate-connect-e2e", "--master", "local[2]"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        env = {**os.environ, "PYSPARK_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.answered = False
        self.started = time.monotonic()

    def wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + START_S
        while not self.answered:
            assert self.proc.poll() is None, f"the Connect server exited ({self.proc.returncode}):\n{self.tail()}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    self.answered = True
                    print(f"{time.monotonic() - self.started:5.1f} s  {self.log.stem}: the server answers")
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the Connect server did not answer in {START_S} s:\n{self.tail()}"
            time.sleep(0.3)

    def session(self) -> Any:
        """A client session of this server, with sluicegate registered."""
        spark = ConnectSession.builder.remote(f"sc://127.0.0.1:{self.port}").create()
        begun = time.monotonic()
        register(spark)
        print(f"{time.monotonic() - begun:5.1f} s  {self.log.stem}: register")
        return spark

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running(server: ConnectServer) -> Iterator[ConnectServer]:
    try:
        server.wait_until_it_answers()
        yield server
    finally:
        server.stop()


def python_without_sluicegate(root: Path) -> Path:
    """An interpreter with pyspark and pyarrow but no sluicegate: this one, without its
    site-packages (``-S``), importing those two (and what they need) from links in ``root``."""
    for name in ("pyspark", "py4j", "pyarrow", "numpy"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        package = Path(spec.origin).parent
        (root / package.name).symlink_to(package)
        libs = package.with_name(f"{package.name}.libs")  # a manylinux wheel's shared libraries
        if libs.is_dir():
            (root / libs.name).symlink_to(libs)
    python = root / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    return python


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ConnectServer]]:
    """The two servers of this module, started at once: ``plain`` (no jar: the Python source
    is ``format("sluicegate")``) and ``other``: sluicegate's jar in its ``spark.jars`` (where
    it is built) and its workers' Python without sluicegate, two things a server can get
    wrong for one JVM's start."""
    root = tmp_path_factory.mktemp("connect")
    (root / "bare").mkdir()
    started = {
        "plain": ConnectServer(root / "plain.log", sys.executable, []),
        "other": ConnectServer(root / "other.log", str(python_without_sluicegate(root / "bare")), jvm_read_path_jars()),
    }
    try:
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def server(servers: dict[str, ConnectServer]) -> ConnectServer:
    server = servers["plain"]
    server.wait_until_it_answers()
    return server


@pytest.fixture(scope="module")
def spark(server: ConnectServer) -> Iterator[Any]:
    session = server.session()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> Expected:
    """A topic of known records: (topic, partition, offset) -> (key, value)."""
    name = f"connect-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, name, PARTITIONS)
    writer = DataWriter(kafka_bootstrap, name, PARTITIONS)
    writer.produce(PER_PARTITION)
    writer.flush()
    assert len(writer.expected) == PARTITIONS * PER_PARTITION
    return writer.expected


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FILES Parquet files of ROWS rows each: ids 0 .. FILES * ROWS - 1, named ``n<id>``."""
    root = tmp_path_factory.mktemp("files")
    for k in range(FILES):
        ids = list(range(k * ROWS, (k + 1) * ROWS))
        table = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]})
        pq.write_table(table, root / f"{k:04d}.parquet", row_group_size=ROWS // 2)
    return root


def kafka_reader(reader: Any, topic: Expected, bootstrap: str) -> Any:
    (name,) = {t for t, _, _ in topic}
    return reader.format("sluicegate").option("subscribe", name).option("kafka.bootstrap.servers", bootstrap)


def records(rows: list[Any]) -> Expected:
    """Kafka rows as the writer's expectation; a record read twice fails the check."""
    read: Expected = {}
    for row in rows:
        where = (row["topic"], row["partition"], row["offset"])
        assert where not in read, f"{where} read twice"
        key, value = row["key"], row["value"]
        read[where] = (None if key is None else bytes(key).decode(), None if value is None else bytes(value).decode())
    return read


def check_files(rows: list[Any]) -> None:
    ids = sorted(row["id"] for row in rows)
    assert ids == list(range(FILES * ROWS)), "every row exactly once"
    assert all(row["name"] == f"n{row['id']}" for row in rows)


def available_now(spark: Any, frame: Any, checkpoint: Path) -> list[Any]:
    """The rows a stream gives with ``availableNow`` into a memory sink."""
    view = f"connect_{uuid.uuid4().hex[:8]}"
    query = (
        frame.writeStream.format("memory")
        .queryName(view)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(150), "the availableNow query did not end in 150 s"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, query.exception()
    return list(spark.table(view).collect())


def jvm_failure(frame: Any) -> str:
    """The error a ``readPath=jvm`` stream fails with as Spark analyses it (over Connect a
    DataFrame is analysed by the server when first used: here its schema)."""
    with pytest.raises(Exception) as failure:
        frame.option("readPath", "jvm").load().schema  # noqa: B018
    return " ".join(str(failure.value).split())


def test_a_kafka_topic_is_read_batch_and_streaming(
    spark: Any, topic: Expected, kafka_bootstrap: str, tmp_path: Path
) -> None:
    batch = kafka_reader(spark.read, topic, kafka_bootstrap).load()
    assert records(batch.collect()) == topic
    stream = kafka_reader(spark.readStream, topic, kafka_bootstrap).option("startingOffsets", "earliest")
    assert records(available_now(spark, stream.load(), tmp_path / "checkpoint")) == topic


def test_a_parquet_directory_is_read_batch_and_streaming(
    spark: Any, files: Path, kafka_bootstrap: str, tmp_path: Path
) -> None:
    check_files(spark.read.format("sluicegate").schema(SCHEMA).load(str(files)).collect())
    stream = (
        spark.readStream.format("sluicegate")
        .schema(SCHEMA)
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .load(str(files))
    )
    check_files(available_now(spark, stream, tmp_path / "checkpoint"))


def test_the_jvm_read_path_fails_naming_what_connect_lacks(
    spark: Any, topic: Expected, files: Path, kafka_bootstrap: str
) -> None:
    for reader in (spark.read, spark.readStream):
        error = jvm_failure(kafka_reader(reader, topic, kafka_bootstrap))
        assert "readPath" in error and "Spark Connect session" in error and "JVM gateway" in error, error
    files_stream = spark.readStream.format("sluicegate").option("path", str(files))
    error = jvm_failure(files_stream.option("kafka.bootstrap.servers", kafka_bootstrap))
    assert "Spark Connect session" in error, error


def test_a_server_whose_python_has_no_sluicegate_fails_register_saying_so(
    servers: dict[str, ConnectServer], topic: Expected, kafka_bootstrap: str
) -> None:
    """Its workers' Python has no sluicegate: ``register`` fails naming ``PYSPARK_PYTHON``
    (where the jar is built, after leaving ``format("sluicegate")`` to the Java source: a
    name Spark refuses for the Python source would fail otherwise). A query of the Java
    source with ``readPath=jvm`` then fails in the JVM, naming Spark Connect."""
    with running(servers["other"]) as server:
        session = ConnectSession.builder.remote(f"sc://127.0.0.1:{server.port}").create()
        try:
            with pytest.raises(ConfigError) as failure:
                register(session)
            message = str(failure.value)
            assert "PYSPARK_PYTHON" in message and "No module named 'sluicegate'" in message, message
            if server.jars:
                error = jvm_failure(kafka_reader(session.readStream, topic, kafka_bootstrap))
                assert "readPath=jvm" in error and "Spark Connect" in error, error
        finally:
            session.stop()
