"""The built-in ``sequence`` connector: integer ranges with event times, bounded or not.

One module per concern, as the other connectors: ``split`` (the range and its wire
form), ``options`` (what the options make), ``enumerator``, ``reader``, ``stall`` (the
``stall_split`` rule both the reader and planning follow) and ``source``, which joins
them (its text says what the connector does)."""

from .enumerator import SequenceEnumerator
from .options import SequenceOptions
from .reader import SequenceReader
from .source import SequenceSource
from .split import SequenceSplit

__all__ = ["SequenceEnumerator", "SequenceOptions", "SequenceReader", "SequenceSource", "SequenceSplit"]
