"""The built-in ``sequence`` connector: integer ranges with event times, bounded or not."""

from .source import (
    SequenceEnumerator,
    SequenceOptions,
    SequenceReader,
    SequenceSource,
    SequenceSplit,
)

__all__ = ["SequenceEnumerator", "SequenceOptions", "SequenceReader", "SequenceSource", "SequenceSplit"]
