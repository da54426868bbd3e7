"""Shared fixtures. Kafka: see tests/support/kafka_fixture.py (mark such tests
``@pytest.mark.kafka``). Helpers shared by test files live in tests/support/, which
is put on the import path here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from kafka_fixture import kafka_bootstrap, unique_source

__all__ = ["kafka_bootstrap", "unique_source"]
