"""The README's Spark snippets run as written from a fresh process in local mode.

A new user's script makes its own SparkSession and sets no ``PYSPARK_PYTHON``: Spark's
Python workers would then be ``python3`` from PATH, which has no sluicegate, and the
query failed with "No module named 'sluicegate'". ``register(spark)`` now points a
local session's workers at the interpreter running the script. The test runs the
README's own code blocks, each one that calls ``register(spark)`` (``load()`` starts a
Python worker that builds the source and its schema; nothing is read), in a child
process whose PATH finds a ``python3`` without sluicegate first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parents[2] / "README.md"


SCHEMAS = {
    "kafka": "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,",
    "sequence": "struct<split_id:string,value:bigint,event_time:timestamp>",
}
"""The schema each connector's snippet must load (the start of its simpleString)."""

PREAMBLE = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
bootstrap = control_bootstrap = "127.0.0.1:9"
"""
"""What a snippet takes as given: a session and the control cluster's address (nothing
listens there; loading a query does not connect)."""


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def readme_spark_snippets() -> list[str]:
    """The snippets of a query, which take the session as given."""
    return [b for b in readme_python_blocks() if "register(spark)" in b and "SparkSession.builder" not in b]


def connector_of(snippet: str) -> str:
    """The connector a snippet reads: named, or kafka by Spark's subscription options."""
    match = re.search(r'\.option\("connector", "(\w+)"\)', snippet)
    if match is None and re.search(r'\.option\("(subscribe|subscribePattern|assign)", ', snippet):
        return "kafka"
    assert match, f"README snippet names no connector:\n{snippet}"
    return match.group(1)


def test_the_readme_has_the_spark_snippets_this_test_knows() -> None:
    connectors = [connector_of(s) for s in readme_spark_snippets()]
    assert "kafka" in connectors and "sequence" in connectors
    assert set(connectors) <= set(SCHEMAS), f"add the schema of {set(connectors) - set(SCHEMAS)} to SCHEMAS"


def bare_python3() -> str | None:
    """A ``python3`` that cannot import sluicegate (the system's), or None."""
    for candidate in ("/usr/bin/python3", "/bin/python3"):
        if not os.path.exists(candidate):
            continue
        probe = subprocess.run([candidate, "-c", "import sluicegate"], capture_output=True, check=False)
        if probe.returncode != 0:
            return candidate
    return None


@pytest.mark.parametrize("snippet", readme_spark_snippets(), ids=connector_of)
def test_a_readme_spark_snippet_runs_in_local_mode_without_pyspark_python(tmp_path: Path, snippet: str) -> None:
    bare = bare_python3()
    if bare is None:
        pytest.skip("no python3 without sluicegate on this machine to stand for a user's PATH")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(bare)
    script = tmp_path / "job.py"
    script.write_text(PREAMBLE + snippet + 'print("SCHEMA", df.schema.simpleString())\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    assert shutil.which("python3", path=env["PATH"]) == str(bin_dir / "python3")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "No module named 'sluicegate'" not in done.stderr
    assert f"SCHEMA {SCHEMAS[connector_of(snippet)]}" in done.stdout


def test_the_readme_s_session_has_sluicegate_s_jar_and_spark_s_own_kafka_source(tmp_path: Path) -> None:
    """The README's own session (issue 51 item 2: nothing said how to get Spark's Kafka
    source beside ours): both formats load a Kafka stream in it."""
    (session,) = [b for b in readme_python_blocks() if "SparkSession.builder" in b]
    check = """
for fmt in ("kafka", "sluicegate"):
    reader = spark.readStream.format(fmt).option("subscribe", "orders")
    df = reader.option("kafka.bootstrap.servers", "127.0.0.1:9").load()
    print("SCHEMA", fmt, df.schema.simpleString())
print("JARS", spark.conf.get("spark.jars"))
spark.stop()
"""
    script = tmp_path / "session.py"
    script.write_text(session + check, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for fmt in ("kafka", "sluicegate"):
        assert f"SCHEMA {fmt} {SCHEMAS['kafka']}" in done.stdout, done.stdout
    assert "sluicegate-spark.jar" in done.stdout and "spark-sql-kafka-0-10_2.13-4.2.0.jar" in done.stdout
