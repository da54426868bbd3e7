"""``spark.readStream.format("sluicegate")``: a PySpark streaming data source whose
partitions are the reader subtasks of a sluicegate source.

Spark's driver keeps one ``SluicegateStreamReader`` for the whole query (in the
Python process Spark runs for the source). ``initialOffset`` (a fresh query) names
the source the query reads (source_identity.py: its own, unless it names one) in the
offset it returns, and every later offset carries it. The ``SparkReaderDriver``
(driver.py) starts on the first ``latestOffset``/``partitions``, whose offset tells
where the query stands: nothing read (registration reports nothing), or a restart
(registration reports the splits of that offset, FLIP-537: the restored offsets are
the readers' state, and the coordinator follows them).

Per micro-batch:

- ``latestOffset(start, limit)`` first acknowledges ``start`` if that has not
  happened yet (it is in Spark's offset log, so durable), then plans the next
  offset (planner.py, offsets.py): every owned split with its end position for this batch,
  within ``maxRecordsPerTrigger`` shared by backlog;
- ``partitions(start, end)``: ``end`` is now in the offset log, so it is
  acknowledged at once (``SplitsFinished`` + ``CheckpointAck`` per subtask, with the
  offset's ``checkpoint_id``); then one InputPartition per subtask with every split
  range ``[start, end)`` of it, the attempt and the checkpoint id: all an executor
  needs;
- ``read(partition)`` runs on an executor, on a fresh copy of this object, and
  reads the ranges with the connector's ``read_arrow`` (or ``read_range``) into Arrow record batches;
- ``commit(end)`` comes one batch late (and not at all after the last batch of an
  availableNow run), so acks do not wait for it; it only re-acknowledges.

Acknowledging at ``partitions`` rather than ``commit`` keeps what the coordinator
holds equal to Spark's offset log: a split assigned after the last ack would
otherwise go back to the enumerator with its assigned position after a crash,
although Spark had already planned (and would replay) reading past it.

With ``Trigger.AvailableNow`` a bounded source is read to its end (the query stops
once every subtask is told NoMoreSplits and has finished its splits; the subtasks
then leave); an unbounded one up to what was available when the trigger started.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from pyspark.errors import AnalysisException
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sluicegate.api.errors import ConfigError
from sluicegate.api.ranges import RangeChunk, SupportsPositionRanges
from sluicegate.api.source import INPUT_WAIT_S, Source
from sluicegate.connectors import load_source
from sluicegate.coordinator.embedded import EmbeddedCoordinator
from sluicegate.kafka.log_repeats import RepeatFilter
from sluicegate.kafka.topics import TopicApplyError
from sluicegate.spark import connect_session, jvm_planner
from sluicegate.spark.driver import SparkReaderDriver
from sluicegate.spark.file_options import schema_ddl
from sluicegate.spark.offsets import (
    SourceOffset,
    ranges_between,
)
from sluicegate.spark.option_words import worded, worded_reads
from sluicegate.spark.options import JVM, SparkSourceOptions, option_words_of
from sluicegate.spark.planner import NextOffsetPlanner, offsets_behind_latest
from sluicegate.spark.read_path_choice import JVM_CONNECTORS
from sluicegate.spark.read_reports import ReadReport, SplitRead, counted, send_report
from sluicegate.spark.source_identity import own_source_name
from sluicegate.spark.task_slots import capped_parallelism, task_slots
from sluicegate.spark.trigger_limits import MinRowsPerTrigger, PlannedPart, cut_ranges

log = logging.getLogger("sluicegate.spark")

FORMAT = "sluicegate"
PYTHON_FORMAT = "sluicegate_python"
"""The Python source's name where the Java one (jvm_sources/) owns ``FORMAT`` and forwards to it."""
LOG_LEVEL_ENV = "SLUICEGATE_SPARK_LOG_LEVEL"
_SQL_TYPES: dict[str, tuple[DataType, str]] = {
    "bigint": (LongType(), "int64"),
    "long": (LongType(), "int64"),
    "int": (IntegerType(), "int32"),
    "integer": (IntegerType(), "int32"),
    "double": (DoubleType(), "float64"),
    "string": (StringType(), "string"),
    "binary": (BinaryType(), "binary"),
    "boolean": (BooleanType(), "bool"),
}


@functools.lru_cache(maxsize=16)
def range_source(connector: str, options: tuple[tuple[str, str], ...]) -> Source[Any]:
    """The connector's Source, once per process (executors build it from the options)."""
    source = load_source(connector, dict(options))
    if not isinstance(source, SupportsPositionRanges):
        raise ConfigError("connector", f"{connector!r} cannot be read by Spark: it does not support position ranges")
    return source


def _ranges(source: Source[Any]) -> SupportsPositionRanges[Any]:
    assert isinstance(source, SupportsPositionRanges)
    return source


def value_type_of(connector: str, options: tuple[tuple[str, str], ...]) -> str:
    value_type = _ranges(range_source(connector, options)).value_type.lower()
    if value_type not in _SQL_TYPES:
        raise ConfigError("connector", f"value type {value_type!r} is not one of {', '.join(sorted(_SQL_TYPES))}")
    return value_type


def source_schema(value_type: str = "bigint") -> StructType:
    """``split_id string, value <connector's type>, event_time timestamp``."""
    return StructType(
        [
            StructField("split_id", StringType()),
            StructField("value", _SQL_TYPES[value_type][0]),
            StructField("event_time", TimestampType()),
        ]
    )


class SluicegatePartition(InputPartition):
    """Everything an executor needs to read one subtask's share of a micro-batch."""

    def __init__(
        self,
        subtask: int,
        attempt: int | None,
        checkpoint_id: int,
        ranges: list[tuple[dict[str, Any], int, int]],
        report_to: str | None = None,
    ) -> None:
        super().__init__(subtask)
        self.subtask = subtask
        self.attempt = attempt
        self.checkpoint_id = checkpoint_id
        self.ranges = ranges
        self.report_to = report_to
        """The driver's ``/reads`` URL (read_reports.py), None without ``metricsPort``."""

    def __repr__(self) -> str:
        rows = sum(b - a for _, a, b in self.ranges)
        return (
            f"SluicegatePartition(subtask={self.subtask}, attempt={self.attempt}, "
            f"checkpoint={self.checkpoint_id}, splits={len(self.ranges)}, rows={rows})"
        )


class SluicegateDataSource(DataSource):
    """Register with ``register(spark)`` (or ``spark.dataSource.register(SluicegateDataSource)``,
    which knows nothing of the session's task slots)."""

    task_slots: ClassVar[int | None] = None
    """The session's task slots (task_slots.py), which ``register`` sets on the class it
    registers: a query that names no parallelism reads with at most that many subtasks."""
    jvm_unavailable: ClassVar[str] = "sluicegate.spark.register(spark) was not called in the driver"
    """Why a query with ``readPath=jvm`` reached this (Python) source: the session's JVM
    has no JVM read path (jvm_planner.unavailable_reason), set by ``register``."""
    registered_name: ClassVar[str] = FORMAT

    @classmethod
    def name(cls) -> str:
        return cls.registered_name

    def _config(self, batch: bool = False, schema: StructType | None = None) -> SparkSourceOptions:
        config = SparkSourceOptions.from_options(
            self.options, batch=batch, schema_ddl=None if schema is None else schema_ddl(schema)
        )
        if config.read_path == JVM:
            raise ConfigError("readPath", f"jvm cannot read in this session: {self.jvm_unavailable}")
        return config

    @worded(lambda self: option_words_of(self.options))
    def schema(self) -> StructType:
        config = self._config()
        own = _ranges(range_source(config.connector, config.connector_options)).arrow_schema()
        if own is not None:
            from pyspark.sql.pandas.types import from_arrow_schema

            return from_arrow_schema(own)
        return source_schema(value_type_of(config.connector, config.connector_options))

    @worded(lambda self: option_words_of(self.options))
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        config = self._config(schema=schema)
        given = {k.lower() for k in self.options}
        if self.registered_name == FORMAT and "readpath" not in given and config.connector in JVM_CONNECTORS:
            # readPath=auto where the JVM path is not in the session (with it, the Java source
            # chooses and says so: read_path_choice.py)
            configure_logging()
            log.info(
                "source %s: readPath=auto reads on the Python path (the JVM read path cannot read in this session: %s)",
                config.source,
                self.jvm_unavailable,
            )
        return SluicegateStreamReader(config, task_slots=self.task_slots)

    @worded(lambda self: option_words_of(self.options))
    def reader(self, schema: StructType) -> DataSourceReader:
        from sluicegate.spark.batch import SluicegateBatchReader

        return SluicegateBatchReader(self._config(batch=True, schema=schema))


class SluicegateStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, config: SparkSourceOptions, task_slots: int | None = None) -> None:
        self.config = config
        self._task_slots = task_slots
        self._driver: SparkReaderDriver | None = None
        self._coordinator: EmbeddedCoordinator | None = None
        self._initial: SourceOffset | None = None
        self._available_now_ms: int | None = None
        self._min_rows: MinRowsPerTrigger | None = None
        self._settled = False
        """Whether a latestOffset has planned since the driver started (planner._settle)."""
        self._continues_named = False
        """A fresh query of a named source read before: the first plan says where it continues."""
        self._run_ended = False
        """A ``Trigger.AvailableNow`` run read everything: its driver and coordinator are closed."""

    # Spark pickles this object into the read function that executors run: only the
    # configuration travels, never the driver's thread and Kafka clients.
    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]

    # -- driver side ---------------------------------------------------------------

    @property
    def _source(self) -> Source[Any]:
        return range_source(self.config.connector, self.config.connector_options)

    @functools.cached_property
    def _report_to(self) -> str | None:
        """The driver's endpoint for the executors' read figures (None: no metricsPort)."""
        return self.config.report_url()

    def _ensure_driver(self, offset: SourceOffset) -> SparkReaderDriver:
        """The driver, started on the first call that tells where the query stands:
        ``offset`` is its initial offset (a fresh query) or one of its offset log."""
        if self._driver is None:
            self.config.check_control_cluster()
            configure_logging()
            for note in self.config.notes:
                log.warning("%s", note)
            self.config = self.config.with_source(self._source_name(offset))
            restored = offset if offset.subtasks else None
            self._resolve_parallelism(restored)
            assert self.config.parallelism is not None
            if restored is not None:
                beyond = [s for s in restored.subtasks if s >= self.config.parallelism]
                if beyond:
                    raise ConfigError(
                        "parallelism",
                        f"the query's checkpoint has reader subtasks {beyond} but parallelism is "
                        f"{self.config.parallelism}; a query cannot change its parallelism",
                    )
            if restored is None:  # a new query: what it reads must exist (Source.check_inputs)
                self._source.check_inputs(INPUT_WAIT_S)
            self._start_coordinator()
            driver = SparkReaderDriver(self.config.driver_settings(), self._source)
            log.info(
                "source %s: %d reader subtasks, %s",
                self.config.source,
                self.config.parallelism,
                "fresh query" if restored is None else f"restored at checkpoint {restored.checkpoint_id}",
            )
            driver.start(restored)
            self._driver = driver
            assert self._coordinator is not None
            self._continues_named = (
                restored is None and self.config.source_named and self._coordinator.source_read_before is True
            )
        return self._driver

    def _source_name(self, offset: SourceOffset) -> str:
        """The source this query reads (source_identity.py): the one it names, else the one
        its offsets name, else (offsets written before they named it) the derived name."""
        if self.config.source_named:
            if offset.source is not None and offset.source != self.config.source:
                log.warning(
                    "the query's checkpoint was written reading source %s; it now reads source %s, as named",
                    offset.source,
                    self.config.source,
                )
            return self.config.source
        if offset.source is not None:
            return offset.source
        log.warning(
            "source %s: the query's checkpoint names no source (written by an older sluicegate): "
            "it goes on reading the source named after what it reads",
            self.config.source,
        )
        return self.config.source

    def _start_coordinator(self) -> None:
        """The source's coordinator in this process when nobody else serves it (option
        ``coordinator``, coordinator/embedded.py): a query needs nothing else running."""
        coordinator = self.config.embedded_coordinator()
        try:
            coordinator.start()  # a source defined otherwise: DefinitionMismatchError, naming the options
        except TopicApplyError as exc:
            raise ConfigError("kafka.bootstrap.servers", f"the control topics of {self.config.source}: {exc}") from None
        self._coordinator = coordinator

    def _resolve_parallelism(self, restored: SourceOffset | None) -> None:
        """A query that names no parallelism keeps the one it started with (the subtasks
        of its checkpoint), or at its first start takes the source's suggestion."""
        if self.config.parallelism is not None:
            return
        if restored is not None and restored.subtasks:
            parallelism, why = max(restored.subtasks) + 1, "the reader subtasks of the query's checkpoint"
        else:
            suggested = _ranges(self._source).suggested_parallelism()
            if suggested is None:
                raise ConfigError("parallelism", "is required: .option('parallelism', N)")
            parallelism = capped_parallelism(suggested, self._task_slots)
            why = f"suggested by the {self.config.connector} connector"
            if parallelism < suggested:
                why = (
                    f"the {self.config.connector} connector suggests {suggested}, at most the session's "
                    f"{self._task_slots} task slots: each task reads its splits' ranges in turn"
                )
        log.info("parallelism not given: %d (%s)", parallelism, why)
        self.config = self.config.with_parallelism(parallelism)

    @worded(lambda self: self.config.option_words)
    def initialOffset(self) -> dict[str, Any]:
        """A fresh query's start: nothing read, and the source it reads, named here for a
        query that names none (a source of its own, source_identity.py). Spark may ask again
        when it replays a first batch that was never committed; the offsets of its log name
        the source then, so a second random name here changes nothing."""
        if self._initial is None:
            named = self.config.source_named
            source = self.config.source if named else own_source_name(self.config.source)
            self._initial = SourceOffset(checkpoint_id=int(time.time() * 1000), source=source)
        return self._initial.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.config.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_ms = int(time.time() * 1000)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def offsets_behind_latest(self, consumed: dict[str, Any]) -> list[int]:
        """Each split's records past ``consumed`` (the offset of the last batch run) up to
        what the last planning found available: for the progress's source metrics where the
        read path can report them (the JVM path: Spark asks Python data sources for none)."""
        if self._driver is None:
            return []
        return offsets_behind_latest(self._driver.available_ends, SourceOffset.from_json(consumed))

    @worded(lambda self: self.config.option_words)
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        start_offset = SourceOffset.from_json(start)
        # Spark plans a batch after the one before is committed: ``start`` is durable. The
        # only word a query's last batch gets (Spark commits a batch to its sources when
        # it plans the next one with data: an AvailableNow run, a stream at rest).
        self._tell_durable(start_offset)
        if self._run_ended:
            return start
        driver = self._ensure_driver(start_offset)
        settle, self._settled = not self._settled, True
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        planner = NextOffsetPlanner(
            self.config.source,
            self._source,
            driver,
            self.config.alignment_max_drift_ms,
            self.config.max_splits_per_trigger,
        )
        end = planner.next_offset(start_offset, max_rows, self._available_now_ms, settle)
        if self._continues_named:
            self._continues_named = False
            self._say_where_it_continues(driver)
        if planner.read_everything:
            self._end_run()
            return start
        if end is start_offset or not self._admitted(end.rows - start_offset.rows):
            return start
        return end.to_json()

    def _say_where_it_continues(self, driver: SparkReaderDriver) -> None:
        """Once, after the first planning of a fresh query of a named source that was read
        before: its splits are where that source stands, not where ``startingOffsets`` says."""
        views = driver.planning_state().views.values()
        where = sorted((owned.split_id, owned.assigned_pos) for view in views for owned in view.splits)
        shown = ", ".join(f"{sid} at {pos}" for sid, pos in where[:10]) + (" ..." if len(where) > 10 else "")
        log.warning(
            "source %s was read before this query: a fresh query of a named source continues where the source "
            "stands (%s), not where its startingOffsets say (they apply to a source's first reader); leave out "
            "option source for a source of the query's own",
            self.config.source,
            shown or "no split assigned yet",
        )

    def _admitted(self, new_rows: int) -> bool:
        """minOffsetsPerTrigger / maxTriggerDelay (not for Trigger.AvailableNow, which reads
        what there is and stops)."""
        now_ms = int(time.monotonic() * 1000)
        if self.config.min_records_per_trigger is None or self._available_now_ms is not None:
            return True
        if self._min_rows is None:
            self._min_rows = MinRowsPerTrigger(
                self.config.min_records_per_trigger, self.config.max_trigger_delay_ms, now_ms
            )
        return self._min_rows.admits(new_rows, now_ms)

    @worded(lambda self: self.config.option_words)
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        start_offset = SourceOffset.from_json(start)
        end_offset = SourceOffset.from_json(end)
        self.acknowledge_planned(end_offset)
        return [
            SluicegatePartition(
                part.subtask,
                end_offset.subtasks[part.subtask].attempt,
                end_offset.checkpoint_id,
                list(part.ranges),
                self._report_to,
            )
            for part in self.planned_parts(start_offset, end_offset)
        ]

    def acknowledge_planned(self, end: SourceOffset) -> None:
        """Spark has written ``end`` to its offset log (it plans a batch's partitions after
        that): tell the coordinator while the executors read. The next latestOffset plans
        nothing until this ack is delivered (planner._acknowledged), so no split runs ahead
        of what the coordinator holds."""
        self._ensure_driver(end).acknowledge_soon(end)

    def planned_parts(self, start: SourceOffset, end: SourceOffset) -> list[PlannedPart[Any]]:
        """What a batch from ``start`` to ``end`` reads, a part per Spark partition
        (``minPartitions`` cuts ranges); the same for the same two offsets, anywhere."""
        parts = [
            PlannedPart(subtask, tuple((r.split, r.start, r.end) for r in ranges))
            for subtask, ranges in sorted(ranges_between(start, end).items())
        ]
        return cut_ranges(parts, self.config.min_partitions, self.config.max_records_per_partition)

    @worded(lambda self: self.config.option_words)
    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed the batch that ends at ``end`` (and planned one after it): the
        coordinator hears of it, and so does the connector (``positions_durable``, e.g. a
        Kafka lag group; ``latestOffset`` tells it too)."""
        offset = SourceOffset.from_json(end)
        if self._driver is not None:
            self._driver.acknowledge_soon(offset)
        self._tell_durable(offset)

    def _tell_durable(self, offset: SourceOffset) -> None:
        ranges = _ranges(self._source)
        if type(ranges).positions_durable is SupportsPositionRanges.positions_durable:
            return  # the connector does not listen: no split decoded every trigger for nothing
        codec = self._source.split_codec
        entries = [e for sub in offset.subtasks.values() for e in sub.splits.values()] + list(offset.parked.values())
        try:
            ranges.positions_durable([(codec.from_wire(e.split), e.pos) for e in entries])
        except Exception as exc:  # for systems outside: never fails the query
            log.warning("the connector could not take the committed positions: %r", exc)

    def _end_run(self) -> None:
        """The end of a ``Trigger.AvailableNow`` run, known here and nowhere later: Spark
        ends a query's source process with SIGKILL (pyspark's daemon), so ``stop`` is seldom
        called. Closed now, the coordinator this process hosts commits what its subtasks
        said last and releases the source (state_records.RELEASED_PART): the query's next
        run takes it over at once, not after a silence."""
        self._run_ended = True
        self.stop()

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None

    # -- executor side -------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SluicegatePartition)
        if partition.report_to is None:
            rows = read_ranges(self.config, partition.ranges)
        else:
            rows = self._read_and_report(partition, partition.report_to)
        return worded_reads(rows, self.config.option_words)

    def _read_and_report(self, partition: SluicegatePartition, url: str) -> Iterator[Any]:
        """The reads, then one report of them to the driver (not for a task stopped early)."""
        reads: list[SplitRead] = []
        started = time.monotonic()
        yield from read_ranges(self.config, partition.ranges, reads)
        report = ReadReport(self.config.source, partition.subtask, time.monotonic() - started, tuple(reads))
        send_report(url, report)


def read_ranges(
    config: SparkSourceOptions, planned: list[tuple[dict[str, Any], int, int]], reads: list[SplitRead] | None = None
) -> Iterator[Any]:
    """Arrow record batches of the ranges ``(split wire form, start, end)``, in order: the
    connector's own batches (``read_arrow``), or ``split_id, value, event_time`` built from
    ``read_range``. What an executor runs, for a micro-batch and for a batch query alike.
    ``reads``: each range read to its end adds its rows and bytes there."""
    import pyarrow as pa

    source = range_source(config.connector, config.connector_options)
    ranges = _ranges(source)

    def tallied(batches: Iterator[Any], wire: dict[str, Any]) -> Iterator[Any]:
        return batches if reads is None else counted(batches, reads, str(wire["split_id"]))

    if ranges.arrow_schema() is not None:
        for wire, start, end in planned:
            split = source.split_codec.from_wire(wire)
            yield from tallied(ranges.read_arrow(split, start, end, config.arrow_batch_rows), wire)
        return
    value_type = value_type_of(config.connector, config.connector_options)
    arrow_type = getattr(pa, _SQL_TYPES[value_type][1])()
    schema = pa.schema(
        [
            pa.field("split_id", pa.string()),
            pa.field("value", arrow_type),
            pa.field("event_time", pa.timestamp("us", tz="UTC")),
        ]
    )
    for wire, start, end in planned:
        split = source.split_codec.from_wire(wire)
        split_id = pa.scalar(wire["split_id"], pa.string())
        chunks = ranges.read_range(split, start, end, config.arrow_batch_rows)
        yield from tallied((_record_batch(chunk, split_id, arrow_type, schema) for chunk in chunks), wire)


def _record_batch(chunk: RangeChunk, split_id: Any, arrow_type: Any, schema: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(chunk)
    values = chunk.values if isinstance(chunk.values, pa.Array) else pa.array(chunk.values, arrow_type)
    if values.type != arrow_type:
        values = values.cast(arrow_type)
    if chunk.event_times_ms is None:
        times = pa.nulls(n, pa.timestamp("us", tz="UTC"))
    else:
        ms = chunk.event_times_ms if isinstance(chunk.event_times_ms, pa.Array) else pa.array(chunk.event_times_ms)
        times = pc.multiply(ms.cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays([pa.repeat(split_id, n), values, times], schema=schema)


def configure_logging() -> None:
    """Logs of the driver-side reader go to the Spark driver's stderr."""
    logger = logging.getLogger("sluicegate")
    level = os.environ.get(LOG_LEVEL_ENV, "INFO").upper()
    logger.setLevel(level)
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        handler.addFilter(RepeatFilter())
        logger.addHandler(handler)
        logger.propagate = False
        # aiokafka's own lines (a broker outage: thousands a minute) through the same, filtered
        clients = logging.getLogger("aiokafka")
        clients.addHandler(handler)
        clients.propagate = False
    logging.getLogger("aiokafka").setLevel(logging.WARNING)


def register(spark: Any) -> None:
    """Make ``spark.readStream.format("sluicegate")`` available in this session.

    In local mode the Python workers that run the source are this interpreter, where
    sluicegate is installed, unless ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` chose
    one: Spark's default, ``python3`` from PATH, is rarely a virtualenv's, and the query
    would fail with "No module named 'sluicegate'". (A registered data source carries the
    interpreter its SparkContext names when it is registered.) On a cluster the
    executors' Python is the deployment's to choose and is left alone.

    The class registered knows the session's task slots (task_slots.py): a query that
    names no parallelism reads with at most that many subtasks.

    Where the session's JVM has sluicegate's jar (``spark.jars``, jvm_planner.py), the Java
    source owns ``format("sluicegate")``: this one is registered as ``sluicegate_python``,
    which it forwards every query to but those the JVM path reads (``readPath=jvm``, or
    ``auto``'s choice: read_path_choice.py), and the planner those need is left with the JVM.

    A Spark Connect session (``sc://``, connect_session.py) has neither a SparkContext nor a
    JVM gateway: the source is registered under both names (the server's JVM may have the
    jar, whose Java source then forwards to ``sluicegate_python``), the workers' Python is
    the server's (one task checks it has sluicegate), its task slots come from its
    configuration, and ``readPath=jvm`` fails as the server analyses the query, naming what
    Connect lacks."""
    if connect_session.is_connect(spark):
        _register_over_connect(spark)
        return
    context = spark.sparkContext
    chosen = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    if not chosen and str(context.master).startswith("local"):
        context.pythonExec = sys.executable
    if chosen and (missing := driver_python_missing(chosen, os.getcwd())):
        log.warning(missing)
    conf = {str(k): str(v) for k, v in context.getConf().getAll()}
    unavailable = jvm_planner.unavailable_reason(spark)
    data_source = session_data_source(
        task_slots(str(context.master), conf, os.cpu_count() or 1),
        PYTHON_FORMAT if unavailable is None else FORMAT,
        unavailable or "",
    )
    spark.dataSource.register(data_source)
    if unavailable is None:
        jvm_planner.install_factory(spark, data_source)


def driver_python_missing(python: str, cwd: str) -> str | None:
    """Why the driver's own Python workers cannot start ``python`` (the executors' Python
    of ``spark.pyspark.python`` or ``PYSPARK_PYTHON``), or None. A Python data source is
    planned in Python workers on the driver, which start that same interpreter: a path
    relative to a ``spark.archives`` directory (``./environment/bin/python``, Spark's Python
    package guide) exists on the executors only, as a client-mode driver does not unpack
    the archive, and the query's first batch would fail with ``Cannot run program``."""
    if os.path.isabs(python) or os.sep not in python or os.path.exists(os.path.join(cwd, python)):
        return None  # absolute, a name on PATH, or there
    return (
        f"the executors' Python {python} is not in the driver's directory {cwd}, and the driver starts it "
        "too, to plan format('sluicegate') queries: give the driver a venv with sluicegate at that path "
        "(a link will do; docs/deploy.md, 'Spark on a cluster'), or a Python of its own path"
    )


def _register_over_connect(spark: Any) -> None:
    """``register`` for a Spark Connect session: ``sluicegate_python``, then ``sluicegate``
    unless the server's JVM has the Java source (its jar in the server's ``spark.jars``),
    which owns the name (Spark refuses a Python source of a JVM source's name) and forwards
    every query to the first; without a planner factory it refuses ``readPath=jvm`` itself."""
    master, conf = connect_session.server_settings(spark)
    counted = connect_session.known_master(master)
    slots = None if counted is None else task_slots(counted, conf, os.cpu_count() or 1)
    spark.dataSource.register(session_data_source(slots, PYTHON_FORMAT, connect_session.JVM_UNAVAILABLE))
    try:
        spark.dataSource.register(session_data_source(slots, FORMAT, connect_session.JVM_UNAVAILABLE))
    except AnalysisException as exc:
        if exc.getCondition() != connect_session.NAME_TAKEN:
            raise
        log.debug("Spark Connect: the server's JVM has sluicegate's Java source, which owns format(%r)", FORMAT)
    connect_session.check_workers(spark)


def session_data_source(slots: int | None, name: str = FORMAT, jvm_unavailable: str = "") -> type[SluicegateDataSource]:
    """The data source class of one session: ``SluicegateDataSource`` knowing the
    session's task slots, the name it is registered under, and why the session has no
    JVM read path. Spark pickles a registered class and unpickles it in the Python
    process that plans the query; a class made here is not importable by its name, so
    cloudpickle carries it by value, its attributes included."""
    attributes = {"task_slots": slots, "registered_name": name, "__module__": __name__}
    if jvm_unavailable:
        attributes["jvm_unavailable"] = jvm_unavailable
    return type("SessionDataSource", (SluicegateDataSource,), attributes)
