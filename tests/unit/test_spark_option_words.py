"""A connector option as a Spark query names it (spark/option_words.py): the messages a
query's user reads name the options they wrote, or ``option.<name>`` for those Spark has
no name for (issue 51 item 3: the missing-topic hint said ``missing_topics=wait``, which
``.option("missing_topics", "wait")`` refuses)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest

from sluicegate.api.errors import ConfigError, SourceError, in_words_of, option_named
from sluicegate.spark.option_words import OptionWords, worded, worded_reads
from sluicegate.spark.options import SparkSourceOptions, option_words_of


def test_a_kafka_query_s_words_are_the_spark_options_it_gave() -> None:
    words = option_words_of({"subscribePattern": "orders-.*", "startingOffsetsByTimestamp": "{}"})
    assert words("topic_pattern") == "subscribePattern"
    assert words("topics") == "subscribe"
    assert words("bootstrap_servers") == "kafka.bootstrap.servers"
    assert words("fail_on_data_loss") == "failOnDataLoss"
    assert words("starting_offsets") == "startingOffsetsByTimestamp", "the one the query gave"
    assert words("stopping_offsets") == "endingOffsets"
    assert words("missing_topics") == "option.missing_topics", "no Spark name: how a query sets it"


def test_an_option_given_as_option_dot_name_is_named_so() -> None:
    words = option_words_of({"connector": "kafka", "option.topics": "orders", "option.bootstrap_servers": "k:9092"})
    assert words("topics") == "option.topics" and words("bootstrap_servers") == "option.bootstrap_servers"


def test_a_files_query_s_words() -> None:
    words = option_words_of({"path": "/data/in", "format": "csv"})
    assert (words("path"), words("schema"), words("on_bad_file")) == ("path", "schema", "ignoreCorruptFiles")
    assert words("csv_delimiter") == "sep" and words("missing_path") == "option.missing_path"


def test_messages_and_settings_are_reworded_and_the_rest_of_the_text_is_not() -> None:
    words = option_words_of({"subscribe": "orders"})
    message = f"topics orders ({option_named('topics')}) do not exist: set {option_named('missing_topics', 'wait')}"
    assert in_words_of(message, words) == "topics orders (`subscribe`) do not exist: set `option.missing_topics=wait`"
    error = ConfigError("topics", f"is empty; or set {option_named('topic_pattern')}").in_words_of(words)
    assert str(error) == "invalid setting 'subscribe': is empty; or set `subscribePattern`"


def test_the_words_travel_with_the_query_s_configuration() -> None:
    config = SparkSourceOptions.from_options({"subscribe": "orders", "kafka.bootstrap.servers": "k:9092"})
    assert pickle.loads(pickle.dumps(config)).option_words("topics") == "subscribe"


class Planner:
    option_words = OptionWords.of({"subscribe": "orders"}, "kafka")

    @worded(lambda self: self.option_words)
    def plan(self) -> None:
        raise SourceError(f"partition lost: set {option_named('fail_on_data_loss', 'false')} to read on")


def test_what_leaves_a_worded_method_or_an_executor_s_read_is_in_the_query_s_words() -> None:
    with pytest.raises(SourceError, match="set `failOnDataLoss=false` to read on"):
        Planner().plan()

    def rows() -> Iterator[int]:
        yield 1
        raise ConfigError("poll_timeout_ms", "must be > 0")

    read = worded_reads(rows(), Planner.option_words)
    assert next(read) == 1
    with pytest.raises(ConfigError, match=r"'kafkaConsumer\.pollTimeoutMs'"):
        next(read)


def test_the_query_s_own_options_keep_their_names() -> None:
    words = option_words_of({"subscribe": "orders"})
    assert [words(n) for n in ("parallelism", "kafka.bootstrap.servers", "maxOffsetsPerTrigger")] == [
        "parallelism",
        "kafka.bootstrap.servers",
        "maxOffsetsPerTrigger",
    ]
