"""``register(spark)`` warns where the executors' Python (``spark.pyspark.python``) is a path
relative to a ``spark.archives`` directory the driver does not have: the driver starts that
Python too, to plan the source (docs/deploy.md, "Spark on a cluster")."""

from __future__ import annotations

from pathlib import Path

from sluicegate.spark.datasource import driver_python_missing


def test_an_archive_relative_python_missing_on_the_driver_is_named_with_what_to_do(tmp_path: Path) -> None:
    said = driver_python_missing("./environment/bin/python", str(tmp_path))
    assert said is not None and "./environment/bin/python" in said and str(tmp_path) in said
    assert "docs/deploy.md" in said


def test_a_python_the_driver_can_start_is_not_warned_about(tmp_path: Path) -> None:
    (tmp_path / "environment" / "bin").mkdir(parents=True)
    (tmp_path / "environment" / "bin" / "python").write_text("")
    assert driver_python_missing("./environment/bin/python", str(tmp_path)) is None, "linked there"
    assert driver_python_missing("/opt/venv/bin/python", str(tmp_path)) is None, "absolute: the deployment's"
    assert driver_python_missing("python3", str(tmp_path)) is None, "a name on PATH"
