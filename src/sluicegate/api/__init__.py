"""What connector authors implement and call. No I/O here."""

from sluicegate.api.assigners import (
    AssignmentRound,
    FairShareAssigner,
    PullAssigner,
    RoundRobinAssigner,
    SplitAssigner,
    StickyHashAssigner,
)
from sluicegate.api.distributor import SplitDistributor
from sluicegate.api.enumerator import (
    AsyncCallHandle,
    EnumeratorMetrics,
    OwnedSplits,
    ReaderInfo,
    ReaderLoads,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitsAssignment,
)
from sluicegate.api.errors import ConfigError, NoLiveReaderError, SourceError
from sluicegate.api.ranges import RangeChunk, SkippedInput, SupportsPositionRanges
from sluicegate.api.reader import (
    ColumnarReader,
    ColumnarResult,
    InputStatus,
    LowWatermarkListener,
    ReadResult,
    Record,
    SourceReader,
    SourceReaderContext,
)
from sluicegate.api.source import Boundedness, Source, SupportsSplitReassignmentOnRecovery
from sluicegate.api.split import SourceSplit, SplitCodec, WireSplit

__all__ = [
    "AssignmentRound",
    "AsyncCallHandle",
    "Boundedness",
    "ColumnarReader",
    "ColumnarResult",
    "ConfigError",
    "EnumeratorMetrics",
    "FairShareAssigner",
    "InputStatus",
    "LowWatermarkListener",
    "NoLiveReaderError",
    "OwnedSplits",
    "PullAssigner",
    "RangeChunk",
    "ReadResult",
    "ReaderInfo",
    "ReaderLoads",
    "Record",
    "RoundRobinAssigner",
    "SkippedInput",
    "Source",
    "SourceError",
    "SourceReader",
    "SourceReaderContext",
    "SourceSplit",
    "SplitAssigner",
    "SplitCodec",
    "SplitDistributor",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    "SplitsAssignment",
    "StickyHashAssigner",
    "SupportsPositionRanges",
    "SupportsSplitReassignmentOnRecovery",
    "WireSplit",
]
