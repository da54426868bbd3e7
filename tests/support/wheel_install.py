"""The built wheel and venvs it is installed into, outside the checkout: what a user gets.

``build_wheel`` builds it as releases are (``python -m sluicegate.devtools.wheel``);
``install`` puts it into a fresh venv with the image's install script
(docker/install-image.sh, docker/Dockerfile's second stage), which ends with
``sluicegate doctor``. The e2e conftest makes one wheel per pytest run (the session
fixture ``wheel``) and the venvs the tests share (``with_spark``, ``base``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Installed:
    venv: Path
    cache: Path
    """The venv's own sluicegate cache (SLUICEGATE_CACHE_DIR), empty at the start."""

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, bootstrap: str) -> dict[str, str]:
        """The environment of a process of this venv: nothing of the checkout's venv on PATH
        or PYTHONPATH, the venv's own cache."""
        keep = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON")}
        path = os.pathsep.join([str(self.venv / "bin"), keep.get("PATH", "")])
        return {
            **keep,
            "PATH": path,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SLUICEGATE_CACHE_DIR": str(self.cache),
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "200",
        }

    def run(self, command: list[str], cwd: Path, bootstrap: str, timeout_s: float) -> tuple[int, str, str]:
        """``command`` run in this venv's environment: its exit code, its stdout, and both
        streams together."""
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            cwd=cwd,
            env=self.env(bootstrap),
            timeout=timeout_s,
        )
        return done.returncode, done.stdout, done.stdout + done.stderr


def build_wheel(out: Path) -> Path:
    """The wheel of this checkout, built into ``out`` as releases are."""
    built = subprocess.run(
        [sys.executable, "-m", "sluicegate.devtools.wheel", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return Path(built.stdout.strip().splitlines()[-1])


IMAGE_SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "install-image.sh"
"""The image's install steps; run here without ``--system``, ``--user``, ``--data`` and
``--fetch`` (the image's own: no apt-get, no user made on the machine that tests, and the
Kafka jars left for the first Spark session to fetch into the venv's empty cache)."""


def install(wheel: Path, where: Path, extras: str) -> Installed:
    """A fresh venv in ``where`` with ``wheel`` (and its ``extras``, "" for none) from PyPI,
    made by the image's install script: it fails unless ``sluicegate doctor`` passes."""
    installed = Installed(where / "venv", where / "cache")
    command = [
        "bash", str(IMAGE_SCRIPT), "--wheel", str(wheel), "--prefix", str(installed.venv),
        "--extras", extras, "--python", sys.executable,
    ]  # fmt: skip
    env = installed.env(os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=where, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return installed
