"""``spark.read.format("sluicegate")``: a one-shot read of a source, with no coordinator.

A batch query reads what the connector's ``batch_splits`` finds when it is planned,
every split from its position to its end, one Spark task per split (more with
``minPartitions``, which cuts large ranges as Spark's Kafka source does for a batch).
There is nothing to hand out and no position to keep, so nothing is written to the
control topics and no coordinator needs to run: Spark's own batch Kafka reads work the
same way. For the kafka connector, Spark's options keep Spark's batch meaning
(``startingOffsets`` from ``earliest``, ``endingOffsets`` to ``latest``;
kafka_options.py).

Spark plans a DataFrame once and runs the same tasks for each action on it, where its
own Kafka source plans every action anew. So a task reads each split's last range to
where the split ends when the task runs (``SupportsPositionRanges.batch_ends_now``): a
DataFrame of the kafka connector collected again reads what arrived since, as through
Spark's source. Splits empty when planned are kept, spread over the tasks, for the same
reason. (The partitions stay those found when planned: Spark's source would also read a
partition added since.)

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
from sluicegate.spark.option_words import worded, worded_reads
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
    planned = [(source.split_codec.to_wire(split), start, end) for split, start, end in _bounded_ranges(source, splits)]
    parts = [PlannedPart(i, (piece,)) for i, piece in enumerate(planned) if piece[2] > piece[1]]
    cut = cut_ranges(parts, config.min_partitions)  # maxRecordsPerPartition: streams only, as in Spark
    log.info(
        "batch read of the %s connector: %d splits, %d rows at most, %d Spark tasks",
        config.connector,
        len(splits),
        sum(end - start for part in parts for _, start, end in part.ranges),
        len(cut),
    )
    tasks = [BatchPartition(i, list(part.ranges)) for i, part in enumerate(cut)] or [BatchPartition(0, [])]
    for i, piece in enumerate(p for p in planned if p[2] <= p[1]):  # empty now, maybe not when read
        tasks[i % len(tasks)].ranges.append(piece)
    return tasks if any(task.ranges for task in tasks) else []


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

    @worded(lambda self: self.config.option_words)
    def partitions(self) -> Sequence[InputPartition]:
        configure_logging()
        for note in self.config.notes:
            log.warning("%s", note)
        return plan_batch(self.config)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, BatchPartition)
        ranges = read_to_ends_now(self.config, partition.ranges)
        rows = read_ranges(self.config, [(wire, start, end) for wire, start, end in ranges if end > start])
        return worded_reads(rows, self.config.option_words)


def read_to_ends_now(
    config: SparkSourceOptions, ranges: list[tuple[dict[str, Any], int, int]]
) -> list[tuple[dict[str, Any], int, int]]:
    """``ranges``, each split's last range (the one that ends at the split's planned end)
    to where the connector says the split ends now, if that is further."""
    source = range_source(config.connector, config.connector_options)
    assert isinstance(source, SupportsPositionRanges)
    splits = [source.split_codec.from_wire(wire) for wire, _, _ in ranges]
    last = [
        i for i, (split, (_, _, end)) in enumerate(zip(splits, ranges, strict=True)) if end == source.split_end(split)
    ]
    out = list(ranges)
    for i, now in zip(last, source.batch_ends_now([splits[i] for i in last]) if last else (), strict=True):
        wire, start, end = out[i]
        if now is not None and now > end:
            out[i] = (wire, start, now)
    return out
