"""Fixtures of the integration tests that live in tests/support."""

from kafka_data import procs

__all__ = ["procs"]
