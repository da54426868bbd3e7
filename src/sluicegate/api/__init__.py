"""What connector authors implement and call. No I/O here."""

from sluicegate.api.enumerator import (
    EnumeratorMetrics,
    ReaderInfo,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitsAssignment,
)
from sluicegate.api.errors import ConfigError, NoLiveReaderError
from sluicegate.api.ranges import RangeChunk, SupportsPositionRanges
from sluicegate.api.reader import InputStatus, ReadResult, Record, SourceReader, SourceReaderContext
from sluicegate.api.source import Boundedness, Source, SupportsSplitReassignmentOnRecovery
from sluicegate.api.split import SourceSplit, SplitCodec, WireSplit

__all__ = [
    "Boundedness",
    "ConfigError",
    "EnumeratorMetrics",
    "InputStatus",
    "NoLiveReaderError",
    "RangeChunk",
    "ReadResult",
    "ReaderInfo",
    "Record",
    "Source",
    "SourceReader",
    "SourceReaderContext",
    "SourceSplit",
    "SplitCodec",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    "SplitsAssignment",
    "SupportsPositionRanges",
    "SupportsSplitReassignmentOnRecovery",
    "WireSplit",
]
