"""Tests over ``readPath=jvm`` need its jar (``make install`` builds it): in CI a missing jar
is a failed build and fails the test; elsewhere (no JDK's javac) the test is skipped."""

from __future__ import annotations

import os

import pytest

from sluicegate.spark.jvm_classpath import built


def require_jvm_read_path() -> None:
    if built() is not None:
        return
    why = "the JVM read path's jar is not built (make install prints why)"
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)
