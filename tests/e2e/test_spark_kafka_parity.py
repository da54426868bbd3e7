"""The same query through Spark's own Kafka source and through sluicegate, only the format
name changed (issue 19 items 1, 3, 4 and 6): real Kafka, real Spark, and for sluicegate
nothing else started: the query's driver coordinates its source itself (coordinator=auto),
except where a deployed coordinator already serves one, which the query then uses.

A topic of three partitions, written with a transactional producer: keys, null keys,
empty and null values, headers, explicit timestamps, and a transaction aborted between
two committed ones (its records and the markers leave gaps in the offsets). Both
queries take Spark's options as a Spark user writes them (``subscribe``,
``startingOffsets``, ``includeHeaders``, ``failOnDataLoss``, a ``kafka.*`` client
setting, ``groupIdPrefix``), run with ``Trigger.AvailableNow`` into a memory sink, and
must give the same schema and the same rows. A second pair leaves ``startingOffsets``
out: Spark's default, latest, reads nothing of what is already there, on both. Two batch
pairs (``spark.read``, item 3, no coordinator) read from Spark's batch defaults (earliest
to latest) with ``minPartitions`` cutting the ranges, and between JSON offsets.

Spark runs in a subprocess (this file as a script): Spark's Kafka source is a jar on
``spark.jars``, which only a JVM started with it has.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from processes import ProcessGroup

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]

PARTITIONS = 3


def write_topic(bootstrap: str, topic: str) -> int:
    """The records (see the module's text); returns how many committed records there are."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # retention.ms=-1: explicit timestamps of records are never old enough to be deleted
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "-1"})])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)
    committed = 0
    base_ms = int(time.time() * 1000) - 60_000

    def transaction(
        records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]], commit: bool
    ) -> int:
        producer.begin_transaction()
        for i, (partition, key, value, headers) in enumerate(records):
            producer.produce(topic, value, key, partition=partition, headers=headers, timestamp=base_ms + i)
        if commit:
            producer.commit_transaction(30)
            return len(records)
        producer.abort_transaction(30)
        return 0

    committed += transaction(
        [(0, b"k%d" % i, b"v%d" % i, [("h", b"x%d" % i), ("h", b"again")]) for i in range(5)]
        + [(1, None, b"", None), (1, None, None, None), (1, b"", b"no key", [("empty", b"")])]
        + [(2, b"a", b"1", None), (2, b"b", b"2", None)],
        commit=True,
    )
    committed += transaction([(2, b"aborted", b"never read", None), (0, b"aborted", b"never read", None)], commit=False)
    committed += transaction([(2, b"c", b"3", None), (0, b"k5", b"v5", None)], commit=True)
    producer.flush(30)
    return committed


def spark_options(topic: str, bootstrap: str, starting: str | None) -> dict[str, str]:
    """As a Spark user writes them for format("kafka")."""
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "includeHeaders": "true",
        "failOnDataLoss": "true",
        "groupIdPrefix": "parity",
        "kafka.fetch.max.wait.ms": "10",
    }
    if starting is not None:
        options["startingOffsets"] = starting
    return options


def test_the_same_query_gives_the_same_rows_through_sparks_source_and_sluicegate(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    topic = unique_source
    committed = write_topic(kafka_bootstrap, topic)
    starting = json.dumps({topic: {"0": 1, "1": -2, "2": -2}})
    procs = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        # The first query's source (its name derived from the subscription: the topic's)
        # has no coordinator: the query's driver coordinates it. The second names its own
        # source, which a deployed coordinator serves, with the options the query's Spark
        # names stand for: the query uses that one.
        args = ["--connector", "kafka", "--max-parallelism", str(PARTITIONS), "--option", f"topics={topic}"]
        deployed = procs.start(
            "coordinator-latest",
            ["coordinator", "--source", f"{topic}-latest", *args, "--option", "starting_offsets=latest"],
        )
        deployed.wait_for_log("is serving", timeout_s=90)
        ending = json.dumps({topic: {"0": 4, "1": -1, "2": 3}})
        cases = {
            "explicit": {"mode": "stream", "options": spark_options(topic, kafka_bootstrap, starting)},
            "latest": {
                "mode": "stream",
                "options": {**spark_options(topic, kafka_bootstrap, None), "source": f"{topic}-latest"},
            },
            "batch_defaults": {
                "mode": "batch",
                "options": {**spark_options(topic, kafka_bootstrap, None), "minPartitions": "7"},
            },
            "batch_between": {
                "mode": "batch",
                "options": {**spark_options(topic, kafka_bootstrap, starting), "endingOffsets": ending},
            },
        }
        out = tmp_path / "results.json"
        log = tmp_path / "spark.log"
        with log.open("wb") as handle:
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--cases",
                    json.dumps(cases),
                    "--out",
                    str(out),
                    "--checkpoints",
                    str(tmp_path),
                ],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, PYTHONUNBUFFERED="1"),
                timeout=360,
                check=False,
            )
        assert done.returncode == 0, log.read_text()[-6000:]
        results = json.loads(out.read_text())
    finally:
        procs.stop_all()
    spark_side, ours = results["explicit"]["kafka"], results["explicit"]["sluicegate"]
    assert ours["schema"] == spark_side["schema"]
    assert len(spark_side["rows"]) == committed - 1, "all committed records but offset 0 of partition 0"
    assert sorted(ours["rows"]) == sorted(spark_side["rows"])
    # to_json leaves null fields out: rows without a key or a value are in the comparison
    assert any('"key"' not in row for row in spark_side["rows"]) and any(
        '"value"' not in row for row in spark_side["rows"]
    )
    for side in ("kafka", "sluicegate"):
        assert results["latest"][side]["rows"] == [], f"{side}: startingOffsets defaults to latest"
    batch = results["batch_defaults"]
    assert batch["sluicegate"]["schema"] == batch["kafka"]["schema"] == spark_side["schema"]
    assert len(batch["kafka"]["rows"]) == committed, "a batch query reads from earliest to latest"
    assert sorted(batch["sluicegate"]["rows"]) == sorted(batch["kafka"]["rows"])
    between = results["batch_between"]
    assert 0 < len(between["kafka"]["rows"]) < committed - 1
    assert sorted(between["sluicegate"]["rows"]) == sorted(between["kafka"]["rows"])
    spark_log = log.read_text()
    assert "groupIdPrefix is not used" in spark_log
    assert f"source name not given: {topic}" in spark_log
    assert f"source {topic}: this process coordinates it now" in spark_log, "the query served its source itself"
    assert f"source {topic}-latest: this process coordinates it now" not in spark_log, "the deployed one served it"


# -- the Spark side (this file run as a script) -----------------------------------------


def run_cases(cases: dict[str, dict[str, Any]], checkpoints: Path) -> dict[str, Any]:
    from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars
    from sluicegate.spark.job import spark_session

    jars = ",".join(str(p) for p in ensure_spark_kafka_jars())
    spark = spark_session("sluicegate-parity", quiet=True, extra_conf={"spark.jars": jars})
    results: dict[str, Any] = {}
    for case, spec in cases.items():
        results[case] = {}
        for fmt in ("kafka", "sluicegate"):
            given = {k: v for k, v in spec["options"].items() if fmt == "sluicegate" or k != "source"}
            reader = spark.readStream.format(fmt) if spec["mode"] == "stream" else spark.read.format(fmt)
            for key, value in given.items():
                reader = reader.option(key, value)
            frame = reader.load()
            if spec["mode"] == "batch":
                rows = frame.selectExpr("to_json(struct(*)) AS row").collect()
                results[case][fmt] = {"schema": frame.schema.json(), "rows": [r.row for r in rows]}
                print(f"{case} {fmt}: {len(rows)} rows, {frame.rdd.getNumPartitions()} partitions", flush=True)
                continue
            name = f"{case}_{fmt}"
            query = (
                frame.writeStream.format("memory")
                .queryName(name)
                .option("checkpointLocation", str(checkpoints / name))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(240)
            rows = spark.sql(f"SELECT to_json(struct(*)) AS row FROM {name}").collect()
            results[case][fmt] = {"schema": frame.schema.json(), "rows": [r.row for r in rows]}
            print(f"{case} {fmt}: {len(rows)} rows", flush=True)
    spark.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoints", required=True)
    args = parser.parse_args()
    results = run_cases(json.loads(args.cases), Path(args.checkpoints))
    Path(args.out).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
