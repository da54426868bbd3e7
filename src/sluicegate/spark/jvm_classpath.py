"""Where the JVM read path's jar is, and what else its session needs on the classpath.

The jar (``jvm_sources/``, Java 17) is package data: ``jvm/sluicegate-spark.jar``, built
when the wheel is built (``python -m sluicegate.devtools.jvm_build``, which ``make
install`` and the wheel build run) and shipped inside it, so an install needs no JDK.
Next to it, ``jvm/classpath.tsv`` names the jars of Spark's Kafka source it was compiled
against that PySpark does not ship (kafka-clients, spark-sql-kafka ...), with their
sha256, after a first line ``key <digest of the Java sources>``: the session needs them
too, since the executors read with Spark's Kafka readers. They are fetched from Maven
Central once per machine (``maven_central``). A jar whose key is not the digest of the
sources beside it is stale (a checkout whose Java changed since): not used.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from sluicegate.spark.maven_central import JarFetchError, MavenJar, ensure_jar

log = logging.getLogger("sluicegate.spark")

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "jvm_sources"
BUILT = HERE / "jvm"
JAR = BUILT / "sluicegate-spark.jar"
CLASSPATH_FILE = BUILT / "classpath.tsv"
SOURCE_CLASS = "sluicegate.spark.jvm.SluicegateSource"
BUILD_COMMAND = "python -m sluicegate.devtools.jvm_build (make install runs it; it needs a JDK 17)"


@dataclass(frozen=True)
class JvmClasspath:
    """The built jar and the jars of Spark's Kafka source it needs beside it."""

    jar: Path
    kafka_jars: tuple[MavenJar, ...]


def source_files() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file())


def build_key() -> str:
    """A digest of the Java sources (names and contents)."""
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(str(path.relative_to(SOURCES)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def classpath_listing(kafka_jars: tuple[MavenJar, ...]) -> str:
    """What ``classpath.tsv`` holds for a build of the current sources."""
    return "".join([f"key {build_key()}\n", *(f"{jar.to_row()}\n" for jar in kafka_jars)])


def built() -> JvmClasspath | None:
    """The jar of the current sources and the Kafka jars it needs, or None if this install
    has no jar (or a stale one). Reads files only: nothing is fetched."""
    if not (JAR.is_file() and CLASSPATH_FILE.is_file()):
        return None
    first, *rows = CLASSPATH_FILE.read_text().splitlines()
    if first != f"key {build_key()}":
        return None
    return JvmClasspath(JAR, tuple(MavenJar.from_row(row) for row in rows if row.strip()))


def jvm_read_path_jars() -> list[str]:
    """What ``spark.jars`` needs for ``readPath=jvm``: the jar and Spark's Kafka source
    (fetched from Maven Central the first time); none when this install has no jar, or
    when they cannot be fetched (logged: ``readPath=jvm`` then fails naming the path it lacks)."""
    classpath = built()
    if classpath is None:
        return []
    try:
        kafka_jars = [str(ensure_jar(jar)) for jar in classpath.kafka_jars]
    except JarFetchError as exc:
        log.warning("the JVM read path is not in this session: %s", exc)
        return []
    return [str(classpath.jar), *kafka_jars]
