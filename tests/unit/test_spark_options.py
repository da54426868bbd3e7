"""format("sluicegate") reads every option it is given or fails naming it (issue 19 item 8):
an option nobody reads would change nothing without a word."""

from __future__ import annotations

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.spark.options import SparkSourceOptions

BASE = {"source": "orders", "parallelism": "2", "kafka.bootstrap.servers": "127.0.0.1:9092"}


def _refused(**extra: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        SparkSourceOptions.from_options({**BASE, **extra})
    return info.value


def test_every_known_option_and_any_connector_option_is_accepted() -> None:
    config = SparkSourceOptions.from_options(
        {**BASE, "maxRecordsPerTrigger": "100", "option.topics": "orders", "metricsPort": "0"}
    )
    assert config.max_records_per_trigger == 100
    assert config.options == {"topics": "orders"}


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("maxRecordPerTrigger", "maxRecordsPerTrigger"),
        ("paralelism", "parallelism"),
        ("arrowBatchRow", "arrowBatchRows"),
        ("kafka.security.protocl", "kafka.security.protocol"),
        ("metricsHots", "metricsHost"),
        ("readPth", "readPath"),
    ],
)
def test_a_misspelled_option_fails_naming_it_and_the_closest_known_one(typo: str, meant: str) -> None:
    error = _refused(**{typo: "100"})
    assert error.setting == typo.lower()
    assert f"did you mean {meant!r}" in str(error), error


def test_keys_are_case_insensitive_as_in_spark() -> None:
    config = SparkSourceOptions.from_options({**BASE, "MAXRECORDSPERTRIGGER": "7"})
    assert config.max_records_per_trigger == 7
    assert "did you mean 'maxRecordsPerTrigger'" in str(_refused(MAXRECORDPERTRIGGER="7"))


def test_a_name_far_from_any_lists_the_known_ones() -> None:
    error = _refused(colour="blue")
    assert "did you mean" not in str(error)
    assert all(name in str(error) for name in ("parallelism", "maxRecordsPerTrigger", "option.<connector option>"))


@pytest.mark.parametrize(
    "name", ["startingOffsets", "maxOffsetsPerTrigger", "includeHeaders", "kafka.max.poll.records"]
)
def test_spark_kafka_source_options_are_refused_for_another_connector_saying_which(name: str) -> None:
    error = _refused(**{name: "x"})
    assert error.setting == name
    assert "Spark's Kafka source" in str(error) and "sequence connector" in str(error), error
    assert "subscribe" in str(error)


def test_a_load_path_of_another_connector_says_which_one_reads_paths() -> None:
    assert SparkSourceOptions.from_options({**BASE, "path": "/data"}).connector == "files"
    refusal = _refused(path="/data", connector="sequence")
    assert refusal.setting == "path" and "files connector" in refusal.problem, refusal


@pytest.mark.parametrize(
    ("connector", "options", "typo", "meant"),
    [
        ("kafka", {"topics": "a", "bootstrap_servers": "127.0.0.1:9092"}, "starting_offset", "starting_offsets"),
        ("files", {"path": "/tmp"}, "max_file_age", "max_file_age_ms"),
        ("sequence", {}, "record_per_split", "records_per_split"),
    ],
)
def test_a_misspelled_connector_option_names_the_closest_known_one(
    connector: str, options: dict[str, str], typo: str, meant: str
) -> None:
    from sluicegate.connectors import load_source

    with pytest.raises(ConfigError) as info:
        load_source(connector, {**options, typo: "1"})
    assert info.value.setting == typo
    assert f"did you mean {meant!r}" in str(info.value) and f"the {connector} connector" in str(info.value)


def test_a_stream_without_a_control_cluster_fails_at_its_start_naming_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A files stream without kafka.bootstrap.servers logged "Unable connect to ':9092'"
    before it failed (issue 51 item 2); a batch query needs no control cluster."""
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    config = SparkSourceOptions.from_options({"path": "/data/in", "format": "parquet"})
    with pytest.raises(ConfigError, match=r"'kafka\.bootstrap\.servers': not set: a stream keeps"):
        config.check_control_cluster()
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k:9092")
    SparkSourceOptions.from_options({"path": "/data/in", "format": "parquet"}).check_control_cluster()
