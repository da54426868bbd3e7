"""One rule for source and namespace names: every entry point accepts the same names.

Before, the reader host checked namespaces with a rule that allowed capitals and the
coordinator with the source-name rule, so a reader accepted a namespace its
coordinator refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluicegate.api.errors import ConfigError
from sluicegate.coordinator.settings import CoordinatorSettings, SourceSettings
from sluicegate.protocol.topics import topic_specs
from sluicegate.reader.host import ReaderSettings
from sluicegate.reader.output import OutputSpec
from sluicegate.spark.options import SparkSourceOptions

NAMES = st.one_of(
    st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True),
    st.sampled_from(["Prod", "prod", "a.b", "-x", "x y", "", "x" * 101, "ünï"]),
)


def accepted(build: object) -> bool:
    try:
        build()  # type: ignore[operator]
    except ConfigError:
        return False
    return True


def reader(namespace: str = "sluicegate", source: str = "orders") -> ReaderSettings:
    return ReaderSettings(
        source=source,
        subtask=0,
        connector="sequence",
        output=OutputSpec("kafka", "out"),
        bootstrap_servers="127.0.0.1:9092",
        namespace=namespace,
    )


def coordinator(namespace: str = "sluicegate", source: str = "orders") -> CoordinatorSettings:
    return CoordinatorSettings(
        sources=(SourceSettings(source=source, connector="sequence", max_parallelism=2),),
        bootstrap_servers="127.0.0.1:9092",
        namespace=namespace,
    )


def spark(namespace: str = "sluicegate", source: str = "orders") -> SparkSourceOptions:
    return SparkSourceOptions.from_options(
        {"source": source, "namespace": namespace, "parallelism": "2", "kafka.bootstrap.servers": "127.0.0.1:9092"}
    )


@given(NAMES)
def test_a_namespace_is_accepted_by_all_entry_points_or_by_none(name: str) -> None:
    verdicts = {
        "reader": accepted(lambda: reader(namespace=name)),
        "coordinator": accepted(lambda: coordinator(namespace=name)),
        "spark": accepted(lambda: spark(namespace=name)),
        "topics": accepted(lambda: topic_specs(name, "orders", 2)),
    }
    assert len(set(verdicts.values())) == 1, verdicts


@given(NAMES)
def test_a_source_name_is_accepted_by_all_entry_points_or_by_none(name: str) -> None:
    verdicts = {
        "reader": accepted(lambda: reader(source=name)),
        "coordinator": accepted(lambda: coordinator(source=name)),
        "spark": accepted(lambda: spark(source=name)),
        "topics": accepted(lambda: topic_specs("sluicegate", name, 2)),
    }
    assert len(set(verdicts.values())) == 1, verdicts


def test_a_capital_namespace_is_refused_everywhere_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as info:
        reader(namespace="Prod")
    assert info.value.setting == "--namespace"
    with pytest.raises(ConfigError) as info:
        coordinator(namespace="Prod")
    assert info.value.setting == "namespace"
