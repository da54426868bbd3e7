"""Jars from Maven Central, resolved once into the sluicegate cache.

``resolve_jars`` writes a throwaway ``pom.xml`` naming some artifacts, runs
``mvn dependency:copy-dependencies`` under an exclusive ``flock``, and publishes the
result by renaming a finished ``libs`` directory into place, then writing a
``.resolved`` marker. Next to ``libs`` it keeps ``manifest.tsv``: the group, artifact,
version and file name of every jar, so a caller can tell exactly which artifact a jar is.

Two callers: the local broker (``sluicegate.devtools.broker.local.ensure_kafka_artifacts``,
``<cache root>/kafka-3.9.1``) and Spark's own Kafka source for the benchmarks
(``ensure_spark_kafka_jars``, ``<cache root>/spark-sql-kafka-4.2.0``).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sluicegate.cache_dir import cache_root

#: (groupId, artifactId, version)
Coordinate = tuple[str, str, str]
Echo = Callable[[str], None]

MARKER = ".resolved"
MANIFEST = "manifest.tsv"

SPARK_KAFKA_VERSION = "4.2.0"
SPARK_SCALA_VERSION = "2.13"
#: Spark's Kafka source (there is no 4.3.0 on Maven Central; 4.2.0 runs on pyspark 4.3).
SPARK_KAFKA_ARTIFACTS: tuple[Coordinate, ...] = (
    ("org.apache.spark", f"spark-sql-kafka-0-10_{SPARK_SCALA_VERSION}", SPARK_KAFKA_VERSION),
)


class MavenError(RuntimeError):
    """Maven is missing or could not resolve the artifacts."""


@dataclass(frozen=True)
class ResolvedJar:
    """One jar of a resolution: its Maven coordinates and where it lies in ``libs``."""

    group_id: str
    artifact_id: str
    version: str
    path: Path


def stderr_echo(message: str) -> None:
    print(f"sluicegate maven: {message}", file=sys.stderr, flush=True)


def require_executable(name: str, purpose: str, hint: str = "", error: type[Exception] = MavenError) -> str:
    """The path of ``name`` on PATH, or ``error`` saying what it was needed for."""
    path = shutil.which(name)
    if path is None:
        raise error(
            f"`{name}` was not found on PATH; it is needed to {purpose}. Install it (Java 17+ and Maven 3.8+)"
            + (f", {hint}" if hint else "")
            + "."
        )
    return path


def pom_xml(artifact_id: str, version: str, artifacts: Iterable[Coordinate]) -> str:
    """A ``pom``-packaged project depending on ``artifacts`` (nothing else)."""
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in artifacts
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.sluicegate.local</groupId>
  <artifactId>{artifact_id}</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def is_resolved(base: Path) -> bool:
    """True if ``base`` holds a finished resolution (marker and ``libs``)."""
    return (base / MARKER).is_file() and (base / "libs").is_dir()


def resolve_jars(
    base: Path,
    artifacts: Sequence[Coordinate],
    *,
    project: str,
    version: str,
    label: str,
    echo: Echo = stderr_echo,
) -> Path:
    """Resolve ``artifacts`` and their runtime dependencies into ``base/libs`` once; return it.

    Idempotent and safe when several processes race: resolution runs under an exclusive
    ``flock`` on ``base/.lock`` and is published by renaming a finished directory into place
    and then writing the ``.resolved`` marker. ``project``/``version`` name the generated
    pom; ``label`` names the artifacts in messages ("Apache Kafka 3.9.1").
    """
    libs = base / "libs"
    if is_resolved(base):
        return libs
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        if not _try_flock(lock):
            echo(f"waiting for another process resolving {label} into {base}...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if is_resolved(base):
            return libs
        mvn = require_executable("mvn", f"resolve {label} from Maven Central")
        echo(f"Resolving {label} from Maven Central into {base} (first run only)...")
        started = time.monotonic()
        pom = base / "pom.xml"
        pom.write_text(pom_xml(project, version, artifacts), encoding="utf-8")
        repo_staging = base / "repo.partial"
        staging = base / "libs.partial"
        for d in (repo_staging, staging):
            shutil.rmtree(d, ignore_errors=True)
        # The repository layout (group/artifact/version/file) tells each jar's coordinates
        # exactly; the jars are then laid flat in libs/ under their usual names.
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={repo_staging}",
            "-Dmdep.useRepositoryLayout=true",
        ]
        proc = subprocess.run(cmd, cwd=base, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        found = sorted(repo_staging.rglob("*.jar")) if repo_staging.is_dir() else []
        if proc.returncode != 0 or not found:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise MavenError(
                f"Maven could not resolve {label} (exit {proc.returncode}); command: {' '.join(cmd)}\n{tail}"
            )
        staging.mkdir()
        rows: list[str] = []
        for jar in found:
            parts = jar.relative_to(repo_staging).parts
            if len(parts) < 4:
                raise MavenError(f"unexpected path {jar} in Maven's repository layout")
            group_id, artifact_id, jar_version = ".".join(parts[:-3]), parts[-3], parts[-2]
            target = staging / jar.name
            if target.exists():
                raise MavenError(f"two resolved artifacts share the jar name {jar.name}")
            jar.rename(target)
            rows.append(f"{group_id}\t{artifact_id}\t{jar_version}\t{jar.name}")
        shutil.rmtree(repo_staging, ignore_errors=True)
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        (base / MANIFEST).write_text("\n".join(rows) + "\n", encoding="utf-8")
        (base / MARKER).write_text(f"{version}\n{len(rows)} jars\n", encoding="utf-8")
        echo(f"resolved {len(rows)} jars in {time.monotonic() - started:.0f}s")
        return libs


def resolved_jars(base: Path) -> list[ResolvedJar]:
    """The jars of a finished resolution in ``base``, from its manifest.

    Resolutions made before the manifest existed only have the jars: their coordinates are
    then guessed from the file names (artifact ``name`` and version ``1.2.3...`` of
    ``name-1.2.3....jar``; the group is empty).
    """
    libs = base / "libs"
    manifest = base / MANIFEST
    if manifest.is_file():
        jars = []
        for line in manifest.read_text(encoding="utf-8").splitlines():
            if line.strip():
                group_id, artifact_id, version, name = line.split("\t")
                jars.append(ResolvedJar(group_id, artifact_id, version, libs / name))
        return jars
    guessed = []
    for jar in sorted(libs.glob("*.jar")):
        match = re.fullmatch(r"(.+?)-(\d+\.\d.*)\.jar", jar.name)
        artifact_id, version = (match.group(1), match.group(2)) if match else (jar.stem, "")
        guessed.append(ResolvedJar("", artifact_id, version, jar))
    return guessed


def pyspark_jars_dir() -> Path:
    """The ``jars`` directory of the Spark that pyspark launches: ``$SPARK_HOME/jars`` if
    ``SPARK_HOME`` is set, else the one inside the installed pyspark package."""
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and (Path(spark_home) / "jars").is_dir():
        return Path(spark_home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise MavenError("pyspark is not installed and SPARK_HOME is not set: no Spark jars to compare with")
    return Path(spec.origin).parent / "jars"


def shipped_by(jars_dir: Path, artifact_id: str) -> bool:
    """True if ``jars_dir`` has a jar of ``artifact_id`` (``<artifact_id>-<version>[...].jar``),
    whatever its version."""
    pattern = re.compile(re.escape(artifact_id) + r"-\d[^/]*\.jar")
    return any(pattern.fullmatch(p.name) for p in jars_dir.glob("*.jar"))


def spark_kafka_dir() -> Path:
    """Where Spark's Kafka source jars live (``<cache root>/spark-sql-kafka-4.2.0``)."""
    return cache_root() / f"spark-sql-kafka-{SPARK_KAFKA_VERSION}"


def ensure_spark_kafka_jars(echo: Echo = stderr_echo, spark_jars: Path | None = None) -> list[Path]:
    """Spark's Kafka source (``format("kafka")``) as jars to give ``spark.jars`` / ``--jars``.

    ``spark-sql-kafka-0-10_2.13`` and its runtime dependencies are resolved from Maven
    Central once into ``<cache root>/spark-sql-kafka-4.2.0/libs``. Returned: the jars
    whose artifact the Spark installation (``spark_jars``, default ``pyspark_jars_dir()``)
    does not already ship, in any version — kafka-clients, spark-token-provider-kafka,
    commons-pool2 and spark-sql-kafka itself; not scala-library, hadoop-client-*,
    slf4j-api, lz4, snappy, spark-tags... which would clash with Spark's own. The filter
    runs at each call, against the Spark installed now.
    """
    base = spark_kafka_dir()
    resolve_jars(
        base,
        SPARK_KAFKA_ARTIFACTS,
        project="spark-sql-kafka-runtime",
        version=SPARK_KAFKA_VERSION,
        label=f"Spark's Kafka source {SPARK_KAFKA_VERSION}",
        echo=echo,
    )
    jars_dir = spark_jars if spark_jars is not None else pyspark_jars_dir()
    if not jars_dir.is_dir():
        raise MavenError(f"{jars_dir} is not a directory of Spark jars")
    return [j.path for j in resolved_jars(base) if not shipped_by(jars_dir, j.artifact_id)]


def _try_flock(lock: IO[Any]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
