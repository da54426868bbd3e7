"""The README's Spark snippet runs as written from a fresh process in local mode.

A new user's script makes its own SparkSession and sets no ``PYSPARK_PYTHON``: Spark's
Python workers would then be ``python3`` from PATH, which has no sluicegate, and the
query failed with "No module named 'sluicegate'". ``register(spark)`` now points a
local session's workers at the interpreter running the script. The test runs the
README's own code block (``load()`` starts a Python worker that builds the source and
its schema; nothing is read) in a child process whose PATH finds a ``python3`` without
sluicegate first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_kafka_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Read a Kafka topic", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README: no python block under 'Read a Kafka topic'"
    return match.group(1)


def bare_python3() -> str | None:
    """A ``python3`` that cannot import sluicegate (the system's), or None."""
    for candidate in ("/usr/bin/python3", "/bin/python3"):
        if not os.path.exists(candidate):
            continue
        probe = subprocess.run([candidate, "-c", "import sluicegate"], capture_output=True, check=False)
        if probe.returncode != 0:
            return candidate
    return None


def test_the_readme_spark_snippet_runs_in_local_mode_without_pyspark_python(tmp_path: Path) -> None:
    bare = bare_python3()
    if bare is None:
        pytest.skip("no python3 without sluicegate on this machine to stand for a user's PATH")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(bare)
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """\
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
            control_bootstrap = "127.0.0.1:9"
            """
        )
        + readme_kafka_snippet()
        + 'print("SCHEMA", df.schema.simpleString())\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    assert shutil.which("python3", path=env["PATH"]) == str(bin_dir / "python3")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "No module named 'sluicegate'" not in done.stderr
    assert "SCHEMA struct<key:binary,value:binary,topic:string,partition:int,offset:bigint," in done.stdout
