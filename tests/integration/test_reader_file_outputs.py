"""``parquet:DIR`` over real Kafka and real processes: a reader SIGKILLed while it writes
and started again leaves DIR holding every input record exactly once, in whole files,
and none of its files pending."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka_data import audit_ok, coordinator_args, create_topic, kafka_options, option_args
from processes import ProcessGroup, support_pythonpath
from test_reader_processing import PARTITIONS, produce_orders

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]


def test_a_killed_reader_leaves_each_record_in_dir_once(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    data = f"{unique_source}.in"
    create_topic(kafka_bootstrap, data, PARTITIONS)
    rows = produce_orders(kafka_bootstrap, data, bad=False)
    options = kafka_options(kafka_bootstrap, topics=data, stopping_offsets="latest")
    procs.start("coordinator", coordinator_args(unique_source, 1, options)).wait_for_log("is serving", timeout_s=90)
    out = tmp_path / "out"
    args = [
        *("reader", "--source", unique_source, "--subtask", "0", "--connector", "kafka"),
        *("--output", f"parquet:{out}", "--process", "record_functions:slowly"),
        *("--max-batch", "100", "--checkpoint-interval-ms", "200"),
        *option_args(options),
    ]
    env = {"PYTHONPATH": support_pythonpath()}
    first = procs.start("reader-0", args, env=env)
    first.wait_for_log("checkpoint 3:", timeout_s=60)  # files published, more on the way
    first.kill()
    assert first.wait(10) == -9, "the first reader had finished before the kill: nothing was tested"
    assert list(out.glob("part-*.parquet")), "the first reader published nothing before it was killed"
    second = procs.start("reader-1", args, env=env)
    assert second.wait(120) == 0, second.tail()

    written = [
        (row["key"], row["value"], tuple((h["key"], h["value"]) for h in row["headers"] or []), row["timestamp"])
        for f in out.glob("part-*.parquet")
        for row in pq.read_table(f).to_pylist()
    ]
    stamps = [(k, v, h, round(t.timestamp() * 1000)) for k, v, h, t in written]
    assert Counter(stamps) == Counter(rows)
    assert not list((out / "_pending").glob("part-00000-*")), "a pending file was left behind"
    audit_ok(kafka_bootstrap, unique_source)


def test_a_sink_of_the_users_own_gets_every_record(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """``--output sink:record_functions:ValuesFile``: the user's class, made by the reader
    process for its subtask, is handed every record and flushed at the checkpoints."""
    data = f"{unique_source}.in"
    create_topic(kafka_bootstrap, data, PARTITIONS)
    rows = produce_orders(kafka_bootstrap, data, bad=False)
    options = kafka_options(kafka_bootstrap, topics=data, stopping_offsets="latest")
    procs.start("coordinator", coordinator_args(unique_source, 1, options)).wait_for_log("is serving", timeout_s=90)
    args = [
        *("reader", "--source", unique_source, "--subtask", "0", "--connector", "kafka"),
        *("--output", "sink:record_functions:ValuesFile", *option_args(options)),
    ]
    env = {"PYTHONPATH": support_pythonpath(), "SLUICEGATE_TEST_SINK_DIR": str(tmp_path)}
    reader = procs.start("reader", args, env=env)
    assert reader.wait(120) == 0, reader.tail()
    assert Counter((tmp_path / "values-0.txt").read_bytes().splitlines()) == Counter(v for _, v, _, _ in rows)
