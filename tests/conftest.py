"""Shared fixtures. Kafka: see tests/support/kafka_fixture.py (mark such tests
``@pytest.mark.kafka``). Helpers shared by test files live in tests/support/, which
is on the import path through pytest's ``pythonpath`` (pyproject.toml)."""

from hypothesis import HealthCheck, settings
from kafka_fixture import kafka_bootstrap, unique_source

# Property tests assert behaviour, not speed: hypothesis's 200 ms deadline per example
# and its too-slow health check fail them on a loaded 2-core CI machine (test_names
# failed so beside a second suite), so neither applies here.
settings.register_profile("sluicegate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("sluicegate")

__all__ = ["kafka_bootstrap", "unique_source"]
