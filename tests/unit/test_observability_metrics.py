"""The reader's and the Spark driver's metrics settings and exposition, without processes."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from sluicegate.api.errors import ConfigError
from sluicegate.reader.host import ReaderSettings
from sluicegate.reader.metrics import ReaderMetrics, ReaderSnapshot
from sluicegate.reader.output import OutputSpec
from sluicegate.spark.options import SparkSourceOptions

SNAPSHOT = ReaderSnapshot(
    source="orders",
    subtask=3,
    registered=True,
    splits_owned=2,
    records_read=120,
    records_written=100,
    watermark_ms=5_000,
    idle=False,
    low_watermark_ms=4_000,
    records_to_end={"orders-0": 30, "orders-1": 12},
    splits_finished=1,
    checkpoints=4,
    registrations=1,
    fenced=0,
    dead_letters=2,
)


class View:
    def __init__(self, snapshot: ReaderSnapshot | None) -> None:
        self.snapshot = snapshot

    def metrics_snapshot(self) -> ReaderSnapshot | None:
        return self.snapshot


def exposition(metrics: ReaderMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_reader_series_carry_source_and_subtask_and_per_split_series_are_opt_in() -> None:
    text = exposition(ReaderMetrics(View(SNAPSHOT)))
    labels = '{source="orders",subtask="3"}'
    assert f"sluicegate_reader_splits_owned{labels} 2.0" in text
    assert f"sluicegate_reader_records_read_total{labels} 120.0" in text
    assert f"sluicegate_reader_records_to_end{labels} 42.0" in text
    assert f"sluicegate_reader_dead_letters_total{labels} 2.0" in text
    assert "split=" not in text
    with_splits = exposition(ReaderMetrics(View(SNAPSHOT), split_labels=True))
    assert 'sluicegate_reader_split_records_to_end{source="orders",split="orders-1",subtask="3"} 12.0' in with_splits


def test_before_the_reader_starts_only_the_histogram_family_is_there() -> None:
    metrics = ReaderMetrics(View(None))
    text = exposition(metrics)
    assert "sluicegate_reader_splits_owned" not in text
    metrics.observe_checkpoint("orders", 3, 0.02)
    assert 'sluicegate_reader_checkpoint_seconds_count{source="orders",subtask="3"} 1.0' in exposition(metrics)


def test_a_bad_metrics_port_fails_at_start_naming_the_setting() -> None:
    spec = OutputSpec.parse("jsonl:/tmp/out.jsonl")
    with pytest.raises(ConfigError, match="--metrics-port"):
        ReaderSettings("orders", 0, "sequence", spec, "localhost:9092", metrics_port=70_000)
    base = {"source": "orders", "parallelism": "2", "kafka.bootstrap.servers": "localhost:9092"}
    assert SparkSourceOptions.from_options(base).driver_settings().metrics_port == 0
    assert SparkSourceOptions.from_options({**base, "metricsPort": "9401"}).driver_settings().metrics_port == 9401
    with pytest.raises(ConfigError, match="metricsPort"):
        SparkSourceOptions.from_options({**base, "metricsPort": "70000"})
