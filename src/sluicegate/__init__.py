"""sluicegate: FLIP-27 split coordination over Kafka."""

__version__ = "0.1.0"
