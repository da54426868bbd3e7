"""Build the JVM read path's jar (``make install``, the wheel build):
``python -m sluicegate.devtools.jvm_build``.

Compiles ``sluicegate/spark/jvm_sources`` with ``javac --release 17`` against PySpark's
jars and Spark's Kafka source (resolved from Maven Central once, as for the benchmarks),
into the package's ``spark/jvm/`` (``jvm_classpath.JAR``, package data the wheel ships),
with ``classpath.tsv`` naming the Kafka jars and their sha256; the Kafka jars are put in
the machine's cache too, where a session finds them without a download. ~3 s, and nothing
at all when the current sources were built before. Prints one line either way; without a
JDK, or if the build fails, the line says so and exits 0 (``--required``: exits 1, as the
wheel build does: a wheel without its jar is not one to ship).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sluicegate.devtools.broker.maven import (
    MavenError,
    ensure_spark_kafka_jars,
    pyspark_jars_dir,
    resolved_jars,
    spark_kafka_dir,
)
from sluicegate.spark.jvm_classpath import BUILT, CLASSPATH_FILE, JAR, SOURCES, JvmClasspath, built, classpath_listing
from sluicegate.spark.maven_central import MavenJar, place_jar, sha256_of


class JvmBuildError(RuntimeError):
    """The jar could not be built (no JDK, Maven unreachable, a compile error)."""


def build() -> tuple[JvmClasspath, bool]:
    """The jar of the current sources, built if it was not; and whether it was built now."""
    existing = built()
    if existing is not None:
        return existing, False
    for tool in ("javac", "jar"):
        if shutil.which(tool) is None:
            raise JvmBuildError(f"{tool} not found (a JDK 17 or later builds it)")
    try:
        kafka_paths = tuple(ensure_spark_kafka_jars())
    except MavenError as exc:
        raise JvmBuildError(f"Spark's Kafka source jars: {exc}") from None
    kafka_jars = _as_maven_jars(kafka_paths)
    BUILT.mkdir(exist_ok=True)
    # built in a directory of its own, then renamed into place: a concurrent build or an
    # interrupted one never leaves a half-written jar where built() looks
    with tempfile.TemporaryDirectory(dir=BUILT, prefix=".building-") as work:
        classes = Path(work) / "classes"
        classes.mkdir()
        _compile(classes, kafka_paths)
        shutil.copytree(SOURCES / "META-INF", classes / "META-INF")
        staged = Path(work) / JAR.name
        _run(["jar", "cf", str(staged), "-C", str(classes), "."])
        os.replace(staged, JAR)
        listing = Path(work) / CLASSPATH_FILE.name
        listing.write_text(classpath_listing(kafka_jars))
        os.replace(listing, CLASSPATH_FILE)
    result = built()
    assert result is not None
    return result, True


def _as_maven_jars(paths: tuple[Path, ...]) -> tuple[MavenJar, ...]:
    """The resolved jars with their coordinates and digests, each placed in the cache."""
    by_path = {j.path: j for j in resolved_jars(spark_kafka_dir())}
    jars = []
    for path in paths:
        resolved = by_path[path]
        jar = MavenJar(resolved.group_id, resolved.artifact_id, resolved.version, sha256_of(path))
        place_jar(jar, path)
        jars.append(jar)
    return tuple(jars)


def _compile(classes: Path, kafka_jars: tuple[Path, ...]) -> None:
    sources = [str(p) for p in sorted(SOURCES.rglob("*.java"))]
    classpath = os.pathsep.join([str(pyspark_jars_dir() / "*"), *(str(p) for p in kafka_jars)])
    _run(["javac", "--release", "17", "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", str(classes), *sources])


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise JvmBuildError(f"{command[0]} failed: {(done.stderr or done.stdout).strip()[-2000:]}")


def main() -> int:
    try:
        classpath, now = build()
    except JvmBuildError as exc:
        print(f"jvm read path: not built, {exc} (format('sluicegate') reads with the Python read paths)")
        return 1 if "--required" in sys.argv[1:] else 0
    print(f"jvm read path: {'built' if now else 'up to date'} ({classpath.jar})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
