"""``sluicegate doctor``: the report of an install, from the files it has (issue 52 item 5).

Installs are made of real files in a temporary directory (a package's ``spark/jvm`` and
``spark/jvm_sources``, a Maven cache, a ``java`` that prints a version), and the native
reader is a module name that imports or does not.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sluicegate.cli import app
from sluicegate.doctor import (
    PACKAGE,
    WIDTH,
    InstallReport,
    collect,
    fetch_kafka_jars,
    find_java,
    java_major,
    render,
    sources_key,
)
from sluicegate.spark.jvm_classpath import CLASSPATH_FILE, SOURCES, build_key
from sluicegate.spark.maven_central import MavenJar

KAFKA_JAR = b"the bytes of kafka-clients"
NO_NATIVE = "sluicegate._no_native_here"


def a_package(root: Path, key: str | None = None, jar: bool = True) -> Path:
    """A sluicegate package with Java sources, a jar and its classpath.tsv (``key``: the
    sources' own unless given), naming one Kafka jar."""
    package = root / "sluicegate"
    sources = package / "spark" / "jvm_sources" / "sluicegate"
    sources.mkdir(parents=True)
    (sources / "Source.java").write_text("class Source {}\n")
    built = package / "spark" / "jvm"
    built.mkdir()
    if jar:
        (built / "sluicegate-spark.jar").write_bytes(b"PK")
    sha = hashlib.sha256(KAFKA_JAR).hexdigest()
    key = key or sources_key(package / "spark" / "jvm_sources")
    (built / "classpath.tsv").write_text(f"key {key}\norg.apache.kafka\tkafka-clients\t3.9.2\t{sha}\n")
    return package


def a_java(root: Path, version: str) -> dict[str, str]:
    """An environment whose PATH has only a ``java`` printing ``version`` as OpenJDK does."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2025-04-15' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return {"PATH": str(bin_dir)}


def fits(report: InstallReport) -> list[str]:
    lines = render(report)
    too_wide = [line for line in lines if len(line) > WIDTH and " " in line.strip()]
    assert not too_wide, "\n".join(too_wide)
    return lines


def test_an_install_with_its_fast_paths_reports_them_and_is_ok(tmp_path: Path) -> None:
    package = a_package(tmp_path)
    cached = tmp_path / "cache" / "maven" / "org" / "apache" / "kafka" / "kafka-clients" / "3.9.2"
    cached.mkdir(parents=True)
    (cached / "kafka-clients-3.9.2.jar").write_bytes(KAFKA_JAR)
    report = collect(package, cache=tmp_path / "cache", environ=a_java(tmp_path, "17.0.15"))
    assert report.native.available and report.native.librdkafka
    assert report.jvm.usable and report.jvm.jar == package / "spark" / "jvm" / "sluicegate-spark.jar"
    assert [j.state for j in report.jvm.kafka_jars] == ["cached"]
    assert report.java.major == 17 and report.java.found_by == "PATH"
    assert report.kafka_path.startswith("native")
    assert report.ok, report.problems
    said = "\n".join(fits(report))
    assert "librdkafka" in said and str(report.jvm.jar) in said and "in the cache" in said
    assert said.endswith("ok: this install has its fast paths")


def test_no_native_reader_is_missing_with_its_fix_and_kafka_reads_with_python(tmp_path: Path) -> None:
    report = collect(a_package(tmp_path), NO_NATIVE, tmp_path / "cache", a_java(tmp_path, "17.0.2"))
    assert not report.native.available and NO_NATIVE in (report.native.why_not or "")
    assert report.kafka_path.startswith("python")
    if report.extra("pyspark").version is not None:  # readPath=auto's choice without it
        assert report.kafka_path.endswith("in Spark with the jar: jvm")
    assert not report.ok
    [problem] = report.problems
    assert "native Kafka reader" in problem.what and "pip install" in problem.fix
    said = "\n".join(fits(report))
    assert "native Kafka reader  NO" in said and "missing:" in said and "make install" in said


def test_a_missing_jar_and_a_stale_one_are_missing_with_the_build_command(tmp_path: Path) -> None:
    java = a_java(tmp_path, "21.0.1")
    missing = collect(a_package(tmp_path / "a", jar=False), cache=tmp_path / "cache", environ=java)
    stale = collect(a_package(tmp_path / "b", key="0123456789abcdef"), cache=tmp_path / "cache", environ=java)
    assert not missing.jvm.present and not stale.jvm.usable and stale.jvm.present
    for report, word in ((missing, "NO"), (stale, "STALE")):
        [problem] = report.problems
        assert "python -m sluicegate.devtools.jvm_build" in problem.fix
        assert report.files_path.startswith("python")
        assert f"JVM read path jar    {word}" in "\n".join(fits(report))


def test_kafka_jars_not_cached_are_fetched_at_first_use_and_a_wrong_one_is_a_problem(tmp_path: Path) -> None:
    package = a_package(tmp_path)
    java = a_java(tmp_path, "17.0.15")
    report = collect(package, cache=tmp_path / "cache", environ=java)
    assert [j.state for j in report.jvm.kafka_jars] == ["to fetch"] and report.ok
    assert "sluicegate doctor --fetch" in " ".join(" ".join(fits(report)).split())
    wrong = report.jvm.kafka_jars[0].cached
    wrong.parent.mkdir(parents=True)
    wrong.write_bytes(b"something else")
    report = collect(package, cache=tmp_path / "cache", environ=java)
    [problem] = report.problems
    assert "kafka-clients-3.9.2.jar" in problem.what and f"rm {wrong}" in problem.fix


def test_fetch_puts_the_missing_kafka_jars_in_the_cache_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository = tmp_path / "repository" / "org" / "apache" / "kafka" / "kafka-clients" / "3.9.2"
    repository.mkdir(parents=True)
    (repository / "kafka-clients-3.9.2.jar").write_bytes(KAFKA_JAR)
    monkeypatch.setenv("SLUICEGATE_MAVEN_REPOSITORY", (tmp_path / "repository").as_uri())
    monkeypatch.setenv("SLUICEGATE_CACHE_DIR", str(tmp_path / "cache"))
    package = a_package(tmp_path)
    report = collect(package, environ=a_java(tmp_path, "17.0.15"))
    assert fetch_kafka_jars(report) == []
    assert [j.state for j in collect(package).jvm.kafka_jars] == ["cached"]


def test_spark_needs_java_17(tmp_path: Path) -> None:
    report = collect(a_package(tmp_path), cache=tmp_path / "cache", environ=a_java(tmp_path, "11.0.22"))
    assert report.java.major == 11
    if report.extra("pyspark").version is None:
        assert report.ok  # a base install runs no Spark
        return
    [problem] = report.problems
    assert "Java 17+" in problem.what and "JAVA_HOME" in problem.fix
    no_java = collect(a_package(tmp_path / "b"), cache=tmp_path / "cache", environ={"PATH": str(tmp_path / "none")})
    assert no_java.java.command is None and not no_java.ok
    assert "java                 none on PATH" in "\n".join(fits(no_java))


def test_java_home_is_the_java_spark_starts(tmp_path: Path) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    a_java(tmp_path, "1.8.0_392")
    os.replace(tmp_path / "bin" / "java", home / "bin" / "java")
    java = find_java({"JAVA_HOME": str(home), "PATH": str(tmp_path / "elsewhere")})
    assert (java.command, java.found_by, java.version, java.major) == (
        home / "bin" / "java",
        "JAVA_HOME",
        "1.8.0_392",
        8,
    )
    assert java_major("17.0.15") == 17 and java_major("21") == 21
    nowhere = find_java({"JAVA_HOME": str(tmp_path / "no-jdk"), "PATH": str(home / "bin")})
    assert nowhere.missing and nowhere.command == tmp_path / "no-jdk" / "bin" / "java", "JAVA_HOME wins over PATH"


def test_a_read_path_forced_to_something_unknown_is_a_problem(tmp_path: Path) -> None:
    environ = {**a_java(tmp_path, "17.0.15"), "SLUICEGATE_KAFKA_READ_PATH": "fast"}
    report = collect(a_package(tmp_path), cache=tmp_path / "cache", environ=environ)
    [problem] = report.problems
    assert "SLUICEGATE_KAFKA_READ_PATH='fast'" in problem.what
    forced = collect(
        a_package(tmp_path / "b"), cache=tmp_path / "cache", environ={**environ, "SLUICEGATE_KAFKA_READ_PATH": "python"}
    )
    assert forced.ok and forced.kafka_path == "python (SLUICEGATE_KAFKA_READ_PATH=python)"


def test_the_checkout_is_checked_as_the_jvm_read_path_checks_it() -> None:
    """The doctor reads the JVM read path's files itself (a base install cannot import
    ``sluicegate.spark``): its key and cache places are jvm_classpath's and maven_central's."""
    assert sources_key(SOURCES) == build_key()
    report = collect()
    assert report.package == PACKAGE and report.jvm.jar.parent == CLASSPATH_FILE.parent
    rows = [row for row in CLASSPATH_FILE.read_text().splitlines()[1:] if row.strip()]
    assert [j.row for j in report.jvm.kafka_jars] == rows
    assert [j.cached for j in report.jvm.kafka_jars] == [MavenJar.from_row(row).cached() for row in rows]


def test_the_command_prints_the_report_and_exits_by_it() -> None:
    result = CliRunner().invoke(app, ["doctor"])
    report = collect()
    assert result.exit_code == (0 if report.ok else 1), result.output
    assert result.output.splitlines() == render(report)
