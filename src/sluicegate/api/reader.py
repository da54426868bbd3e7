"""The reader side of a connector: reads the splits it is given."""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from sluicegate.api.split import SplitT

log = logging.getLogger("sluicegate.reader")


class InputStatus(enum.Enum):
    MORE_AVAILABLE = "more_available"
    NOTHING_AVAILABLE = "nothing_available"
    END_OF_INPUT = "end_of_input"


@dataclass(frozen=True, slots=True)
class Record:
    split_id: str
    value: Any
    event_time_ms: int | None = None


@dataclass
class ReadResult:
    records: list[Record] = field(default_factory=list)
    finished_split_ids: list[str] = field(default_factory=list)
    status: InputStatus = InputStatus.NOTHING_AVAILABLE


@dataclass
class ColumnarResult:
    """What ``ColumnarReader.next_columns`` read: the records as one Arrow batch."""

    batch: Any | None = None
    """A ``pyarrow.RecordBatch`` (None: nothing read)."""
    event_times: dict[str, int | None] = field(default_factory=dict)
    """Each split that gave records in ``batch``: its greatest event time there (None: none
    known). The host's watermarks and counts come from this, not from the rows."""
    finished_split_ids: list[str] = field(default_factory=list)
    status: InputStatus = InputStatus.NOTHING_AVAILABLE


@dataclass(frozen=True)
class SourceReaderContext:
    subtask: int
    attempt: int
    location: str

    def send_source_event(self, event: Any) -> None:  # overridden by hosts
        raise NotImplementedError("this reader host does not carry source events")

    def dead_letter(self, kind: str, origin: str, position: int, reason: str) -> None:
        """Bad input the reader skips (the user chose to): ``origin`` names where it came
        from (e.g. a file's URL), ``position`` where in it (-1: the whole of it). Hosts
        count it and copy it to the dead-letter topic; this default only logs it."""
        log.warning("skipped bad input %s@%d (%s): %s", origin, position, kind, reason)


class SourceReader(ABC, Generic[SplitT]):
    """Flink's SourceReader, pull style: the host calls ``next_batch`` in a loop."""

    def start(self) -> None:
        """Called once before the first batch."""

    @abstractmethod
    def add_splits(self, splits: Sequence[SplitT]) -> None: ...

    @abstractmethod
    def next_batch(self, max_records: int) -> ReadResult:
        """Up to ``max_records`` records; never blocks for long."""

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> list[SplitT]:
        """The unfinished splits with their current positions."""

    def remove_splits(self, split_ids: Sequence[str]) -> None:
        """Stop reading these splits and forget them (cooperative rebalancing: they were
        given back at a checkpoint that holds their positions). Optional: a host whose
        connector does not implement it builds a new reader from that checkpoint instead."""
        raise NotImplementedError

    def notify_no_more_splits(self) -> None:
        """No further splits will come to this subtask."""

    def handle_source_event(self, event: Any) -> None:
        """A connector event from the enumerator."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The host's checkpoint ``checkpoint_id`` is durable."""

    def pause_or_resume_splits(self, to_pause: Sequence[str], to_resume: Sequence[str]) -> None:
        """Watermark alignment: stop or restart reading some splits."""

    def records_to_end(self) -> Mapping[str, int]:
        """Metrics only: records left before the end of each split whose end this reader knows
        (bounded splits), by split id; splits it cannot tell are left out. Must be cheap (no
        I/O: cached knowledge only); called at each metrics scrape."""
        return {}

    def close(self) -> None:
        """Release resources."""


class ColumnarReader(ABC):
    """A mix-in for a ``SourceReader`` that can also hand its records over as whole Arrow
    batches, with no Python object per record: the standalone host's fast path when it
    writes records (not the JSON envelope). The host calls one of ``next_batch`` and
    ``next_columns`` for its whole life, never both."""

    @abstractmethod
    def next_columns(self, max_records: int) -> ColumnarResult:
        """Up to ``max_records`` records in one batch; never blocks for long."""

    def split_ids_of(self, batch: Any) -> list[str]:
        """The split each row of a batch from ``next_columns`` was read from (a stateful
        function gets its split's state with each record). By default the batch's
        ``split_id`` column; a connector whose batches have none says how to tell."""
        return split_id_column(batch)


def split_id_column(batch: Any) -> list[str]:
    """The ``split_id`` column of a batch (as a host builds them from records)."""
    return [str(v) for v in batch.column("split_id").to_pylist()]


class LowWatermarkListener(ABC):
    """A mix-in for a ``SourceReader`` that wants the source's low watermark (FLINK-4576's
    listener): the host calls ``notify_low_watermark`` with each announced low watermark,
    the minimum over the source's live, non-idle readers. A reader can use it to emit
    that watermark downstream while it has nothing of its own, or to throttle itself."""

    @abstractmethod
    def notify_low_watermark(self, watermark: int) -> None: ...
