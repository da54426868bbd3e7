"""``readPath=auto``, the default (spark/read_path_choice.py): with the JVM read path in the
session, files streams take it wherever it can read them, kafka streams by their trigger
(a backlog on the native reader, a live stream on the JVM path), and a query that tunes or
needs the Python path keeps it, saying why. Asked as the Java source asks: through the
planner factory, with the query's options as given."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.protocol.definition import DefinitionMismatchError, SourceDefinition
from sluicegate.spark.datasource import PYTHON_FORMAT, session_data_source
from sluicegate.spark.jvm_planner import FileRangePlanner, JvmPlannerFactory, unavailable_reason
from sluicegate.spark.options import SparkSourceOptions
from sluicegate.spark.read_path_choice import QueryFacts, choose

DATA = "127.0.0.1:9092"
NATIVE = QueryFacts(reads_natively=True)


def kafka(**given: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": DATA, "subscribe": "orders", **given}


def files(path: str = "/data", **given: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": DATA, "connector": "files", "format": "parquet", "path": path, **given}


def chosen(options: dict[str, str], facts: QueryFacts = NATIVE) -> tuple[str, str]:
    choice = choose(SparkSourceOptions.from_options(options), options, facts)
    return choice.path, choice.why


def with_trigger(trigger: str | None, reads_natively: bool = True) -> QueryFacts:
    return QueryFacts(reads_natively=reads_natively, trigger=trigger)


def test_a_parquet_stream_takes_the_jvm_path_and_what_it_cannot_read_the_python_one() -> None:
    assert chosen(files())[0] == "jvm"
    assert chosen(files(maxFilesPerTrigger="2"))[0] == "jvm", "Spark's file limit is the JVM path's too"
    path, why = chosen(files(format="csv"))
    assert path == "python" and "this query reads csv" in why
    no_format = {k: v for k, v in files().items() if k != "format"}
    assert chosen(no_format)[0] == "jvm", "load(path) reads Parquet unless told, as in Spark"
    assert chosen(files(maxRecordsPerTrigger="100")) == (
        "python",
        "maxRecordsPerTrigger ends batches inside files; the JVM path reads them whole",
    )
    assert chosen(files(**{"option.split_size_bytes": "1000"}))[0] == "python"
    assert chosen(files(), QueryFacts(files_local=False))[0] == "python"
    assert chosen(files(arrowBatchRows="1000"))[0] == "python", "a tuning of the Python path"
    assert chosen(files(metricsPort="9400"))[0] == "python", "the Python readers' figures"
    assert chosen(files(metricsPort="0"))[0] == "jvm", "0 is off"


def test_a_kafka_stream_is_chosen_by_its_trigger() -> None:
    assert chosen(kafka(), with_trigger(None))[0] == "trigger", "before the query starts"
    path, why = chosen(kafka(), with_trigger("AvailableNowTrigger"))
    assert path == "python" and "Trigger.AvailableNow reads a backlog" in why
    assert chosen(kafka(), with_trigger("OneTimeTrigger"))[0] == "python"
    path, why = chosen(kafka(), with_trigger("ProcessingTimeTrigger"))
    assert path == "jvm" and "latency" in why
    assert chosen(kafka(), with_trigger(""))[0] == "python", "an unknown trigger: the native reader"


def test_a_kafka_stream_without_the_native_reader_takes_the_jvm_path_whatever_its_trigger() -> None:
    for trigger in (None, "AvailableNowTrigger", "ProcessingTimeTrigger"):
        path, why = chosen(kafka(), with_trigger(trigger, reads_natively=False))
        assert path == "jvm" and "no native Kafka reader" in why


def test_a_kafka_stream_tuning_the_python_path_keeps_it() -> None:
    for given in ({"arrowBatchRows": "1000"}, {"metricsPort": "9400"}):
        assert chosen(kafka(**given), with_trigger("ProcessingTimeTrigger"))[0] == "python", given


@pytest.mark.parametrize("given", ["jvm", "JVM ", "python", "native"])
def test_a_given_read_path_is_never_second_guessed(given: str) -> None:
    path, why = chosen(kafka(readPath=given), with_trigger("AvailableNowTrigger", reads_natively=False))
    assert path == ("jvm" if given.strip().lower() == "jvm" else "python") and "was given" in why


@pytest.mark.parametrize("own", ["native", "python"])
def test_the_kafka_connectors_own_read_path_option_keeps_the_python_data_source(own: str) -> None:
    path, why = chosen(kafka(**{"option.read_path": own}), with_trigger("ProcessingTimeTrigger"))
    assert path == "python" and f"option.read_path={own} was given" in why


def test_other_connectors_have_one_read_path() -> None:
    options = {"connector": "sequence", "source": "numbers", "option.splits": "2"}
    assert chosen(options) == ("python", "the sequence connector has one read path")


def factory_choice(factory: JvmPlannerFactory, options: dict[str, str], trigger: str | None) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(factory.choose(json.dumps(options), trigger))
    return answer


def test_the_factory_answers_the_java_source_and_logs_each_final_choice_once(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    factory = JvmPlannerFactory(session_data_source(2, PYTHON_FORMAT))
    caplog.set_level(logging.INFO, "sluicegate.spark")
    stream = files(str(tmp_path), source="daily")
    assert factory_choice(factory, stream, None)["path"] == "jvm"
    assert factory_choice(factory, stream, None)["path"] == "jvm", "Spark looks the table up twice"
    said = [r.getMessage() for r in caplog.records if "readPath=auto" in r.getMessage()]
    assert said == [
        "source daily: readPath=auto chose jvm: "
        "Spark's Parquet reader reads the files (columnar, pruned to the query's columns)"
    ]
    caplog.clear()
    live = kafka(source="orders")
    assert factory_choice(factory, live, None)["path"] == "trigger"
    assert not [r for r in caplog.records if "readPath=auto" in r.getMessage()], "not final yet"
    for _ in range(2):  # a query run a second time says it again
        assert factory_choice(factory, live, "AvailableNowTrigger")["path"] == "python"
    assert len([r for r in caplog.records if "chose python" in r.getMessage()]) == 2


def test_options_that_do_not_parse_go_to_the_python_path_which_names_the_option() -> None:
    factory = JvmPlannerFactory(session_data_source(2, PYTHON_FORMAT))
    answer = factory_choice(factory, kafka(maxOffsetsPerTriger="10"), None)
    assert answer["path"] == "python" and "maxoffsetspertriger" in answer["why"].lower()


class RefusingReader:
    """A query's reader whose coordinator refuses the query's definition of its source."""

    def __init__(self, committed: dict[str, str], given: dict[str, str]) -> None:
        self.error = DefinitionMismatchError(
            "files-1.query-2", "this process's coordinator", SourceDefinition("files", committed),
            SourceDefinition("files", given),
        )  # fmt: skip

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: Any, end: Any) -> list[Any]:
        raise self.error


def test_a_files_source_first_read_in_splits_refuses_the_jvm_path_saying_how_to_go_on() -> None:
    planner = FileRangePlanner(RefusingReader({"path": "/data"}, {"path": "/data", "split_size_bytes": "0"}), None)
    with pytest.raises(ConfigError) as refused:
        planner.initialOffset()
    assert refused.value.setting == "readPath"
    assert "first read on the Python path" in refused.value.problem
    assert ".option('readPath', 'python')" in refused.value.problem
    with pytest.raises(ConfigError, match="first read on the Python path"):  # Spark's Source API plans here first
        planner.planFiles("", json.dumps({"checkpoint_id": 1}))
    other = FileRangePlanner(RefusingReader({"path": "/a", "split_size_bytes": "0"}, {"path": "/b"}), None)
    with pytest.raises(DefinitionMismatchError):  # another difference: the refusal as it is
        other.initialOffset()


def test_a_spark_connect_session_has_no_jvm_read_path_and_says_why() -> None:
    connect_session_class = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})
    why = unavailable_reason(connect_session_class())
    assert why is not None and "Spark Connect session" in why, "said without asking for a SparkContext"
