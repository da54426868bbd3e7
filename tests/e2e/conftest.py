"""Fixtures of the end-to-end tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import ProcessGroup


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Iterator[ProcessGroup]:
    """The test's processes; those still running at its end are killed with their process
    group (a Spark job's JVM and Python workers too), then every one is stopped."""
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    yield group
    for proc in group.procs:
        if proc.popen.poll() is None:
            proc.kill_group()
    group.stop_all()
