"""Shared fixtures. Kafka: see tests/kafka_fixture.py (mark such tests ``@pytest.mark.kafka``)."""

from kafka_fixture import kafka_bootstrap, unique_source

__all__ = ["kafka_bootstrap", "unique_source"]
