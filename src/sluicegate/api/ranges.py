"""Position ranges: an optional capability of a Source, for hosts that plan what to read.

A streaming engine that checkpoints offsets itself (Spark Structured Streaming)
does not run a ``SourceReader`` loop. Its driver decides, per micro-batch, how far
each split will be read, and its executors read exactly that range on fresh
objects that know nothing but the range. A Source that also implements
``SupportsPositionRanges`` makes that possible:

- a split's position is an integer, and the range ``[a, b)`` of a split holds at
  most ``b - a`` records (admission control counts records this way);
- ``available_end`` says how far a split can be read now (for a bounded split
  with all its data present, its end);
- ``read_range`` reads ``[start, end)`` of a split deterministically, from the
  split's wire form alone: reading the same range twice gives the same records.

Everything here is free of I/O in the sense of the rest of ``sluicegate.api``:
no Kafka, no Spark. Column chunks may be pyarrow arrays (the fast path) or plain
Python sequences.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from sluicegate.api.split import SplitT


@dataclass(frozen=True)
class RangeChunk:
    """Consecutive records of one split, as columns of equal length.

    ``values`` and ``event_times_ms`` are pyarrow arrays or Python sequences;
    ``event_times_ms`` is None when the connector has no event time.
    """

    values: Any
    event_times_ms: Any | None = None

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class SkippedInput:
    """Bad input the connector skipped while a host planned (its user chose to skip):
    the host copies it to the dead-letter topic and counts it."""

    kind: str
    origin: str
    """Where it came from, e.g. a file's URL."""
    position: int
    reason: str


class SupportsPositionRanges(ABC, Generic[SplitT]):
    """Mix-in for a Source whose splits can be read as integer position ranges.

    ``value_type`` names the type of a record's value in SQL terms
    (``bigint``, ``string``, ``double``, ``binary``); hosts map it to their own types.
    """

    value_type: str = "bigint"
    reads_splits_in_order: bool = False
    """How a host shares a batch's row limit (``maxRecordsPerTrigger``) among the splits.
    False: in proportion to each split's backlog, so every split advances (Spark's Kafka
    source does the same for partitions). True: each subtask's share goes to its splits
    one after another (a split started before first, then in assignment order), so a
    batch reads whole splits and cuts at most one per subtask: for splits that are
    costly to enter in the middle (a Parquet row group is decoded whole, so reading a
    file in 200 slices decodes it 200 times)."""

    @abstractmethod
    def split_position(self, split: SplitT) -> int:
        """The split's current position: the next record to read."""

    @abstractmethod
    def with_position(self, split: SplitT, position: int) -> SplitT:
        """A copy of ``split`` at ``position`` (the split itself is not changed)."""

    @abstractmethod
    def split_end(self, split: SplitT) -> int | None:
        """The exclusive end of a bounded split; None for an unbounded one."""

    @abstractmethod
    def available_end(self, split: SplitT, now_ms: int) -> int:
        """How far the split can be read at wall-clock time ``now_ms`` (exclusive).

        Never above ``split_end`` and never smaller for a later ``now_ms``. Never below
        the split's position either, but for one case: the split's input was created
        again with fewer records than the position counts (a Kafka topic deleted and
        created anew) and the user chose to read on (Spark's ``failOnDataLoss=false``).
        The end is then where the new input ends now: the host moves the split back to
        it, reads nothing of it in that batch, and reads on from there, as Spark's own
        Kafka source does. Must not block.
        """

    @abstractmethod
    def read_range(self, split: SplitT, start: int, end: int, max_rows: int) -> Iterator[RangeChunk]:
        """The records of ``[start, end)`` of ``split`` in chunks of at most ``max_rows``.

        Deterministic: the same arguments give the same records, on any process.
        """

    def prepare_planning(self, splits: Sequence[SplitT]) -> None:
        """Called by the planning host before a round of ``available_end`` and
        ``event_time_before`` calls for ``splits``. The one place allowed to block: a
        connector whose ends live elsewhere fetches them here, in one request (the
        ``kafka`` connector asks for every partition's last stable offset)."""

    def batch_splits(self) -> Sequence[SplitT] | None:
        """The splits a one-shot (batch) read of the source reads, found now (it may block),
        each bounded: a batch host (Spark's ``spark.read``) reads every split from its
        position to its ``split_end``, with no coordinator. None (the default): the
        connector cannot be read as a batch."""
        return None

    def batch_ends_now(self, splits: Sequence[SplitT]) -> Sequence[int | None]:
        """Where a batch read of each of ``splits`` (from ``batch_splits``) ends if read now,
        in one request (it may block): for a connector whose ends move, as the ``kafka``
        connector's ``latest`` moves with every record written. Spark plans a batch query's
        DataFrame once and runs the same tasks for each of its actions; a task reads each
        split's last range to this end, so that a DataFrame collected again reads what
        arrived since, as it does through Spark's own Kafka source. None (the default, for
        each split): the end planned stands."""
        return [None] * len(splits)

    def suggested_parallelism(self) -> int | None:
        """How many reader subtasks a host runs when its user names none, asked once at a
        query's first start (it may block); None (the default): the user must name it.
        The ``kafka`` connector suggests the partitions it reads, as Spark's Kafka source
        runs a task per partition."""
        return None

    def inputs_to_come(self) -> Sequence[str]:
        """Inputs the last ``prepare_planning`` found in the data system that no split
        covers yet and soon will (a topic created for a pattern, partitions added, that the
        coordinator's discovery has not assigned yet), by name. A planning host waits for
        them before it plans, so a batch reads what was there when it was planned, as
        Spark's own sources (which list their inputs at every trigger) read. The connector
        bounds how long it names one. None by default."""
        return ()

    def take_skipped_input(self) -> list[SkippedInput]:
        """Bad input skipped since the last call (after ``prepare_planning``), for the
        dead-letter topic. None by default."""
        return []

    def reads_natively(self) -> bool:
        """Whether this install reads the source's ranges in native code (the ``kafka``
        connector with ``sluicegate._native``). Spark's ``readPath=auto`` takes a Python
        path that reads natively over Spark's own JVM readers where it is faster
        (spark/read_path_choice.py); False (the default): Python builds the rows.
        Must not block."""
        return False

    def arrow_schema(self) -> Any | None:
        """The pyarrow schema of ``read_arrow``'s batches; None (the default): hosts
        use ``split_id, value, event_time`` from ``read_range``."""
        return None

    def read_arrow(self, split: SplitT, start: int, end: int, max_rows: int) -> Iterator[Any]:
        """The records of ``[start, end)`` as pyarrow record batches of ``arrow_schema()``
        (only called when that is not None); deterministic as ``read_range``."""
        raise NotImplementedError(f"{type(self).__name__} has no arrow_schema of its own")

    def event_time_before(self, split: SplitT, position: int) -> int | None:
        """The largest event time among the split's records before ``position``
        (None: no record before it, or no event time). Hosts report it as the
        split's watermark once everything before ``position`` is durably planned."""
        return None

    def event_times_before(self, wanted: Sequence[tuple[SplitT, int]]) -> list[int | None]:
        """``event_time_before`` of each (split, position), in order. It may block: a
        connector whose event times live elsewhere reads them here, in one request for
        all (the ``kafka`` connector: one fetch for every partition)."""
        return [self.event_time_before(split, position) for split, position in wanted]

    def event_time_at(self, split: SplitT, position: int) -> int | None:
        """The event time of the record at ``position`` (None: none there yet, or no
        event time). With ``position_after_event_time`` it lets a planning host align
        its splits on event time before it reads them."""
        return None

    def position_after_event_time(self, split: SplitT, event_time_ms: int) -> int | None:
        """The first position whose record's event time is past ``event_time_ms``
        (None: no such record is known). Records of a split come in event-time order."""
        return None

    def positions_durable(self, positions: Sequence[tuple[SplitT, int]]) -> None:
        """A host's checkpoint holding these positions of splits is durable (Spark: the
        batch that ends at them is committed): for telling a system outside, never for
        reading (the kafka connector commits them to a consumer group where asked, for
        Kafka's lag tools). May come again with the same positions; must not raise or
        block for long. The standalone host tells its ``SourceReader`` instead
        (``notify_checkpoint_complete``)."""

    def is_finished_at(self, split: SplitT, position: int) -> bool:
        end = self.split_end(split)
        return end is not None and position >= end
