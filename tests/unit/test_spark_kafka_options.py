"""Spark's Kafka source options read with Spark's meaning (issue 19 items 1-2): a query
from Spark's guide, with format("kafka") replaced by format("sluicegate"), means the same."""

from __future__ import annotations

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.spark.kafka_options import derived_source_name, duration_ms
from sluicegate.spark.options import SparkSourceOptions
from sluicegate_connectors.kafka import KafkaOptions

DATA = "127.0.0.1:9092"


def config(**options: str) -> SparkSourceOptions:
    return SparkSourceOptions.from_options({"kafka.bootstrap.servers": DATA, **options})


def refused(**options: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config(**options)
    return info.value


def kafka_options(c: SparkSourceOptions) -> KafkaOptions:
    """The connector's own reading of the translated options (as executors build it)."""
    return KafkaOptions.parse(c.options)


def test_a_query_from_sparks_guide_reads_its_topic_from_latest_on_one_cluster() -> None:
    c = config(subscribe="orders")
    assert c.connector == "kafka"
    assert c.options == {
        "topics": "orders",
        "bootstrap_servers": DATA,
        "starting_offsets": "latest",
        "partition_discovery_interval_ms": "1000",  # new partitions within a second, as Spark finds them
    }
    assert kafka_options(c).starting.kind == "latest", "Spark's default, never quietly earliest"
    assert c.bootstrap_servers == DATA, "the control cluster is the data cluster"
    assert c.source == "orders" and c.parallelism is None
    assert any("reads a source of its own, orders.query-..." in note for note in c.notes)
    assert not c.source_named


@pytest.mark.parametrize(
    ("spark", "ours"),
    [
        ({"startingOffsets": "earliest"}, {"starting_offsets": "earliest"}),
        ({"startingOffsets": '{"orders": {"0": 23, "1": -2}}'}, {"starting_offsets": '{"orders": {"0": 23, "1": -2}}'}),
        ({"endingOffsets": "latest"}, {"stopping_offsets": "latest", "starting_offsets": "latest"}),
        (
            {"startingTimestamp": "1700000000000"},
            {"starting_offsets": "timestamp:1700000000000", "starting_timestamp_strategy": "error"},
        ),
        (
            {"startingOffsetsByTimestamp": '{"orders": {"0": 5}}', "startingOffsetsByTimestampStrategy": "latest"},
            {"starting_offsets": 'timestamp:{"orders": {"0": 5}}', "starting_timestamp_strategy": "latest"},
        ),
        ({"endingTimestamp": "99"}, {"stopping_offsets": "timestamp:99", "starting_offsets": "latest"}),
        ({"failOnDataLoss": "false"}, {"fail_on_data_loss": "false"}),
        ({"includeHeaders": "true"}, {"include_headers": "true"}),
        ({"kafkaConsumer.pollTimeoutMs": "5000"}, {"poll_timeout_ms": "5000"}),
        ({"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "20"}, {"fetch_offset_retries": "5"}),
    ],
)
def test_each_spark_option_becomes_the_connector_option_of_the_same_meaning(
    spark: dict[str, str], ours: dict[str, str]
) -> None:
    c = config(subscribe="orders", **spark)
    assert ours.items() <= c.options.items(), c.options
    kafka_options(c)  # and the connector takes them


def test_spark_precedence_picks_the_starting_option_and_says_which_was_not_used() -> None:
    c = config(subscribe="orders", startingOffsets="earliest", startingTimestamp="1000")
    assert c.options["starting_offsets"] == "timestamp:1000"
    assert any("startingOffsets is not used: startingTimestamp takes precedence" in n for n in c.notes), c.notes


def test_per_partition_timestamps_reach_the_connector() -> None:
    c = config(subscribe="orders", startingOffsetsByTimestamp='{"orders": {"0": 1000, "1": 2000}}')
    starting = kafka_options(c).starting
    assert starting.kind == "timestamps"
    assert starting.timestamp_of(("orders", 1)) == 2000 and starting.timestamp_of(("orders", 2)) is None


def test_subscribe_pattern_and_assign() -> None:
    pattern = config(subscribePattern="orders-.*")
    assert kafka_options(pattern).matches("orders-eu") and not kafka_options(pattern).matches("refunds")
    assigned = kafka_options(config(assign='{"orders": [0, 2]}'))
    assert assigned.selects("orders", 2) and not assigned.selects("orders", 1)


def test_triggers() -> None:
    c = config(subscribe="orders", maxOffsetsPerTrigger="1000", minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert (c.max_records_per_trigger, c.min_records_per_trigger, c.max_trigger_delay_ms) == (1000, 10, 30_000)
    assert config(subscribe="orders", minPartitions="16").min_partitions == 16
    assert refused(subscribe="orders", maxOffsetsPerTrigger="10", maxRecordsPerTrigger="10").setting == (
        "maxOffsetsPerTrigger"
    )


def test_client_settings_go_to_the_data_cluster_in_librdkafka_names() -> None:
    c = config(
        subscribe="orders",
        **{"kafka.fetch.max.wait.ms": "10", "kafka.max.partition.fetch.bytes": "16777216", "kafka.client.id": "me"},
    )
    assert c.options["kafka.fetch.wait.max.ms"] == "10"
    assert c.options["kafka.max.partition.fetch.bytes"] == "16777216"
    assert kafka_options(c).client_config()["client.id"] == "me"


def test_options_that_make_no_sense_here_are_accepted_and_said_once() -> None:
    c = config(subscribe="orders", groupIdPrefix="mine", **{"kafka.group.id": "g", "kafka.max.poll.records": "20000"})
    said = " ".join(c.notes)
    assert "groupIdPrefix is not used" in said and "kafka.group.id is not used" in said
    assert "kafka.max.poll.records is not used" in said
    assert not any(key.startswith("kafka.group") or "poll.records" in key for key in c.options)


@pytest.mark.parametrize(
    ("options", "setting", "says"),
    [
        ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "startingOffsets"),
        ({"kafka.value.deserializer": "x"}, "kafka.value.deserializer", "binary"),
        ({"subscribePattern": "o.*"}, "subscribePattern", "not subscribe and subscribePattern"),
        ({"option.topics": "orders"}, "subscribe", "option.topics"),
        ({"startingOffsets": "earliest", "option.starting_offsets": "latest"}, "startingOffsets", "keep"),
        ({"endingOffsets": "earliest"}, "endingOffsets", "not an ending offset"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp", "ms since the epoch"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay", "duration"),
        ({"minPartitions": "0"}, "minPartitions", ">= 1"),
        ({"startingOffset": "earliest"}, "startingoffset", "did you mean 'startingOffsets'"),
        ({"kafka.sasl.mechanism": "PLAIN"}, "kafka.sasl.mechanism", "kafka.security.protocol"),
        # errors name the options the user wrote (issue 54), as Spark's do
        ({"endingOffsets": '{"orders": {"0": -2}}'}, "endingOffsets", "earliest (-2)"),
        (
            {"startingOffsets": '{"orders": {"0": 1, "1": 2}}', "endingOffsets": '{"orders": {"0": 5}}'},
            "endingOffsets",
            "orders-1 in one only",
        ),
    ],
)
def test_a_spark_option_that_cannot_mean_what_it_says_fails_naming_it(
    options: dict[str, str], setting: str, says: str
) -> None:
    error = refused(subscribe="orders", **options)
    assert error.setting == setting, error
    assert says in str(error), error


def test_a_java_client_setting_librdkafka_has_no_equivalent_for_is_noted_once_and_not_passed_on() -> None:
    c = config(subscribe="orders", **{"kafka.default.api.timeout.ms": "1000", "kafka.fetch.max.wait.ms": "10"})
    options = kafka_options(c)  # librdkafka would refuse it: it is not handed on
    assert "kafka.default.api.timeout.ms" not in c.options and c.options["kafka.fetch.wait.max.ms"] == "10"
    assert ("fetch.wait.max.ms", "10") in options.client_settings
    [note] = [n for n in c.notes if "default.api.timeout.ms" in n]
    assert "is not used: a setting of Spark's Java consumer that librdkafka has no equivalent for" in note


def test_a_client_setting_neither_client_knows_fails_naming_it() -> None:
    c = config(subscribe="orders", **{"kafka.fetch.max.wiat.ms": "10"})
    with pytest.raises(ConfigError) as info:
        kafka_options(c)
    assert info.value.setting == "kafka.fetch.max.wiat.ms"


def test_security_settings_reach_the_data_clients_but_not_the_source_definition() -> None:
    c = config(
        subscribe="orders",
        **{
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="reader" password="s3cret";',
        },
    )
    client = kafka_options(c).client_config()
    assert client["security.protocol"] == "sasl_plaintext" and client["sasl.username"] == "reader"
    assert client["sasl.password"] == "s3cret"
    assert c.security.sasl_username == "reader", "the control cluster (the same one) too"
    definition = c.with_parallelism(2).driver_settings().definition
    assert definition is not None
    assert not any(key.startswith("kafka.") for key in definition.options), definition
    assert "s3cret" not in repr(definition)


def test_queries_written_before_sparks_names_keep_their_meaning_and_are_told_the_new_names() -> None:
    c = config(
        source="orders",
        parallelism="2",
        connector="kafka",
        **{"option.topics": "orders", "option.bootstrap_servers": "10.0.0.2:9092", "option.kafka.client.id": "me"},
    )
    assert c.bootstrap_servers == DATA, "kafka.bootstrap.servers stays the control cluster here"
    assert c.options["bootstrap_servers"] == "10.0.0.2:9092"
    assert kafka_options(c).starting.kind == "earliest", "their start does not change under them"
    said = " ".join(c.notes)
    assert "option.topics is deprecated" in said and "write subscribe" in said
    assert "write kafka.bootstrap.servers" in said and "option.kafka.client.id is deprecated" in said


def test_a_separate_control_cluster() -> None:
    c = config(subscribe="orders", controlBootstrapServers="10.0.0.9:9092")
    assert c.bootstrap_servers == "10.0.0.9:9092" and c.options["bootstrap_servers"] == DATA


def test_derived_source_names_are_valid_and_stable() -> None:
    assert derived_source_name({"topics": "refunds,orders"}) == "orders-refunds"
    upper = derived_source_name({"topics": "Orders"})
    assert upper.startswith("kafka-topics-") and upper == derived_source_name({"topics": "Orders"})
    assert derived_source_name({"topic_pattern": "a.*"}) != derived_source_name({"topic_pattern": "b.*"})
    assert derived_source_name({"assign": '{"a": [0]}'}).startswith("kafka-assign-")
    assert config(subscribe="orders", source="mine").source == "mine"


@pytest.mark.parametrize(
    ("text", "ms"), [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("250", 250), ("1h", 3_600_000)]
)
def test_spark_durations(text: str, ms: int) -> None:
    assert duration_ms("maxTriggerDelay", text) == ms


def batch(**options: str) -> SparkSourceOptions:
    return SparkSourceOptions.from_options({"kafka.bootstrap.servers": DATA, **options}, batch=True)


def test_a_batch_query_reads_from_earliest_to_latest_unless_told_otherwise() -> None:
    c = batch(subscribe="orders")
    assert c.options == {
        "topics": "orders",
        "bootstrap_servers": DATA,
        "starting_offsets": "earliest",
        "stopping_offsets": "latest",
    }
    ranged = batch(subscribe="orders", startingOffsets='{"orders": {"0": 5}}', endingOffsets='{"orders": {"0": 9}}')
    assert ranged.options["starting_offsets"] == '{"orders": {"0": 5}}'
    assert ranged.options["stopping_offsets"] == '{"orders": {"0": 9}}'
    assert batch(subscribe="orders", endingTimestamp="1700000000000").options["stopping_offsets"] == (
        "timestamp:1700000000000"
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"startingOffsets": '{"orders": {"0": -1}}'}, "startingOffsets"),
        ({"endingOffsets": '{"orders": {"0": -2}}'}, "endingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
    ],
)
def test_a_batch_query_refuses_what_sparks_batch_read_refuses(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        batch(subscribe="orders", **options)
    assert info.value.setting == named


def test_a_batch_query_says_which_stream_options_it_does_not_use() -> None:
    c = batch(subscribe="orders", maxOffsetsPerTrigger="10", parallelism="4", alignmentMaxDriftMs="1000")
    notes = "\n".join(c.notes)
    for name in ("maxOffsetsPerTrigger", "parallelism", "alignmentMaxDriftMs"):
        assert f"option {name} is not used by a batch query" in notes
    assert "source name not given" not in notes, "a batch query touches no control topic"


def test_the_query_coordinates_its_source_itself_unless_told_otherwise() -> None:
    from sluicegate.coordinator.embedded import CoordinatorMode

    assert config(subscribe="orders").coordinator is CoordinatorMode.AUTO
    assert config(subscribe="orders", coordinator="External").coordinator is CoordinatorMode.EXTERNAL
    with pytest.raises(ConfigError) as info:
        config(subscribe="orders", coordinator="deployed")
    assert info.value.setting == "coordinator" and "auto, embedded or external" in info.value.problem
    coordinator = config(subscribe="orders", parallelism="6").embedded_coordinator()
    assert coordinator.new_source_parallelism == 6 and coordinator.source == "orders"


def test_read_committed_as_a_spark_query_asks_for_it_is_accepted_and_read_uncommitted_refused() -> None:
    c = config(subscribe="orders", **{"kafka.isolation.level": "read_committed"})
    assert kafka_options(c).consumer_config()["isolation.level"] == "read_committed"
    with pytest.raises(ConfigError) as info:
        kafka_options(config(subscribe="orders", **{"kafka.isolation.level": "read_uncommitted"}))
    assert info.value.setting == "kafka.isolation.level" and "read_committed" in info.value.problem


def test_a_minimum_per_trigger_above_the_maximum_is_refused_as_spark_refuses_it() -> None:
    error = refused(subscribe="orders", minOffsetsPerTrigger="30", maxOffsetsPerTrigger="20")
    assert error.setting == "minOffsetsPerTrigger" and "higher than maxOffsetsPerTrigger (20)" in str(error)
    accepted = config(subscribe="orders", minOffsetsPerTrigger="20", maxOffsetsPerTrigger="20")
    assert accepted.min_records_per_trigger == accepted.max_records_per_trigger == 20


@pytest.mark.parametrize("subscribe", ["", " , "])
def test_an_empty_subscription_is_named_as_the_user_wrote_it(subscribe: str) -> None:
    with pytest.raises(ConfigError) as info:
        SparkSourceOptions.from_options({"kafka.bootstrap.servers": DATA, "subscribe": subscribe})
    assert info.value.setting == "subscribe" and "names nothing to read" in str(info.value)


def test_a_query_with_nothing_to_read_is_told_what_spark_would_ask_for() -> None:
    with pytest.raises(ConfigError) as info:
        SparkSourceOptions.from_options({"kafka.bootstrap.servers": DATA})
    assert info.value.setting == "subscribe" and "subscribePattern or assign" in str(info.value)


def test_max_records_per_partition_is_read_with_sparks_meaning() -> None:
    c = config(subscribe="orders", maxRecordsPerPartition="1000", minPartitions="4")
    assert (c.max_records_per_partition, c.min_partitions) == (1000, 4)
    assert refused(subscribe="orders", maxRecordsPerPartition="0").setting == "maxRecordsPerPartition"


def test_a_misspelled_max_records_per_partition_fails_naming_the_option_it_meant() -> None:
    error = refused(subscribe="orders", maxRecordPerPartition="1000")
    assert error.setting == "maxrecordperpartition"
    assert "did you mean 'maxRecordsPerPartition'" in str(error), error
