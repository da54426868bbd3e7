"""The Kafka fixture moved to the connector test kit (``sluicegate.testing.kafka_fixture``);
the tests keep importing it from here."""

from sluicegate.testing.kafka_fixture import *  # noqa: F403
from sluicegate.testing.kafka_fixture import kafka_bootstrap, unique_source

__all__ = ["kafka_bootstrap", "unique_source"]
