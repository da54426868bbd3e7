"""Shared fixtures. Kafka: see tests/support/kafka_fixture.py (mark such tests
``@pytest.mark.kafka``). Helpers shared by test files live in tests/support/, which
is on the import path through pytest's ``pythonpath`` (pyproject.toml)."""

import os

from hypothesis import HealthCheck, settings
from kafka_fixture import kafka_bootstrap, unique_source

from sluicegate.devtools.broker.local import QUICK_JIT_OPTION

# Property tests assert behaviour, not speed: hypothesis's 200 ms deadline per example
# and its too-slow health check fail them on a loaded 2-core CI machine (test_names
# failed so beside a second suite), so neither applies here.
settings.register_profile("sluicegate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("sluicegate")

# The Spark drivers the tests start (every one through spark-submit, which reads this) compile
# with C1 only. A test's driver lives for a minute on small data, and with C2 it spent a third
# of its CPU compiling (README.md, "Development", has the runs). It changes no result, only
# how hot code is compiled.
_spark_submit_opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
if QUICK_JIT_OPTION not in _spark_submit_opts.split():
    os.environ["SPARK_SUBMIT_OPTS"] = f"{_spark_submit_opts} {QUICK_JIT_OPTION}".strip()

__all__ = ["kafka_bootstrap", "unique_source"]
