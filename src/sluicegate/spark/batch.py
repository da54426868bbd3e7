"""``spark.read.format("sluicegate")``: a one-shot read of a source, with no coordinator.

A batch query reads what the connector's ``batch_splits`` finds when it is planned,
every split from its position to its end, one Spark task per split (more with
``minPartitions``, which cuts large ranges as Spark's Kafka source does for a batch).
There is nothing to hand out and no position to keep, so nothing is written to the
control topics and no coordinator needs to run: Spark's own batch Kafka reads work the
same way. For the kafka connector, Spark's options keep Spark's batch meaning
(``startingOffsets`` from ``earliest``, ``endingOffsets`` to ``latest``;
kafka_options.py).

Executors read with the same code as a micro-batch (``datasource.read_ranges``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from sluicegate.api.errors import ConfigError
from sluicegate.api.ranges import SupportsPositionRanges
from sluicegate.spark.datasource import configure_logging, range_source, read_ranges
from sluicegate.spark.options import SparkSourceOptions
from sluicegate.spark.trigger_limits import PlannedPart, cut_ranges

log = logging.getLogger("sluicegate.spark")


class BatchPartition(InputPartition):
    """One Spark task of a batch query: ranges ``(split wire form, start, end)``."""

    def __init__(self, index: int, ranges: list[tuple[dict[str, Any], int, int]]) -> None:
        super().__init__(index)
        self.ranges = ranges

    def __repr__(self) -> str:
        rows = sum(end - start for _, start, end in self.ranges)
        return f"BatchPartition({self.value}, ranges={len(self.ranges)}, rows={rows})"


def plan_batch(config: SparkSourceOptions) -> list[BatchPartition]:
    """The tasks of a batch query of ``config``'s source, planned now."""
    source = range_source(config.connector, config.connector_options)
    assert isinstance(source, SupportsPositionRanges)
    source.check_inputs(0)  # a topic or path that does not exist is named, not read as empty
    splits = source.batch_splits()
    if splits is None:
        raise ConfigError(
            "connector",
            f"the {config.connector} connector cannot be read by a batch query (spark.read): "
            "read it with spark.readStream",
        )
    parts = [
        PlannedPart(i, ((source.split_codec.to_wire(split), start, end),))
        for i, (split, start, end) in enumerate(_bounded_ranges(source, splits))
        if end > start
    ]
    cut = cut_ranges(parts, config.min_partitions)  # maxRecordsPerPartition: streams only, as in Spark
    log.info(
        "batch read of the %s connector: %d splits, %d rows at most, %d Spark tasks",
        config.connector,
        len(splits),
        sum(end - start for part in parts for _, start, end in part.ranges),
        len(cut),
    )
    return [BatchPartition(i, list(part.ranges)) for i, part in enumerate(cut)]


def _bounded_ranges(source: SupportsPositionRanges[Any], splits: Sequence[Any]) -> Iterator[tuple[Any, int, int]]:
    for split in splits:
        end = source.split_end(split)
        if end is None:
            raise ConfigError("connector", f"batch_splits gave split {split!r} with no end")
        yield split, source.split_position(split), end


class SluicegateBatchReader(DataSourceReader):
    """Plans on the driver (``partitions``), reads on executors (``read``)."""

    def __init__(self, config: SparkSourceOptions) -> None:
        self.config = config

    def partitions(self) -> Sequence[InputPartition]:
        configure_logging()
        for note in self.config.notes:
            log.warning("%s", note)
        return plan_batch(self.config)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, BatchPartition)
        return read_ranges(self.config, partition.ranges)
