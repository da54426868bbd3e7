"""``sluicegate doctor``: what this install has, and which read paths it takes.

``collect`` looks at the install and returns an ``InstallReport`` (nothing is printed,
fetched or started: it reads files and package metadata, imports the native module, and
runs ``java -version``); ``render`` turns a report into lines for people, 80 columns wide;
``fetch_kafka_jars`` fetches the Kafka jars of the JVM read path into the machine's cache
(``sluicegate doctor --fetch``). The report's ``problems`` are what a user of this install
expects and lacks, each with the command that fixes it: none is exit 0.

The JVM read path is checked from its files, without importing ``sluicegate.spark`` (which
needs pyspark, and a base install has none): the jar, ``classpath.tsv`` and the digest of
the Java sources beside them, computed as ``jvm_classpath.build_key`` does (a unit test
holds the two equal), and the Kafka jars in the cache as ``MavenJar.cached`` places them.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import sluicegate
from sluicegate.cache_dir import cache_root
from sluicegate.extras import PYSPARK_TESTED, require
from sluicegate_connectors.kafka.read_path import ENV as KAFKA_READ_PATH_ENV
from sluicegate_connectors.kafka.read_path import PATHS as KAFKA_READ_PATHS

PACKAGE = Path(sluicegate.__file__).resolve().parent
NATIVE_MODULE = "sluicegate._native"
JAVA_NEEDED = 17
"""Spark 4 runs on Java 17 or later."""
WIDTH = 80

FIX_NATIVE = (
    "pip install --force-reinstall sluicegate (a wheel for this platform), or make install in a checkout (cargo)"
)
FIX_JAR = (
    "pip install --force-reinstall sluicegate, or in a checkout (a JDK 17): python -m sluicegate.devtools.jvm_build"
)
FIX_PYSPARK = "pip install 'sluicegate[spark]'"
FIX_JAVA = "install a Java 17+ runtime (apt-get install openjdk-17-jre-headless), or set JAVA_HOME to one"


@dataclass(frozen=True)
class Problem:
    """Something a user of this install expects and lacks, and the command that fixes it."""

    what: str
    fix: str


@dataclass(frozen=True)
class NativeReader:
    """``sluicegate._native``: the kafka connector's native read path (librdkafka into Arrow)."""

    module: Path | None
    librdkafka: str | None
    why_not: str | None = None

    @property
    def available(self) -> bool:
        return self.module is not None


@dataclass(frozen=True)
class KafkaJar:
    """One jar of Spark's Kafka source the JVM read path needs (``classpath.tsv``'s row)."""

    group_id: str
    artifact_id: str
    version: str
    sha256: str
    cached: Path
    state: str
    """``cached`` (the file, its digest the wheel's), ``to fetch`` or ``other digest``."""

    @property
    def file_name(self) -> str:
        return f"{self.artifact_id}-{self.version}.jar"

    @property
    def row(self) -> str:
        """Its row in ``classpath.tsv``."""
        return "\t".join((self.group_id, self.artifact_id, self.version, self.sha256))


@dataclass(frozen=True)
class JvmJar:
    """The JVM read path's jar (package data) and the Kafka jars it needs beside it."""

    jar: Path
    present: bool
    key: str | None
    """``classpath.tsv``'s build key (None: no classpath.tsv)."""
    sources_key: str
    """The digest of the Java sources beside the jar: the key of a jar built from them."""
    kafka_jars: tuple[KafkaJar, ...]
    cache: Path
    """Where the Kafka jars are looked for: ``<cache>/maven``."""

    @property
    def usable(self) -> bool:
        return self.present and self.key == self.sources_key


@dataclass(frozen=True)
class Extra:
    """An optional dependency (pyproject's extra ``extra``) and its installed version."""

    name: str
    extra: str
    version: str | None
    supported: bool = True


@dataclass(frozen=True)
class Java:
    """The ``java`` Spark starts: ``$JAVA_HOME/bin/java`` if JAVA_HOME is set, else PATH's."""

    command: Path | None
    found_by: str
    version: str | None
    major: int | None
    missing: bool = False
    """No ``java`` there (``command``: where JAVA_HOME says it is, or None: not on PATH)."""


@dataclass(frozen=True)
class InstallReport:
    version: str
    package: Path
    editable: bool
    python: Path
    python_version: str
    native: NativeReader
    jvm: JvmJar
    extras: tuple[Extra, ...]
    java: Java
    kafka_path: str
    files_path: str
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def extra(self, name: str) -> Extra:
        return next(e for e in self.extras if e.name == name)


def collect(
    package: Path = PACKAGE,
    native_module: str = NATIVE_MODULE,
    cache: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> InstallReport:
    """This install's report: sluicegate's package at ``package`` (its ``spark/jvm`` and
    ``spark/jvm_sources``), the native reader ``native_module``, the Kafka jars under
    ``cache`` (default: the machine's sluicegate cache), Java and the read path found
    through ``environ`` (default: this process's)."""
    env = os.environ if environ is None else environ
    native = native_reader(native_module)
    jvm = jvm_jar(package, cache_root() if cache is None else cache)
    extras = (
        pyspark_extra(_installed_version("pyspark")),
        Extra("matplotlib", "plots", _installed_version("matplotlib")),
    )
    java = find_java(env)
    kafka_path, forced_wrong = kafka_default(native, env)
    problems: list[Problem] = []
    if not native.available:
        problems.append(Problem(f"the native Kafka reader ({native.why_not})", FIX_NATIVE))
    if forced_wrong:
        problems.append(Problem(forced_wrong, f"unset {KAFKA_READ_PATH_ENV}, or set it to native or python"))
    if not jvm.present:
        problems.append(Problem(f"the JVM read path's jar ({jvm.jar} is not there)", FIX_JAR))
    elif not jvm.usable:
        problems.append(Problem("the JVM read path's jar: built from other Java sources (stale)", FIX_JAR))
    for kafka_jar in jvm.kafka_jars:
        if kafka_jar.state == "other digest":
            problems.append(
                Problem(
                    f"{kafka_jar.file_name} in the cache is not the file sluicegate was built with",
                    f"rm {kafka_jar.cached}; sluicegate doctor --fetch",
                )
            )
    pyspark = extras[0]
    if pyspark.version is not None:
        if not pyspark.supported:
            problems.append(Problem(f"pyspark {pyspark.version} is not the tested {_tested_range()}", FIX_PYSPARK))
        if java.major is None or java.major < JAVA_NEEDED:
            if java.missing:
                what = "no java on PATH" if java.command is None else f"no java at {java.command} (JAVA_HOME)"
            else:
                what = f"java {java.version or 'of an unknown version'} ({java.command})"
            problems.append(Problem(f"Spark needs Java {JAVA_NEEDED}+: {what}", FIX_JAVA))
    return InstallReport(
        version=sluicegate.__version__,
        package=package,
        editable=_editable(),
        python=Path(sys.executable),
        python_version=sys.version.split()[0],
        native=native,
        jvm=jvm,
        extras=extras,
        java=java,
        kafka_path=kafka_in_spark(kafka_path, jvm, pyspark),
        files_path=files_default(jvm, pyspark),
        problems=tuple(problems),
    )


def native_reader(module_name: str = NATIVE_MODULE) -> NativeReader:
    """The native module imported, or why it does not import."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return NativeReader(None, None, str(exc) or type(exc).__name__)
    path = getattr(module, "__file__", None)
    return NativeReader(Path(path) if path else Path(module_name), str(getattr(module, "LIBRDKAFKA_VERSION", "?")))


def sources_key(sources: Path) -> str:
    """The digest of the Java sources under ``sources``: ``jvm_classpath.build_key``'s."""
    digest = hashlib.sha256()
    for path in sorted(p for p in sources.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(sources)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def jvm_jar(package: Path, cache: Path) -> JvmJar:
    spark = package / "spark"
    jar = spark / "jvm" / "sluicegate-spark.jar"
    listing = spark / "jvm" / "classpath.tsv"
    key: str | None = None
    kafka_jars: list[KafkaJar] = []
    if listing.is_file():
        first, *rows = listing.read_text().splitlines()
        key = first.removeprefix("key ").strip()
        kafka_jars = [_kafka_jar(row, cache) for row in rows if row.strip()]
    return JvmJar(jar, jar.is_file(), key, sources_key(spark / "jvm_sources"), tuple(kafka_jars), cache / "maven")


def _kafka_jar(row: str, cache: Path) -> KafkaJar:
    group_id, artifact_id, version, sha256 = row.split("\t")
    cached = cache / "maven" / group_id.replace(".", "/") / artifact_id / version / f"{artifact_id}-{version}.jar"
    state = "to fetch" if not cached.is_file() else "cached" if _sha256(cached) == sha256 else "other digest"
    return KafkaJar(group_id, artifact_id, version, sha256, cached, state)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pyspark_extra(version: str | None) -> Extra:
    if version is None:
        return Extra("pyspark", "spark", None)
    found = re.match(r"(\d+)\.(\d+)", version)
    minor = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    low, high = PYSPARK_TESTED
    return Extra("pyspark", "spark", version, low <= minor < high)


def _tested_range() -> str:
    (a, b), (c, d) = PYSPARK_TESTED
    return f">={a}.{b},<{c}.{d}"


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _editable() -> bool:
    try:
        text = importlib.metadata.distribution("sluicegate").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return False
    if not text:
        return False
    return bool(json.loads(text).get("dir_info", {}).get("editable", False))


def find_java(environ: Mapping[str, str]) -> Java:
    """The ``java`` PySpark's launcher runs (``$JAVA_HOME/bin/java``, else PATH's) and its version."""
    home = environ.get("JAVA_HOME", "").strip()
    if home:
        command: Path | None = Path(home) / "bin" / "java"
        found_by = "JAVA_HOME"
        if not command or not command.is_file():
            return Java(command, found_by, None, None, missing=True)
    else:
        on_path = shutil.which("java", path=environ.get("PATH", ""))
        command, found_by = (Path(on_path) if on_path else None), "PATH"
        if command is None:
            return Java(None, found_by, None, None, missing=True)
    try:
        done = subprocess.run(
            [str(command), "-version"], capture_output=True, text=True, check=False, timeout=30, env=dict(environ)
        )
    except (OSError, subprocess.TimeoutExpired):
        return Java(command, found_by, None, None)
    version = java_version(done.stderr + done.stdout)
    return Java(command, found_by, version, java_major(version) if version else None)


def java_version(text: str) -> str | None:
    """The version ``java -version`` prints: ``openjdk version "17.0.15" 2025-04-15``."""
    found = re.search(r'version "([^"]+)"', text)
    return found.group(1) if found else None


def java_major(version: str) -> int | None:
    """17 for ``17.0.15``, 8 for ``1.8.0_392``."""
    parts = re.findall(r"\d+", version)
    if not parts:
        return None
    major = int(parts[0])
    return int(parts[1]) if major == 1 and len(parts) > 1 else major


def kafka_default(native: NativeReader, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """The kafka connector's read path (read_path.read_path's rule), and what is wrong with
    ``SLUICEGATE_KAFKA_READ_PATH`` if it forces one it cannot take."""
    forced = environ.get(KAFKA_READ_PATH_ENV, "").strip().lower()
    if forced and forced not in KAFKA_READ_PATHS:
        return "python", f"{KAFKA_READ_PATH_ENV}={forced!r} is not native or python (readers fail at start)"
    if forced == "native" and not native.available:
        return "native, forced, but not installed", f"{KAFKA_READ_PATH_ENV}=native and no native reader"
    if forced:
        return f"{forced} ({KAFKA_READ_PATH_ENV}={forced})", None
    if native.available:
        return f"native (librdkafka {native.librdkafka} into Arrow)", None
    return "python (confluent-kafka): no native reader", None


def spark_jvm(jvm: JvmJar, pyspark: Extra) -> bool:
    """Whether a Spark session of this install can have the JVM read path."""
    return jvm.usable and pyspark.version is not None and pyspark.supported


def files_default(jvm: JvmJar, pyspark: Extra) -> str:
    """The files connector's (readPath=auto: spark/read_path_choice.py)."""
    if spark_jvm(jvm, pyspark):
        return "jvm in a Spark session with the jar, else python"
    return "python (no JVM read path here)"


def kafka_in_spark(kafka_path: str, jvm: JvmJar, pyspark: Extra) -> str:
    """``kafka_path`` and, where Spark can have the JVM read path, what readPath=auto takes
    there (spark/read_path_choice.py): a processing-time trigger's stream on jvm, every
    stream without the native reader."""
    if not spark_jvm(jvm, pyspark) or KAFKA_READ_PATH_ENV in kafka_path:
        return kafka_path
    if kafka_path.startswith("native"):
        return f"{kafka_path}; in Spark with the jar: jvm for a processing-time trigger"
    return f"{kafka_path}; in Spark with the jar: jvm"


def render(report: InstallReport) -> list[str]:
    """The report for people: at most 80 columns a line (a path too long for a line alone
    is on one of its own, whole)."""
    lines = [f"sluicegate {report.version}{' (editable)' if report.editable else ''}"]
    lines += _field("  package", str(report.package))
    lines += _field("  python", f"{report.python_version}, {report.python}")
    lines.append("")
    native = report.native
    if native.available:
        lines += _field("native Kafka reader", f"yes, librdkafka {native.librdkafka}")
        lines += _path(native.module)
    else:
        lines += _field("native Kafka reader", f"NO: {native.why_not}")
    jvm = report.jvm
    if jvm.usable:
        lines += _field("JVM read path jar", f"yes, build key {jvm.key} (its sources')")
    elif not jvm.present:
        lines += _field("JVM read path jar", "NO")
    else:
        lines += _field("JVM read path jar", f"STALE: build key {jvm.key}, its sources' {jvm.sources_key}")
    lines += _path(jvm.jar)
    if jvm.kafka_jars:
        total = len(jvm.kafka_jars)
        to_fetch = sum(1 for j in jvm.kafka_jars if j.state != "cached")
        if to_fetch:
            lines += _field(f"  its {total} Kafka jars", f"{to_fetch} to fetch from Maven Central at first use")
            if report.extra("pyspark").version is not None:
                lines.append(" " * LABEL + "(or now: sluicegate doctor --fetch)")
        else:
            lines += _field(f"  its {total} Kafka jars", "in the cache")
        lines += _path(jvm.cache)
    for extra in report.extras:
        if extra.version is None:
            lines += _field(extra.name, f"not installed (pip install 'sluicegate[{extra.extra}]')")
        elif extra.name == "pyspark":
            lines += _field(
                extra.name, f"{extra.version} ({'' if extra.supported else 'NOT '}tested: {_tested_range()})"
            )
        else:
            lines += _field(extra.name, extra.version)
    java = report.java
    if java.command is None:
        lines += _field("java", f"none on PATH, no JAVA_HOME (Spark needs {JAVA_NEEDED}+)")
    elif java.missing:
        lines += _field("java", f"none at $JAVA_HOME/bin/java (Spark needs {JAVA_NEEDED}+)")
        lines += _path(java.command)
    else:
        old = java.major is None or java.major < JAVA_NEEDED
        lines += _field(
            "java",
            f"{java.version or 'unknown version'} ({java.found_by}; Spark needs {JAVA_NEEDED}+{'!' if old else ''})",
        )
        lines += _path(java.command)
    lines += ["", "read paths by default"]
    lines += _field("  kafka", report.kafka_path)
    lines += _field("  files", report.files_path)
    lines.append("")
    if report.ok:
        lines.append("ok: this install has its fast paths")
        return lines
    lines.append("missing:")
    for problem in report.problems:
        lines += _wrap(f"- {problem.what}", "  ", "    ")
        lines += _wrap(f"fix: {problem.fix}", "    ", "      ")
    return lines


LABEL = 21


def _field(label: str, value: str) -> list[str]:
    """``label`` and ``value`` in two columns, ``value`` wrapped at spaces (a word too long
    for the column, a path, on a line of its own)."""
    lines = _wrap(value, f"{label} " if len(label) >= LABEL - 1 else label.ljust(LABEL), " " * LABEL)
    if len(lines[0]) <= WIDTH:
        return lines
    head, _, word = lines[0].rpartition(" ")
    return [head.rstrip() or label, *_path(Path(word)), *lines[1:]]


def _wrap(text: str, first: str, rest: str) -> list[str]:
    """``text`` broken at spaces into lines of WIDTH (a word longer than that whole)."""
    return textwrap.wrap(
        text, WIDTH, initial_indent=first, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    )


def _path(path: Path | None) -> list[str]:
    """A path under its field's value, or on a line of its own when it is too long for that."""
    if path is None:
        return []
    text = str(path)
    return [(" " * LABEL if LABEL + len(text) <= WIDTH else "    ") + text]


def fetch_kafka_jars(report: InstallReport) -> list[str]:
    """Each Kafka jar the report lacks fetched into the machine's cache (``cache_root()``:
    a report of another cache is not fetched into) from Maven Central (or
    ``$SLUICEGATE_MAVEN_REPOSITORY``), checked against its digest; the errors. Needs the
    ``spark`` extra: the fetcher is ``sluicegate.spark.maven_central``'s, imported here
    through ``extras.require`` since a base install cannot import it."""
    missing = [j for j in report.jvm.kafka_jars if j.state != "cached"]
    if not missing:
        return []
    maven = require("spark", "sluicegate.spark.maven_central", "sluicegate doctor --fetch")
    errors = []
    for kafka_jar in missing:
        try:
            maven.ensure_jar(maven.MavenJar.from_row(kafka_jar.row))
        except maven.JarFetchError as exc:
            errors.append(str(exc))
    return errors
