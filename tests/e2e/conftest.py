"""Fixtures of the end-to-end tests."""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import ProcessGroup
from wheel_install import Installed, build_wheel, install


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


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built once a pytest run as releases are."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def with_spark(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """A fresh venv outside the checkout with ``sluicegate[spark]`` from the wheel, made by
    the image's install script (docker/install-image.sh), as the image's is."""
    installed = install(wheel, tmp_path_factory.mktemp("with-spark"), "spark")
    yield installed
    shutil.rmtree(installed.venv, ignore_errors=True)


@pytest.fixture(scope="session")
def base(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """A fresh venv outside the checkout with the wheel and no extra (no pyspark, no
    matplotlib), made by the same script."""
    installed = install(wheel, tmp_path_factory.mktemp("base"), "")
    yield installed
    shutil.rmtree(installed.venv, ignore_errors=True)
