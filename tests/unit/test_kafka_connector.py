"""The ``kafka`` connector without Kafka: options, and the enumerator driven by the
coordinator core (CoreHarness) over an in-memory data cluster. Discovery calls are
fired by hand, as the host would run them off the loop."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from core_harness import CoreHarness, body

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate.coordinator.core import AsyncCall, Effects
from sluicegate.protocol.messages import AddSplits, CoordinatorSourceEvent, NoMoreSplits
from sluicegate_connectors.kafka import KafkaOptions, KafkaSource
from sluicegate_connectors.kafka.cluster import DataCluster, DataClusterError, TopicPartitionKey
from sluicegate_connectors.kafka.enumerator import RETRY_MS
from sluicegate_connectors.kafka.split import KafkaPartitionSplit, partition_owner_key

BOOTSTRAP = "127.0.0.1:1"


class MemoryCluster(DataCluster):  # DataCluster is Any to mypy here
    """Partitions with [earliest, latest) offsets and record timestamps, in memory."""

    def __init__(self, options: KafkaOptions) -> None:
        super().__init__(options)
        self.logs: dict[TopicPartitionKey, tuple[int, int]] = {}
        self.timestamps: dict[TopicPartitionKey, list[tuple[int, int]]] = {}
        self.down = False

    def add(self, topic: str, partitions: int, earliest: int = 0, latest: int = 100) -> None:
        for p in range(partitions):
            self.logs[(topic, p)] = (earliest, latest)

    def partitions(self) -> dict[str, int]:
        if self.down:
            raise DataClusterError(f"listing topics on the data cluster at {BOOTSTRAP} failed: down")
        counts: Counter[str] = Counter(t for t, _ in self.logs if self.options.matches(t))
        return dict(counts)

    def existing(self, partitions: Any) -> set[TopicPartitionKey]:
        if self.down:
            raise DataClusterError(f"listing topics on the data cluster at {BOOTSTRAP} failed: down")
        return {key for key in partitions if key in self.logs}

    def offsets(self, partitions: Any, spec: str | int) -> dict[TopicPartitionKey, int]:
        out = {}
        for key in partitions:
            if key not in self.logs:
                raise DataClusterError(f"listing offsets on the data cluster at {BOOTSTRAP} failed: unknown partition")
            earliest, latest = self.logs[key]
            if spec == "earliest":
                out[key] = earliest
            elif spec == "latest":
                out[key] = latest
            else:
                stamps = [o for o, ts in self.timestamps.get(key, []) if ts >= int(spec)]
                out[key] = min(stamps) if stamps else latest
        return out

    def first_offsets_at(self, partitions: Any, timestamp_ms: int) -> dict[TopicPartitionKey, int | None]:
        return {
            key: min((o for o, ts in self.timestamps.get(key, []) if ts >= timestamp_ms), default=None)
            for key in partitions
        }


def kafka_source(clusters: list[MemoryCluster], **options: str) -> KafkaSource:
    opts = {"topics": "orders", "bootstrap_servers": BOOTSTRAP, "assignment_grace_ms": "0", **options}

    def cluster(o: KafkaOptions) -> MemoryCluster:
        # one cluster for the whole test: a restored enumerator sees the same one
        if not clusters:
            clusters.append(MemoryCluster(o))
        return clusters[0]

    return KafkaSource(KafkaOptions.parse(opts), cluster=cluster)


class KafkaHarness(CoreHarness):
    """Remembers the discovery calls the enumerator asked for and has not had run yet."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.discoveries: list[AsyncCall] = []
        super().__init__(*args, **kwargs)

    def _collect(self, effects: Effects) -> Effects:
        self.discoveries += [c for c in effects.async_calls if c.fn.__name__ == "_discover"]
        return super()._collect(effects)


def discovery_call(h: CoreHarness) -> AsyncCall:
    """The one discovery the enumerator has scheduled (it keeps one in flight)."""
    assert isinstance(h, KafkaHarness)
    assert len(h.discoveries) == 1, h.discoveries
    return h.discoveries.pop()


def fire(h: CoreHarness, call: AsyncCall) -> None:
    try:
        result, error = call.fn(), None
    except Exception as exc:
        result, error = None, exc
    h._collect(h.core.on_async_result(call.call_id, result, error, h.now_ms))


def assigned(h: CoreHarness) -> dict[str, tuple[int, int]]:
    """split id -> (subtask, position) of every AddSplits."""
    return {s["split_id"]: (e.subtask, s["position"]) for e in h.of_type(AddSplits) for s in body(e, AddSplits).splits}


# -- options ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"topics": "a", "colour": "red"}, "colour"),
        ({"topics": "a", "topic_pattern": "a.*"}, "topics"),
        ({}, "topics"),
        ({"topic_pattern": "(unclosed"}, "topic_pattern"),
        ({"topics": "a", "starting_offsets": "yesterday"}, "starting_offsets"),
        ({"topics": "a", "starting_offsets": "timestamp:soon"}, "starting_offsets"),
        ({"topics": "a", "starting_offsets": '{"a": {"0": -3}}'}, "starting_offsets"),
        ({"topics": "a", "starting_offsets": '{"a": [1]}'}, "starting_offsets"),
        ({"topics": "a", "stopping_offsets": "earliest"}, "stopping_offsets"),
        ({"topics": "a", "partition_discovery_interval_ms": "-1"}, "partition_discovery_interval_ms"),
        ({"topics": "a", "fail_on_data_loss": "maybe"}, "fail_on_data_loss"),
        ({"topics": "a", "kafka.group.id": "mine"}, "kafka.group.id"),
        ({"topics": "a", "kafka.isolation.level": "read_uncommitted"}, "kafka.isolation.level"),
        ({"topics": "a", "assigner": "lottery"}, "assigner"),
        ({"topics": "a", "kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({"topics": "a", "kafka.security.protocol": "carrier-pigeon"}, "kafka.security.protocol"),
        ({"topics": "a", "assignment_grace_ms": "soon"}, "assignment_grace_ms"),
        ({"topics": "a", "include_headers": "sometimes"}, "include_headers"),
        ({"topics": "a", "read_path": "jvm"}, "read_path"),
        ({"topics": "a", "assign": '{"a": [0]}'}, "topics"),
        ({"assign": '{"a": 0}'}, "assign"),
        ({"assign": '{"a": [-1]}'}, "assign"),
        ({"assign": "a-0"}, "assign"),
        ({"topics": "a", "starting_offsets": 'timestamp:{"a": {"0": -5}}'}, "starting_offsets"),
        ({"topics": "a", "stopping_offsets": "timestamp:{nope"}, "stopping_offsets"),
        ({"topics": "a", "starting_timestamp_strategy": "earliest"}, "starting_timestamp_strategy"),
        ({"topics": "a", "commit_offsets_to_group": " "}, "commit_offsets_to_group"),
    ],
)
def test_a_bad_option_fails_naming_it(options: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        KafkaOptions.parse({"bootstrap_servers": BOOTSTRAP, **options})
    assert info.value.setting == setting


def test_a_misspelled_lag_group_option_fails_naming_the_known_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'commit_offsets_to_group'"):
        KafkaOptions.parse({"bootstrap_servers": BOOTSTRAP, "topics": "a", "commit_offset_to_group": "g"})
    with pytest.raises(ConfigError, match="commit_offsets_to_group=GROUP"):  # the connector owns group.id
        KafkaOptions.parse({"bootstrap_servers": BOOTSTRAP, "topics": "a", "kafka.group.id": "g"})
    assert (
        KafkaOptions.parse({"bootstrap_servers": BOOTSTRAP, "topics": "a", "commit_offsets_to_group": "g"}).commit_group
        == "g"
    )


def test_rows_have_a_headers_column_only_with_include_headers_and_it_is_not_part_of_the_definition() -> None:
    from sluicegate.protocol.definition import SourceDefinition

    plain = KafkaSource.from_options({"topics": "a", "bootstrap_servers": BOOTSTRAP})
    with_headers = KafkaSource.from_options({"topics": "a", "bootstrap_servers": BOOTSTRAP, "include_headers": "true"})
    assert "headers" not in plain.arrow_schema().names  # Spark's includeHeaders=false
    assert with_headers.arrow_schema().names[-1] == "headers"
    assert plain.arrow_schema().names == with_headers.arrow_schema().names[:-1]
    # one query may ask for headers and another not, on one source
    definitions = [
        SourceDefinition.of("kafka", {"topics": "a", "include_headers": flag}, KafkaSource)
        for flag in ("true", "false")
    ]
    assert definitions[0] == definitions[1]


def test_without_bootstrap_servers_the_environment_is_used_or_the_option_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(ConfigError) as info:
        KafkaOptions.parse({"topics": "a"})
    assert info.value.setting == "bootstrap_servers"
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "10.0.0.1:9092")
    assert KafkaOptions.parse({"topics": "a"}).bootstrap_servers == "10.0.0.1:9092"


def test_client_settings_pass_through_and_the_connector_owns_exactly_once_settings() -> None:
    secured = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}
    options = KafkaOptions.parse(
        {"topics": "a, b", "bootstrap_servers": BOOTSTRAP, **{f"kafka.{k}": v for k, v in secured.items()}}
    )
    assert options.topics == ("a", "b")
    config = options.consumer_config()
    assert config["security.protocol"] == "SASL_SSL"
    assert config["isolation.level"] == "read_committed"
    assert config["enable.auto.commit"] is False
    assert config["bootstrap.servers"] == BOOTSTRAP


def test_a_topic_pattern_matches_whole_names_and_never_internal_topics() -> None:
    options = KafkaOptions.parse({"topic_pattern": "orders.*", "bootstrap_servers": BOOTSTRAP})
    assert options.matches("orders-eu")
    assert not options.matches("all-orders")
    assert not KafkaOptions.parse({"topic_pattern": ".*", "bootstrap_servers": BOOTSTRAP}).matches("__consumer_offsets")


# -- enumerator -------------------------------------------------------------------------


def started(source: KafkaSource, clusters: list[MemoryCluster], parallelism: int = 4, **kw: Any) -> CoreHarness:
    h = KafkaHarness(source, max_parallelism=parallelism, start=False, **kw)
    h.start()
    return h


def test_partitions_go_to_their_sticky_owner_at_their_starting_offsets() -> None:
    clusters: list[MemoryCluster] = []
    source = kafka_source(clusters, starting_offsets="latest")
    h = started(source, clusters)
    clusters[0].add("orders", 8, earliest=5, latest=40)
    first = discovery_call(h)
    for s in range(4):
        h.register(s)
    fire(h, first)
    got = assigned(h)
    assert len(got) == 8
    for p in range(8):
        owner = partition_owner_key(KafkaPartitionSplit("orders", p, 0)) % 4
        assert got[f"orders-{p}"] == (owner, 40)
    assert Counter(s for s, _ in got.values()) == Counter({0: 2, 1: 2, 2: 2, 3: 2}), "consecutive owners"


def test_starting_offsets_by_timestamp_and_by_json_map() -> None:
    clusters: list[MemoryCluster] = []
    h = started(kafka_source(clusters, starting_offsets="timestamp:1500"), clusters, parallelism=1)
    clusters[0].add("orders", 2, earliest=0, latest=10)
    clusters[0].timestamps[("orders", 0)] = [(i, 1000 + 100 * i) for i in range(10)]
    h.register(0)
    fire(h, discovery_call(h))
    assert assigned(h) == {"orders-0": (0, 5), "orders-1": (0, 10)}, "no record at/after the time: its end"

    clusters = []
    h = started(kafka_source(clusters, starting_offsets='{"orders": {"0": 7, "1": -1}}'), clusters, parallelism=1)
    clusters[0].add("orders", 3, earliest=2, latest=30)
    h.register(0)
    fire(h, discovery_call(h))
    assert assigned(h) == {"orders-0": (0, 7), "orders-1": (0, 30), "orders-2": (0, 2)}


def test_timestamps_per_partition_start_and_stop_each_partition_at_its_own_time() -> None:
    clusters: list[MemoryCluster] = []
    source = kafka_source(
        clusters,
        starting_offsets='timestamp:{"orders": {"0": 1200, "1": 1500}}',
        stopping_offsets='timestamp:{"orders": {"0": 1700}}',
    )
    h = started(source, clusters, parallelism=1)
    clusters[0].add("orders", 3, earliest=0, latest=10)
    for p in range(3):
        clusters[0].timestamps[("orders", p)] = [(i, 1000 + 100 * i) for i in range(10)]
    h.register(0)
    fire(h, discovery_call(h))
    splits = {
        s["split_id"]: (s["position"], s["stop"]) for e in h.of_type(AddSplits) for s in body(e, AddSplits).splits
    }
    # unlisted partitions: from the earliest offset, to the end seen at start
    assert splits == {"orders-0": (2, 7), "orders-1": (5, 10), "orders-2": (0, 10)}


def test_assign_reads_exactly_the_assigned_partitions() -> None:
    clusters: list[MemoryCluster] = []
    source = kafka_source(clusters, topics="", assign='{"orders": [1, 3, 9], "refunds": [0]}')
    assert source.options.topics == ("orders", "refunds")
    h = started(source, clusters, parallelism=1)
    clusters[0].add("orders", 4)
    clusters[0].add("refunds", 2)
    h.register(0)
    fire(h, discovery_call(h))
    assert sorted(assigned(h)) == ["orders-1", "orders-3", "refunds-0"], "orders-9 does not exist: not read"


def test_a_starting_timestamp_with_no_record_after_it_fails_the_first_start_under_strategy_error() -> None:
    clusters: list[MemoryCluster] = []
    src = kafka_source(clusters, starting_offsets="timestamp:1500", starting_timestamp_strategy="error")
    clusters.append(MemoryCluster(src.options))
    clusters[0].add("orders", 2)
    clusters[0].timestamps[("orders", 0)] = [(i, 1000 + 100 * i) for i in range(10)]
    clusters[0].timestamps[("orders", 1)] = [(i, 1000 + 10 * i) for i in range(10)]
    with pytest.raises(SourceError) as failed:
        src.check_inputs(wait_s=0.0)
    said = str(failed.value)
    assert "orders-1 (timestamp 1500)" in said and "orders-0" not in said, said
    assert "startingOffsetsByTimestampStrategy" in said and "latest" in said
    kafka_source(clusters, starting_offsets="timestamp:1500").check_inputs(wait_s=0.0)  # latest: its end, no error


def test_partitions_added_later_start_at_their_earliest_offset() -> None:
    clusters: list[MemoryCluster] = []
    h = started(kafka_source(clusters, starting_offsets="latest", partition_discovery_interval_ms="1000"), clusters, 2)
    clusters[0].add("orders", 2, earliest=0, latest=50)
    h.register(0)
    h.register(1)
    fire(h, discovery_call(h))
    again = discovery_call(h)
    assert again.initial_delay_ms == 1000
    clusters[0].logs[("orders", 2)] = (3, 9)
    fire(h, again)
    assert assigned(h)["orders-2"][1] == 3
    assert sorted(assigned(h)) == ["orders-0", "orders-1", "orders-2"]


def test_bounded_partitions_stop_at_the_offsets_seen_at_start_then_no_more_splits() -> None:
    clusters: list[MemoryCluster] = []
    h = started(kafka_source(clusters, stopping_offsets="latest"), clusters, parallelism=2)
    clusters[0].add("orders", 3, earliest=0, latest=20)
    clusters[0].logs[("orders", 2)] = (4, 4)  # empty: already at its stop offset
    h.register(0)
    h.register(1)
    fire(h, discovery_call(h))
    splits = {s["split_id"]: s for e in h.of_type(AddSplits) for s in body(e, AddSplits).splits}
    assert sorted(splits) == ["orders-0", "orders-1"], "an empty bounded partition is never assigned"
    assert {s["stop"] for s in splits.values()} == {20}
    assert isinstance(h, KafkaHarness) and h.discoveries == [], "bounded: no periodic discovery"
    assert not h.of_type(NoMoreSplits)
    for s in (0, 1):
        h.ack(s)
        h.finish(s)
        h.request_split(s)  # a reader host asks for more once it runs dry
    assert {e.subtask for e in h.of_type(NoMoreSplits)} == {0, 1}


def test_a_failed_discovery_is_retried_and_crashes_nothing() -> None:
    clusters: list[MemoryCluster] = []
    h = started(kafka_source(clusters), clusters, parallelism=1)
    clusters[0].add("orders", 1)
    clusters[0].down = True
    h.register(0)
    fire(h, discovery_call(h))
    retry = discovery_call(h)
    assert retry.initial_delay_ms == RETRY_MS
    assert h.counters["discovery_failures"] == 1
    clusters[0].down = False
    fire(h, retry)
    assert list(assigned(h)) == ["orders-0"]


def test_a_partition_missing_from_two_discoveries_is_dropped_and_its_readers_told() -> None:
    clusters: list[MemoryCluster] = []
    h = started(kafka_source(clusters, topic_pattern="orders.*", topics=""), clusters, parallelism=1)
    clusters[0].add("orders-a", 1)
    clusters[0].add("orders-b", 1)
    h.register(0)
    fire(h, discovery_call(h))
    assert sorted(assigned(h)) == ["orders-a-0", "orders-b-0"]
    del clusters[0].logs[("orders-b", 0)]
    fire(h, discovery_call(h))
    assert not h.of_type(CoordinatorSourceEvent), "one missing discovery may be a metadata hiccup"
    fire(h, discovery_call(h))
    events = [body(e, CoordinatorSourceEvent).payload for e in h.of_type(CoordinatorSourceEvent)]
    assert events == [{"type": "partitions_removed", "split_ids": ["orders-b-0"]}]


def test_a_successor_coordinator_does_not_rediscover_known_partitions() -> None:
    clusters: list[MemoryCluster] = []
    h = started(kafka_source(clusters, partition_discovery_interval_ms="1000"), clusters, parallelism=2)
    clusters[0].add("orders", 4)
    h.register(0)
    fire(h, discovery_call(h))  # subtask 1 is not there: with grace 0 all go to subtask 0
    h.ack(0)
    h.finish(0, ["orders-0"])
    assert isinstance(h, KafkaHarness)
    h.discoveries.clear()  # the old coordinator's call dies with it
    h.restart_coordinator()
    fire(h, discovery_call(h))
    counts = Counter(s["split_id"] for e in h.of_type(AddSplits) for s in body(e, AddSplits).splits)
    assert counts == Counter({f"orders-{p}": 1 for p in range(4)}), "nothing assigned twice, the finished one not again"


def test_the_sticky_owner_waits_for_its_reader_within_the_grace_delay() -> None:
    clusters: list[MemoryCluster] = []
    h = started(kafka_source(clusters, assignment_grace_ms="60000"), clusters, parallelism=2)
    clusters[0].add("orders", 2)
    h.register(0)
    fire(h, discovery_call(h))
    owner = {p: partition_owner_key(KafkaPartitionSplit("orders", p, 0)) % 2 for p in range(2)}
    waiting = [p for p in range(2) if owner[p] == 1]
    assert sorted(assigned(h)) == sorted(f"orders-{p}" for p in range(2) if owner[p] == 0)
    h.register(1)
    assert {sid for sid, (s, _) in assigned(h).items() if s == 1} == {f"orders-{p}" for p in waiting}


# -- inputs checked where a coordinator starts (issue 24 item 2) ----------------------


def test_a_topic_that_does_not_exist_fails_the_start_naming_it_and_the_way_to_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sluicegate_connectors.kafka.source.CHECK_INTERVAL_S", 0.01)
    clusters: list[MemoryCluster] = []
    src = kafka_source(clusters, topics="orders,ordres")
    clusters.append(MemoryCluster(src.options))
    clusters[0].add("orders", 2)
    with pytest.raises(SourceError) as failed:
        src.check_inputs(wait_s=0.05)
    said = str(failed.value)
    assert "topic ordres (`topics`) does not exist on 127.0.0.1:1" in said, said
    assert "orders," not in said  # the one that exists is not named
    assert "`missing_topics=wait`" in said
    clusters[0].add("ordres", 1)  # created meanwhile: the start goes on
    src.check_inputs(wait_s=0.05)


def test_with_missing_topics_wait_or_a_pattern_only_the_cluster_is_checked() -> None:
    for options in ({"topics": "later", "missing_topics": "wait"}, {"topics": "", "topic_pattern": "later-.*"}):
        clusters: list[MemoryCluster] = []
        src = kafka_source(clusters, **options)
        src.check_inputs(wait_s=0.0)  # no topic yet: fine
        clusters[0].down = True
        with pytest.raises(SourceError, match="check `bootstrap_servers`"):
            src.check_inputs(wait_s=0.0)
    with pytest.raises(ConfigError) as info:
        KafkaOptions.parse({"topics": "a", "bootstrap_servers": BOOTSTRAP, "missing_topics": "maybe"})
    assert info.value.setting == "missing_topics"


def test_a_data_cluster_that_never_answers_fails_the_start_naming_bootstrap_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sluicegate_connectors.kafka.source.CHECK_INTERVAL_S", 0.01)
    clusters: list[MemoryCluster] = []
    src = kafka_source(clusters)
    clusters.append(MemoryCluster(src.options))
    clusters[0].down = True
    with pytest.raises(SourceError) as failed:
        src.check_inputs(wait_s=0.05)
    assert "failed: down" in str(failed.value) and "check `bootstrap_servers`" in str(failed.value)


def test_a_batch_read_takes_every_partition_from_its_start_to_its_stop_as_the_first_discovery_does() -> None:
    clusters: list[MemoryCluster] = []
    source = kafka_source(
        clusters, starting_offsets='{"orders": {"0": 7, "1": -1}}', stopping_offsets='{"orders": {"2": 20}}'
    )
    clusters.append(MemoryCluster(source.options))
    clusters[0].add("orders", 3, earliest=2, latest=30)
    splits = source.batch_splits()
    assert [(s.split_id, s.position, s.stop) for s in splits] == [
        ("orders-0", 7, 30),
        ("orders-1", 30, 30),
        ("orders-2", 2, 20),
    ]


def test_a_batch_read_s_ends_are_resolved_again_where_they_move_and_stand_where_given() -> None:
    clusters: list[MemoryCluster] = []
    source = kafka_source(clusters, stopping_offsets='{"orders": {"0": 20, "1": -1}}')
    clusters.append(MemoryCluster(source.options))
    clusters[0].add("orders", 3, earliest=0, latest=30)
    splits = source.batch_splits()
    clusters[0].add("orders", 3, earliest=0, latest=45)  # records written since the plan
    assert source.batch_ends_now(splits) == [20, 45, 45]  # a given offset stands; -1 and unlisted: latest


def test_a_batch_read_needs_an_end_and_refuses_a_start_past_it() -> None:
    with pytest.raises(ConfigError, match="stopping_offsets"):
        kafka_source([]).batch_splits()
    clusters: list[MemoryCluster] = []
    source = kafka_source(clusters, starting_offsets='{"orders": {"1": 50}}', stopping_offsets="latest")
    clusters.append(MemoryCluster(source.options))
    clusters[0].add("orders", 2, earliest=0, latest=30)
    with pytest.raises(SourceError, match=r"orders-1 \(50 > 30\)"):
        source.batch_splits()


def test_planning_names_the_partitions_of_new_topics_and_added_partitions_until_splits_cover_them() -> None:
    clusters: list[MemoryCluster] = []
    source = kafka_source(clusters, topics="", topic_pattern="orders.*", partition_discovery_interval_ms="1000")
    clusters.append(MemoryCluster(source.options))
    clusters[0].add("orders", 1)
    clusters[0].add("other", 1)  # not the pattern's
    orders = KafkaPartitionSplit("orders", 0, 0)
    source.prepare_planning([orders])
    assert list(source.inputs_to_come()) == []
    clusters[0].add("orders-eu", 2)  # a topic created for the pattern
    clusters[0].add("orders", 2)  # a partition added
    source.prepare_planning([orders])
    assert list(source.inputs_to_come()) == ["orders-1", "orders-eu-0", "orders-eu-1"]
    covered = [orders, KafkaPartitionSplit("orders", 1, 0), *(KafkaPartitionSplit("orders-eu", p, 0) for p in (0, 1))]
    source.prepare_planning(covered)
    assert list(source.inputs_to_come()) == []


@pytest.mark.parametrize(
    "options",
    [
        {"stopping_offsets": "latest"},  # bounded: discovers once
        {"partition_discovery_interval_ms": "0"},  # discovery off
        {"topics": "", "assign": '{"orders": [0]}'},  # the partitions given
    ],
)
def test_planning_awaits_no_new_partition_where_discovery_finds_none(options: dict[str, str]) -> None:
    clusters: list[MemoryCluster] = []
    source = kafka_source(clusters, **options)
    clusters.append(MemoryCluster(source.options))
    clusters[0].add("orders", 3)
    source.prepare_planning([KafkaPartitionSplit("orders", 0, 0)])
    assert list(source.inputs_to_come()) == []


def test_planning_finds_a_deleted_partition_gone_and_reads_the_others_on() -> None:
    clusters: list[MemoryCluster] = []
    source = kafka_source(clusters, topics="orders,refunds")
    clusters.append(MemoryCluster(source.options))
    clusters[0].add("orders", 1, latest=30)
    clusters[0].add("refunds", 1, latest=20)
    orders, refunds = KafkaPartitionSplit("orders", 0, 5), KafkaPartitionSplit("refunds", 0, 5)
    source.prepare_planning([orders, refunds])
    assert [source.available_end(s, 1_000) for s in (orders, refunds)] == [30, 20]
    del clusters[0].logs[("refunds", 0)]  # the topic deleted
    clusters[0].add("orders", 1, latest=40)
    source.prepare_planning([orders, refunds])
    assert source.available_end(orders, 2_000) == 40
    with pytest.raises(SourceError, match="refunds-0 is gone from the data cluster"):
        source.available_end(refunds, 2_000)
    clusters[0].down = True  # a cluster that does not answer is no loss: planning fails as before
    del clusters[0].logs[("orders", 0)]
    with pytest.raises(DataClusterError):
        source.prepare_planning([orders])
