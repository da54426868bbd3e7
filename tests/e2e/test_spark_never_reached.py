"""A Spark query whose control cluster never answers fails within ``kafkaWaitS``, naming
``kafka.bootstrap.servers`` (issue 24 item 2): before, it waited ``topicWaitTimeoutS``
(120 s) and then spoke of missing topics."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from sluicegate.spark.datasource import register
from sluicegate.spark.job import spark_session

WAIT_S = 3


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_query_whose_control_cluster_never_answers_fails_naming_the_option(tmp_path: Path) -> None:
    spark = spark_session("sluicegate-never-reached", quiet=True)
    query = None
    try:
        register(spark)
        df = (
            spark.readStream.format("sluicegate")
            .option("source", "orders")
            .option("connector", "sequence")
            .option("parallelism", "1")
            .option("kafka.bootstrap.servers", f"127.0.0.1:{closed_port()}")
            .option("kafkaWaitS", str(WAIT_S))
            .load()
        )
        started = time.monotonic()
        query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(90)
        took = time.monotonic() - started
        error = " ".join(str(failure.value).split())
        assert "kafka.bootstrap.servers" in error and "did not answer" in error, error
        assert "kafkaWaitS waits longer" in error, error
        assert took < WAIT_S + 45, f"took {took:.0f} s"  # Spark's start included; before: 120 s and more
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.stop()
