"""Where the JVM read path's jar is, and what else its session needs on the classpath.

The jar (``jvm_sources/``, Java 17) is built at install time by
``python -m sluicegate.devtools.jvm_build`` (``make install``) into
``<cache>/jvm-read-path/<key>/``, where ``<key>`` digests the Java sources and the
PySpark version it was compiled against: a source edit or another PySpark is another
build, and every clone on a machine shares one. Next to the jar, ``classpath.txt`` lists
the jars of Spark's Kafka source it was compiled against that PySpark does not ship
(kafka-clients, spark-sql-kafka ...): the session needs them too, since the executors
read with Spark's Kafka readers. Nothing here builds or downloads anything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from sluicegate.cache_dir import cache_root

SOURCES = Path(__file__).resolve().parent / "jvm_sources"
JAR_NAME = "sluicegate-spark.jar"
CLASSPATH_FILE = "classpath.txt"
SOURCE_CLASS = "sluicegate.spark.jvm.SluicegateSource"
BUILD_COMMAND = "python -m sluicegate.devtools.jvm_build (make install runs it; it needs a JDK 17)"


@dataclass(frozen=True)
class JvmClasspath:
    """The built jar and the jars of Spark's Kafka source it needs beside it."""

    jar: Path
    kafka_jars: tuple[Path, ...]


def source_files() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file())


def build_key() -> str:
    """A digest of the Java sources (names and contents) and of the PySpark they compile against."""
    import pyspark

    digest = hashlib.sha256(pyspark.__version__.encode())
    for path in source_files():
        digest.update(str(path.relative_to(SOURCES)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    return cache_root() / "jvm-read-path" / build_key()


def built() -> JvmClasspath | None:
    """The classpath of the current sources' build, or None if they were not built (or a
    jar it lists is gone)."""
    where = build_dir()
    jar, listing = where / JAR_NAME, where / CLASSPATH_FILE
    if not (jar.is_file() and listing.is_file()):
        return None
    kafka_jars = tuple(Path(line) for line in listing.read_text().splitlines() if line.strip())
    if not all(path.is_file() for path in kafka_jars):
        return None
    return JvmClasspath(jar, kafka_jars)


def jvm_read_path_jars() -> list[str]:
    """What ``spark.jars`` needs for ``readPath=jvm``: the jar and Spark's Kafka source
    (the jars PySpark does not ship); none when the jar is not built."""
    classpath = built()
    if classpath is None:
        return []
    return [str(classpath.jar), *(str(path) for path in classpath.kafka_jars)]
