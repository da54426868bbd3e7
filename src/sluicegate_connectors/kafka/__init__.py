"""The ``kafka`` connector: a split is one topic partition, its position the next offset."""

from .options import KafkaOptions
from .source import KafkaSource
from .split import KafkaPartitionSplit

__all__ = ["KafkaOptions", "KafkaPartitionSplit", "KafkaSource"]
