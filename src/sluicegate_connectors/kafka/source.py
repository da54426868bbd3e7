"""``KafkaSource``: the enumerator, the reader and position ranges of the ``kafka`` connector.

The reference connector: partitions discovered while running (enumerator.py),
assignment by a ``SplitAssigner`` (sticky by default, as Flink's Kafka source),
reassignment on recovery (FLIP-537), the standalone reader (reader.py) and
offset ranges read into Arrow for Spark (ranges.py). docs/kafka.md is the guide.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sluicegate.api import (
    Boundedness,
    RangeChunk,
    Source,
    SourceReaderContext,
    SplitEnumeratorContext,
    SupportsPositionRanges,
    SupportsSplitReassignmentOnRecovery,
)
from sluicegate.api.assigners import ASSIGNMENT_OPTIONS
from sluicegate.api.errors import ConfigError, SourceError, option_named

from .cluster import DataCluster, DataClusterError
from .enumerator import KafkaEnumerator
from .group_commits import GroupOffsetCommitter
from .options import KafkaOptions, headers_in_rows
from .positions import starting_offsets, stopping_offsets
from .ranges import PlanningView, RangeReader, arrow_schema
from .read_path import native_available
from .readable_end import ReadableEnds
from .reader import KafkaSourceReader
from .split import KafkaPartitionSplit, KafkaSplitCodec

log = logging.getLogger("sluicegate.connectors.kafka")

CHECK_INTERVAL_S = 1.0


class KafkaSource(
    Source[KafkaPartitionSplit],
    SupportsSplitReassignmentOnRecovery,
    SupportsPositionRanges[KafkaPartitionSplit],
):
    # How to reach the data cluster (its address may differ between networks, each process
    # has its own principal) and how long an executor waits: not what the source reads.
    LOCAL_OPTIONS = (
        "kafka.",
        "bootstrap_servers",
        "poll_timeout_ms",
        "fetch_offset_retries",
        "fetch_offset_retry_interval_ms",
        "include_headers",
        "read_path",
        "missing_topics",
        "fail_on_data_loss",
        "partition_discovery_interval_ms",
        "commit_offsets_to_group",
        *ASSIGNMENT_OPTIONS,
    )
    """``include_headers``, ``read_path`` and ``fail_on_data_loss`` shape how a query reads,
    not what the source reads: queries on one source may differ in them, and a query may
    restart with another (Spark's ``failOnDataLoss`` is the query's, run by run);
    ``partition_discovery_interval_ms`` is how often to look, a throttle;
    ``commit_offsets_to_group`` where a host tells its positions, for monitoring."""
    DEFINITION_DEFAULTS = {
        "starting_offsets": "earliest",
        "starting_timestamp_strategy": "latest",
        "stopping_offsets": "none",
    }

    def __init__(self, options: KafkaOptions, cluster: Callable[[KafkaOptions], DataCluster] = DataCluster) -> None:
        self.options = options
        self._cluster = cluster
        """How the enumerator reaches the data cluster (tests give an in-memory one)."""
        self._codec = KafkaSplitCodec()
        self._planning: PlanningView | None = None
        self._readable = ReadableEnds(options.fail_on_data_loss)
        self._group: GroupOffsetCommitter | None = None
        """Made at the first ``positions_durable`` with ``commit_offsets_to_group``."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSource:
        return cls(KafkaOptions.parse(options))

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self.options.stopping.bounded else Boundedness.CONTINUOUS_UNBOUNDED

    @property
    def split_codec(self) -> KafkaSplitCodec:
        return self._codec

    def create_enumerator(self, context: SplitEnumeratorContext[KafkaPartitionSplit]) -> KafkaEnumerator:
        return KafkaEnumerator(context, self.options, self._cluster(self.options))

    def restore_enumerator(
        self, context: SplitEnumeratorContext[KafkaPartitionSplit], checkpoint: Any
    ) -> KafkaEnumerator:
        return KafkaEnumerator.restore(context, self.options, self._cluster(self.options), checkpoint)

    def create_reader(self, context: SourceReaderContext) -> KafkaSourceReader:
        return KafkaSourceReader(self.options)

    def check_inputs(self, wait_s: float) -> None:
        """The data cluster answers and the topics of ``topics`` exist on it (with
        ``missing_topics=fail``, the default), asked again every second for up to
        ``wait_s``. A ``topic_pattern`` may match nothing yet, and ``missing_topics=wait``
        waits for them: then only the cluster is checked."""
        options = self.options
        wanted = options.topics if options.missing_topics == "fail" else ()
        cluster = self._cluster(options)
        deadline = time.monotonic() + wait_s
        said = False
        while True:
            try:
                found: set[str] | None = set(cluster.partitions())
                problem = ""
            except DataClusterError as exc:
                found, problem = None, str(exc)
                if not said:  # once: the state does not change until it answers
                    log.warning("%s; waiting up to %.0f s for it to answer", problem, wait_s)
                    said = True
            if found is not None:
                missing = [t for t in wanted if t not in found]
                if not missing:
                    self._check_starting_timestamps(cluster)
                    return
                problem = (
                    f"topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} ({option_named('topics')}) "
                    f"{'do' if len(missing) > 1 else 'does'} not exist on {options.bootstrap_servers}"
                )
            if time.monotonic() >= deadline:
                break
            time.sleep(CHECK_INTERVAL_S)
        if found is None:
            raise SourceError(f"{problem}; check {option_named('bootstrap_servers')} (the data cluster)")
        raise SourceError(
            f"{problem} (waited {wait_s:.0f} s): check the name, create the topic, or set "
            f"{option_named('missing_topics', 'wait')} to wait until it is created"
        )

    def _check_starting_timestamps(self, cluster: DataCluster) -> None:
        """With ``starting_timestamp_strategy=error`` (Spark's default for its
        ``startingOffsetsByTimestampStrategy``), every partition that starts by time has a
        record at or after its timestamp; else SourceError naming the partitions."""
        options = self.options
        if options.starting_timestamp_strategy != "error":
            return
        keys = [
            (t, p)
            for t, n in cluster.partitions().items()
            for p in range(n)
            if options.selects(t, p) and options.starting.timestamp_of((t, p)) is not None
        ]
        by_time: dict[int, list[tuple[str, int]]] = {}
        for key in keys:
            by_time.setdefault(options.starting.timestamp_of(key) or 0, []).append(key)
        none_after = sorted(
            key
            for ms, group in by_time.items()
            for key, offset in cluster.first_offsets_at(group, ms).items()
            if offset is None
        )
        if none_after:
            names = ", ".join(f"{t}-{p} (timestamp {options.starting.timestamp_of((t, p))})" for t, p in none_after)
            raise SourceError(
                f"no record at or after the starting timestamp in {names}, and "
                "starting_timestamp_strategy is error (Spark's startingOffsetsByTimestampStrategy): "
                "set it to latest to start such partitions at their end"
            )

    # -- position ranges (sluicegate.api.ranges) --------------------------------------

    value_type = "binary"

    def _view(self) -> PlanningView:
        if self._planning is None:
            self._planning = PlanningView(self.options, self._cluster(self.options))
        return self._planning

    def split_position(self, split: KafkaPartitionSplit) -> int:
        return split.position

    def with_position(self, split: KafkaPartitionSplit, position: int) -> KafkaPartitionSplit:
        return split.copy(position)

    def split_end(self, split: KafkaPartitionSplit) -> int | None:
        return split.stop

    def suggested_parallelism(self) -> int | None:
        cluster = self._cluster(self.options)
        partitions = [(t, p) for t, n in cluster.partitions().items() for p in range(n) if self.options.selects(t, p)]
        return max(1, len(partitions))

    def batch_splits(self) -> list[KafkaPartitionSplit]:
        """Every selected partition from its starting to its stopping offset, resolved as
        the first discovery of a bounded source resolves them (positions.py)."""
        options = self.options
        if not options.stopping.bounded:
            raise ConfigError("stopping_offsets", "a batch read needs an end: set it (latest reads all there is)")
        cluster = self._cluster(options)
        keys = sorted((t, p) for t, n in cluster.partitions().items() for p in range(n) if options.selects(t, p))
        starts = starting_offsets(cluster, options, keys, first=True)
        stops = stopping_offsets(cluster, options, keys)
        backwards = [f"{t}-{p} ({starts[(t, p)]} > {stops[(t, p)]})" for t, p in keys if starts[(t, p)] > stops[(t, p)]]
        if backwards:
            raise SourceError(
                f"the starting offset is past the ending offset in {', '.join(backwards)}: "
                "check starting_offsets and stopping_offsets (Spark's startingOffsets and endingOffsets)"
            )
        return [KafkaPartitionSplit(t, p, starts[(t, p)], stops[(t, p)]) for t, p in keys]

    def batch_ends_now(self, splits: Sequence[KafkaPartitionSplit]) -> list[int | None]:
        """``stopping_offsets`` resolved again: ``latest`` (and -1 in a JSON map) where the
        partition ends now, a timestamp at its first record at or after it now."""
        keys = [(split.topic, split.partition) for split in splits]
        ends = stopping_offsets(self._cluster(self.options), self.options, keys)
        return [ends.get(key) for key in keys]

    def prepare_planning(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        self._view().refresh(splits)

    def inputs_to_come(self) -> list[str]:
        return self._view().inputs_to_come()

    def available_end(self, split: KafkaPartitionSplit, now_ms: int) -> int:
        """The partition's last stable offset, within the split's stop, by Spark's rules of
        data loss and of a Trigger.AvailableNow run (readable_end.py): ``now_ms`` in the
        past is the run's start. Below the split's position only where the partition was
        created again with fewer records and failOnDataLoss is false."""
        view = self._view()
        key = (split.topic, split.partition)
        end = self._readable.end(key, split.position, view.end_offset(split), view.gone(split), now_ms)
        return end if split.stop is None else min(end, split.stop)

    def event_time_before(self, split: KafkaPartitionSplit, position: int) -> int | None:
        return self._view().timestamp_before(split, position)

    def event_times_before(self, wanted: Sequence[tuple[KafkaPartitionSplit, int]]) -> list[int | None]:
        return self._view().timestamps_before(wanted)

    def event_time_at(self, split: KafkaPartitionSplit, position: int) -> int | None:
        return self._view().timestamp_at(split, position)

    def position_after_event_time(self, split: KafkaPartitionSplit, event_time_ms: int) -> int | None:
        return self._view().offset_after(split, event_time_ms)

    def positions_durable(self, positions: Sequence[tuple[KafkaPartitionSplit, int]]) -> None:
        """To ``commit_offsets_to_group``, if given (group_commits.py)."""
        if self.options.commit_group is None:
            return
        if self._group is None:
            self._group = GroupOffsetCommitter(self.options)
        self._group.commit({(split.topic, split.partition): position for split, position in positions})

    def reads_natively(self) -> bool:
        requested = self.options.read_path
        return requested == "native" or (requested != "python" and native_available())

    def arrow_schema(self) -> Any:
        return arrow_schema(headers_in_rows(self.options))

    def read_arrow(self, split: KafkaPartitionSplit, start: int, end: int, max_rows: int) -> Iterator[Any]:
        return RangeReader(self.options, headers=headers_in_rows(self.options)).read(split, start, end, max_rows)

    def read_range(self, split: KafkaPartitionSplit, start: int, end: int, max_rows: int) -> Iterator[RangeChunk]:
        """Values and event times (ms) only, for hosts without the connector's own schema."""
        import pyarrow.compute as pc

        for batch in self.read_arrow(split, start, end, max_rows):
            times = batch.column("timestamp").cast("int64")
            yield RangeChunk(batch.column("value"), pc.divide(times, 1000))
