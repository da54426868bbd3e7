"""The built-in ``sequence`` connector: integer ranges with event times, bounded or not."""

from sluicegate_connectors.sequence.source import (
    SequenceEnumerator,
    SequenceOptions,
    SequenceReader,
    SequenceSource,
    SequenceSplit,
)

__all__ = ["SequenceEnumerator", "SequenceOptions", "SequenceReader", "SequenceSource", "SequenceSplit"]
