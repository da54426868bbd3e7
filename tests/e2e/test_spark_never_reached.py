"""A Spark query whose control cluster never answers fails within ``kafkaWaitS``, naming
``kafka.bootstrap.servers``, and one whose source nobody set up, told not to set it up
itself (``coordinator=external``), fails within ``topicWaitTimeoutS`` saying how to set
it up (issue 24 item 2): before, both waited 120 s, and the first then spoke of missing
topics. (By default a query sets its source up: test_spark_kafka_parity.py.)"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from sluicegate.spark.datasource import register
from sluicegate.spark.job import spark_session

pytestmark = pytest.mark.spark

WAIT_S = 3


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_failure(tmp_path: Path, source: str, bootstrap: str, **options: str) -> tuple[str, float]:
    """The error a query of the sequence connector with these options fails with, and the
    seconds from its start."""
    given = {"source": source, "connector": "sequence", "parallelism": "1", "kafka.bootstrap.servers": bootstrap}
    return query_failure(tmp_path, {**given, **options})


def query_failure(tmp_path: Path, options: dict[str, str]) -> tuple[str, float]:
    """The error a query with these options fails with, and the seconds from its start."""
    spark = spark_session("sluicegate-never-reached", quiet=True)
    query = None
    try:
        register(spark)
        df = spark.readStream.format("sluicegate").options(**options).load()
        started = time.monotonic()
        query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(90)
        return " ".join(str(failure.value).split()), time.monotonic() - started
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.stop()


def test_a_query_whose_control_cluster_never_answers_fails_naming_the_option(tmp_path: Path) -> None:
    error, took = start_failure(tmp_path, "orders", f"127.0.0.1:{closed_port()}", kafkaWaitS=str(WAIT_S))
    assert "kafka.bootstrap.servers" in error and "did not answer" in error, error
    assert "kafkaWaitS waits longer" in error, error
    assert took < WAIT_S + 45, f"took {took:.0f} s"  # Spark's start included; before: 120 s and more


@pytest.mark.kafka
def test_a_query_of_a_source_nobody_set_up_fails_saying_how_to_set_it_up(
    tmp_path: Path, kafka_bootstrap: str, unique_source: str
) -> None:
    error, took = start_failure(
        tmp_path, unique_source, kafka_bootstrap, topicWaitTimeoutS=str(WAIT_S), coordinator="external"
    )
    assert f"source {unique_source} is not set up" in error, error
    assert f"sluicegate topics apply --source {unique_source}" in error
    assert "coordinator=auto" in error, "the way to let the query set it up"
    assert "wait longer with topicWaitTimeoutS" in error
    assert took < WAIT_S + 45, f"took {took:.0f} s"  # before: 120 s


@pytest.mark.kafka
def test_a_query_of_a_topic_that_does_not_exist_fails_in_the_words_of_spark_s_options(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    """Its hint names the options as a query gives them (issue 51 item 3: it said
    ``missing_topics=wait``, which ``.option("missing_topics", "wait")`` refuses)."""
    error, _ = query_failure(tmp_path, {"subscribe": "no-such-topic", "kafka.bootstrap.servers": kafka_bootstrap})
    assert "topic no-such-topic (`subscribe`) does not exist" in error, error
    assert "set `option.missing_topics=wait` to wait" in error, error
