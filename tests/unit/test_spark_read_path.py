"""``readPath``: how a query's executors read the kafka connector (issue 18). ``auto``,
``native`` and ``python`` are the connector's read_path; ``jvm`` is Spark's own Kafka
readers under sluicegate's planning (jvm_planner.py). Checked at start, naming the option;
what the JVM path cannot do is refused, never ignored."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluicegate.api.errors import ConfigError
from sluicegate.spark import jvm_classpath
from sluicegate.spark.datasource import PYTHON_FORMAT, session_data_source
from sluicegate.spark.jvm_classpath import build_key, built, classpath_listing, jvm_read_path_jars
from sluicegate.spark.jvm_planner import JvmPlannerFactory, KafkaRangePlanner, executor_consumer_settings, spread_parts
from sluicegate.spark.maven_central import JarFetchError, MavenJar, ensure_jar
from sluicegate.spark.offsets import SourceOffset
from sluicegate.spark.options import SparkSourceOptions
from sluicegate.spark.trigger_limits import PlannedPart
from sluicegate_connectors.kafka import KafkaOptions

DATA = "127.0.0.1:9092"


def options(**given: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": DATA, "subscribe": "orders", **given}


def config(**given: str) -> SparkSourceOptions:
    return SparkSourceOptions.from_options(options(**given))


def refused(**given: str) -> str:
    with pytest.raises(ConfigError) as info:
        SparkSourceOptions.from_options({"kafka.bootstrap.servers": DATA, **given})
    assert info.value.setting == "readPath"
    return info.value.problem


def test_the_default_is_auto_and_the_connector_keeps_its_own_choice() -> None:
    c = config()
    assert c.read_path == "auto" and "read_path" not in c.options
    assert KafkaOptions.parse(c.options).read_path == "auto"


@pytest.mark.parametrize("path", ["native", "python", "auto", "PYTHON"])
def test_the_python_worker_paths_become_the_connectors_read_path(path: str) -> None:
    c = config(readPath=path)
    assert c.read_path == path.lower() and c.options["read_path"] == path.lower()


def test_jvm_is_not_handed_to_the_connector_and_notes_what_it_does_not_use() -> None:
    c = config(readPath="jvm", arrowBatchRows="1000", **{"kafka.max.poll.records": "20000"})
    assert c.read_path == "jvm" and "read_path" not in c.options
    assert any("arrowBatchRows is not used by readPath=jvm" in note for note in c.notes)
    assert not any("max.poll.records" in note for note in c.notes), "Spark's Java consumers use it on this path"
    assert any("max.poll.records is not used" in n for n in config(**{"kafka.max.poll.records": "1"}).notes)


def test_bad_values_and_what_the_jvm_path_cannot_read_fail_naming_read_path() -> None:
    assert "must be auto, native, python or jvm, got 'jmv'" in refused(subscribe="t", readPath="jmv")
    assert "this query reads sequence" in refused(source="s", readPath="jvm")
    assert "metricsPort" in refused(subscribe="t", readPath="jvm", metricsPort="9400")
    with pytest.raises(ConfigError, match="jvm reads streams"):
        SparkSourceOptions.from_options(options(readPath="jvm"), batch=True)
    for path in ("native", "jvm"):
        assert "option.read_path=python both choose" in refused(
            subscribe="t", readPath=path, **{"option.read_path": "python"}
        ), "neither is quietly ignored"


def test_the_python_source_refuses_jvm_saying_why_the_session_has_none() -> None:
    source_class = session_data_source(2, jvm_unavailable="its jar is not built for these sources: make install")
    source = source_class(options(readPath="jvm"))
    with pytest.raises(ConfigError, match="jvm cannot read in this session: its jar is not built"):
        source.schema()
    assert session_data_source(2, PYTHON_FORMAT).name() == PYTHON_FORMAT


def source_with(bootstrap: str = DATA) -> Any:
    return SimpleNamespace(options=SimpleNamespace(bootstrap_servers=bootstrap))


def test_executor_consumers_get_the_querys_kafka_settings_as_spark_gives_them() -> None:
    given = options(
        readPath="jvm",
        **{
            "kafka.max.poll.records": "20000",
            "kafka.fetch.max.wait.ms": "10",
            "kafka.group.id": "theirs",
            "kafka.isolation.level": "read_committed",
        },
    )
    settings = executor_consumer_settings(SparkSourceOptions.from_options(given), given, source_with("data:9093"))
    assert settings["max.poll.records"] == "20000" and settings["fetch.max.wait.ms"] == "10", "Java names, unchanged"
    assert settings["bootstrap.servers"] == "data:9093", "the connector's data cluster"
    assert settings["group.id"] == "sluicegate-orders-executor", "no group is joined: only a label"
    assert settings["isolation.level"] == "read_committed" and settings["auto.offset.reset"] == "none"
    assert settings["enable.auto.commit"] == "false" and settings["receive.buffer.bytes"] == "65536"
    assert settings["value.deserializer"].endswith("ByteArrayDeserializer")


def test_executor_consumers_take_the_drivers_environment_security_when_the_query_names_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLUICEGATE_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("SLUICEGATE_KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("SLUICEGATE_KAFKA_SASL_USERNAME", "reader")
    monkeypatch.setenv("SLUICEGATE_KAFKA_SASL_PASSWORD", "s3cret")
    given = options(readPath="jvm")
    settings = executor_consumer_settings(SparkSourceOptions.from_options(given), given, source_with())
    assert settings["security.protocol"] == "SASL_PLAINTEXT" and settings["sasl.mechanism"] == "PLAIN"
    assert 'username="reader"' in settings["sasl.jaas.config"]
    named = options(readPath="jvm", **{"kafka.security.protocol": "PLAINTEXT"})
    own = executor_consumer_settings(SparkSourceOptions.from_options(named), named, source_with())
    assert own["security.protocol"] == "PLAINTEXT" and "sasl.mechanism" not in own, "the query's own, as written"


def test_the_factory_checks_as_the_python_path_and_says_whether_rows_have_headers() -> None:
    factory = JvmPlannerFactory(session_data_source(2, PYTHON_FORMAT))

    def check(**given: str) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(factory.check(json.dumps(options(readPath="jvm", **given)), ""))
        return answer

    assert check() == {"read": "kafka", "includeHeaders": False}
    assert check(includeHeaders="true") == {"read": "kafka", "includeHeaders": True}
    assert check(**{"option.include_headers": "true"})["includeHeaders"] is True, "the connector's name too"
    assert "kafka.fetch.wait.max.msx" in check(**{"kafka.fetch.wait.max.msx": "1"})["error"], (
        "librdkafka's check of the kafka.* names still runs (the driver plans with librdkafka)"
    )
    assert "readPath" in check(metricsPort="9400")["error"]


@pytest.fixture
def repository(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A ``file://`` Maven repository (empty) and an empty sluicegate cache for this test."""
    monkeypatch.setenv("SLUICEGATE_CACHE_DIR", str(tmp_path / "cache"))
    repository = tmp_path / "repo"
    monkeypatch.setenv("SLUICEGATE_MAVEN_REPOSITORY", repository.as_uri())
    return repository


def test_the_jar_is_used_only_when_built_for_these_sources_and_its_kafka_jars_are_fetched_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, repository: Path
) -> None:
    monkeypatch.setattr(jvm_classpath, "JAR", tmp_path / "pkg" / "sluicegate-spark.jar")
    monkeypatch.setattr(jvm_classpath, "CLASSPATH_FILE", tmp_path / "pkg" / "classpath.tsv")
    assert built() is None and jvm_read_path_jars() == [], "no jar in this install"

    kafka = b"kafka-clients, as Maven Central serves it"
    jar = MavenJar("org.apache.kafka", "kafka-clients", "3.9.2", hashlib.sha256(kafka).hexdigest())
    (repository / jar.relative_path()).parent.mkdir(parents=True)
    (repository / jar.relative_path()).write_bytes(kafka)
    jvm_classpath.JAR.parent.mkdir()
    jvm_classpath.JAR.write_bytes(b"PK")
    jvm_classpath.CLASSPATH_FILE.write_text(classpath_listing((jar,)))
    cached = tmp_path / "cache" / "maven" / "org/apache/kafka/kafka-clients/3.9.2/kafka-clients-3.9.2.jar"
    assert jvm_read_path_jars() == [str(jvm_classpath.JAR), str(cached)]
    assert cached.read_bytes() == kafka, "fetched from the repository"
    (repository / jar.relative_path()).unlink()
    assert jvm_read_path_jars() == [str(jvm_classpath.JAR), str(cached)], "once: the cache serves it after"

    jvm_classpath.CLASSPATH_FILE.write_text(classpath_listing((jar,)).replace(build_key(), "0" * 16))
    assert built() is None, "a jar built from other Java sources is stale: not used"


def test_a_kafka_jar_that_is_not_the_one_built_against_is_refused(repository: Path) -> None:
    jar = MavenJar("org.apache.kafka", "kafka-clients", "3.9.2", hashlib.sha256(b"the real one").hexdigest())
    with pytest.raises(JarFetchError, match="cannot fetch"):
        ensure_jar(jar)
    (repository / jar.relative_path()).parent.mkdir(parents=True)
    (repository / jar.relative_path()).write_bytes(b"tampered")
    with pytest.raises(JarFetchError, match="sha256"):
        ensure_jar(jar)
    assert not jar.cached().exists() and not list(jar.cached().parent.iterdir()), "nothing half-written is left"


# -- the files connector: Spark's Parquet reader under sluicegate's planning -----------------


def file_options(path: str, **given: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": DATA, "format": "parquet", "path": path, **given}


def file_refusal(path: str, **given: str) -> tuple[str, str]:
    with pytest.raises(ConfigError) as info:
        SparkSourceOptions.from_options(file_options(path, **given))
    return info.value.setting, info.value.problem


def test_files_on_the_jvm_path_are_planned_a_split_a_file_and_python_is_the_default() -> None:
    jvm = SparkSourceOptions.from_options(file_options("/data", readPath="jvm", maxFilesPerTrigger="20"))
    assert jvm.read_path == "jvm" and jvm.options["split_size_bytes"] == "0" and jvm.max_splits_per_trigger == 20
    python = SparkSourceOptions.from_options(file_options("/data", readPath="python"))
    assert (
        python.read_path == "python" and "split_size_bytes" not in python.options and "read_path" not in python.options
    )


def test_what_the_jvm_path_cannot_read_of_files_fails_naming_the_option() -> None:
    setting, problem = file_refusal("/data", format="csv", readPath="jvm")
    assert setting == "readPath" and "jvm reads Parquet" in problem and "this query reads csv" in problem
    setting, problem = file_refusal("/data", readPath="jvm", maxRecordsPerTrigger="1000")
    assert setting == "maxRecordsPerTrigger" and "maxFilesPerTrigger" in problem, "a row limit would cut a file"
    setting, problem = file_refusal("/data", readPath="jvm", **{"option.split_size_bytes": "1000"})
    assert setting == "option.split_size_bytes" and "Spark cuts a large file" in problem
    setting, problem = file_refusal("/data", readPath="native")
    assert setting == "readPath" and "native is the kafka connector's" in problem
    setting, _ = file_refusal("/data", readPath="jvm", metricsPort="9400")
    assert setting == "readPath"


def test_the_factory_gives_a_files_querys_schema_nullable_as_sparks_file_source_does(tmp_path: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.types import LongType, StructField, StructType

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    pq.write_table(pa.table({"id": [1], "name": ["a"]}, schema=schema), tmp_path / "a.parquet")
    factory = JvmPlannerFactory(session_data_source(2, PYTHON_FORMAT))

    def check(schema_json: str = "", path: str = str(tmp_path), **given: str) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(
            factory.check(json.dumps(file_options(path, readPath="jvm", **given)), schema_json)
        )
        return answer

    inferred = check()
    assert inferred["read"] == "files"
    fields = StructType.fromJson(json.loads(inferred["schema"])).fields
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in fields] == [
        ("id", "bigint", True),
        ("name", "string", True),
    ]
    own = StructType([StructField("id", LongType(), nullable=False)])
    assert StructType.fromJson(json.loads(check(own.json())["schema"])).fields[0].nullable, "the query's own, nullable"
    assert "not one" in check(path="memory://bucket/data")["error"], "an object store is refused, not read wrongly"
    assert "maxRecordsPerTrigger" in check(maxRecordsPerTrigger="5")["error"]


class PlanningReader:
    """What KafkaRangePlanner asks of the query's stream reader, recorded."""

    def __init__(self, end: SourceOffset) -> None:
        self.end = end
        self.acknowledged: list[SourceOffset] = []
        self.config = SimpleNamespace(max_records_per_trigger=None)

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return self.end.to_json()

    def planned_parts(self, start: SourceOffset, end: SourceOffset) -> list[PlannedPart[Any]]:
        assert end == self.end
        wire = {"topic": "orders", "partition": 0}
        return [
            PlannedPart(
                0,
                (
                    (wire, 5, 9),
                    ({"topic": "orders", "partition": 1}, 3, 3),
                    ({"topic": "orders", "partition": 3}, 0, 2),
                ),
            ),
            PlannedPart(1, (({"topic": "orders", "partition": 2}, 0, 4),)),
            PlannedPart(2, (({"topic": "orders", "partition": 4}, 7, 7),)),
        ]

    def acknowledge_planned(self, end: SourceOffset) -> None:
        self.acknowledged.append(end)


def test_latest_offset_brings_the_batchs_parts_and_acknowledges_nothing_before_sparks_log() -> None:
    """readPath=jvm: one call a micro-batch gives the end offset (the planner's own text,
    which Spark compares) and the parts, a Spark task each reading its ranges in turn; the
    coordinator hears of the end only once Spark has written it (acknowledge, or planParts
    for a batch the stream did not plan)."""
    start = SourceOffset(checkpoint_id=1)
    end = SourceOffset(checkpoint_id=2, rows=10)
    reader = PlanningReader(end)
    planner = KafkaRangePlanner(reader, {})
    start_text = json.dumps(start.to_json())
    planned = json.loads(planner.latestOffsetAndParts(start_text, 0))
    assert planned["end"] == planner.latestOffset(start_text, 0) == json.dumps(end.to_json())
    # a part per Spark task, its ranges read in turn; an empty range (or part) is read by nobody
    parts = [[["orders", 0, 5, 9], ["orders", 3, 0, 2]], [["orders", 2, 0, 4]]]
    assert planned["parts"] == parts
    assert reader.acknowledged == []
    planner.acknowledge(planned["end"])
    assert reader.acknowledged == [end]
    assert json.loads(planner.planParts(start_text, planned["end"])) == parts
    assert reader.acknowledged == [end, end]
    reader.end = start  # nothing new: the offset is the start, and no parts
    nothing = json.loads(planner.latestOffsetAndParts(start_text, 0))
    assert nothing == {"end": start_text, "parts": []}


def test_a_batch_of_fewer_parts_than_task_slots_is_spread_over_them() -> None:
    """Two subtasks' parts on a session of 4 task slots run as 4 tasks; no range is cut."""
    reader = PlanningReader(SourceOffset(checkpoint_id=2, rows=10))
    planner = KafkaRangePlanner(reader, {}, tasks=4)
    start_text = json.dumps(SourceOffset(checkpoint_id=1).to_json())
    planned = json.loads(planner.latestOffsetAndParts(start_text, 0))
    assert planned["parts"] == [[["orders", 0, 5, 9]], [["orders", 3, 0, 2]], [["orders", 2, 0, 4]]], (
        "three ranges are three tasks at most"
    )


@given(
    st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=12), max_size=8),
    st.integers(0, 40),
)
def test_spread_parts_keeps_every_range_once_in_order_over_as_many_tasks_as_it_can(
    parts: list[list[int]], tasks: int
) -> None:
    spread = spread_parts(parts, tasks)
    assert [r for part in spread for r in part] == [r for part in parts for r in part]
    assert all(spread), "no empty part"
    ranges = sum(len(part) for part in parts)
    assert len(spread) == max(len(parts), min(tasks, ranges))
    assert spread_parts(parts, tasks) == spread, "the same for the same parts"
