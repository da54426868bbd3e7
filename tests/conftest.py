"""Shared fixtures. Kafka: see tests/support/kafka_fixture.py (mark such tests
``@pytest.mark.kafka``). Helpers shared by test files live in tests/support/, which
is on the import path through pytest's ``pythonpath`` (pyproject.toml)."""

from kafka_fixture import kafka_bootstrap, unique_source

__all__ = ["kafka_bootstrap", "unique_source"]
