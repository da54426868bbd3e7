"""The core harness moved to the connector test kit (``sluicegate.testing.core_harness``);
the tests keep importing it from here, with ``sequence_source`` typed as the sequence connector."""

from sluicegate.testing import core_harness as _kit
from sluicegate.testing.core_harness import SOURCE, START_MS, B, Checkpoint, CoreHarness, SimReader, body
from sluicegate_connectors.sequence import SequenceSource

__all__ = ["SOURCE", "START_MS", "B", "Checkpoint", "CoreHarness", "SimReader", "body", "sequence_source"]


def sequence_source(splits: int = 8, records_per_split: int | str = 10, **options: str) -> SequenceSource:
    source = _kit.sequence_source(splits, records_per_split, **options)
    assert isinstance(source, SequenceSource)
    return source
