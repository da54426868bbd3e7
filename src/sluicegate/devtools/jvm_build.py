"""Build the JVM read path's jar (``make install``): ``python -m sluicegate.devtools.jvm_build``.

Compiles ``sluicegate/spark/jvm_sources`` with ``javac --release 17`` against PySpark's
jars and Spark's Kafka source (resolved from Maven Central once, as for the benchmarks),
into the build directory ``jvm_classpath.build_dir()`` names: ~3 s, and nothing at all
when the current sources were built before. Prints one line either way; without a JDK, or
if the build fails, the line says so and exits 0: ``format("sluicegate")`` then reads with
the Python read paths only, and ``readPath=jvm`` fails naming the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sluicegate.devtools.broker.maven import MavenError, ensure_spark_kafka_jars, pyspark_jars_dir
from sluicegate.spark.jvm_classpath import CLASSPATH_FILE, JAR_NAME, SOURCES, JvmClasspath, build_dir, built


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
        kafka_jars = tuple(ensure_spark_kafka_jars())
    except MavenError as exc:
        raise JvmBuildError(f"Spark's Kafka source jars: {exc}") from None
    target = build_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    # built in a directory of its own, then renamed into place: a concurrent build or an
    # interrupted one never leaves a half-written jar where built() looks
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".building-") as work:
        staging = Path(work) / "out"
        classes = staging / "classes"
        classes.mkdir(parents=True)
        _compile(classes, kafka_jars)
        shutil.copytree(SOURCES / "META-INF", classes / "META-INF")
        _run(["jar", "cf", str(staging / JAR_NAME), "-C", str(classes), "."])
        shutil.rmtree(classes)
        (staging / CLASSPATH_FILE).write_text("".join(f"{path}\n" for path in kafka_jars))
        try:
            os.rename(staging, target)
        except OSError:
            if built() is None:  # not a concurrent build that finished first
                raise
    result = built()
    assert result is not None
    return result, True


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
        return 0
    print(f"jvm read path: {'built' if now else 'up to date'} ({classpath.jar})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
