"""Jars fetched from Maven Central once into the machine's cache, each checked against the
digest recorded when the wheel was built.

The JVM read path's jar needs Spark's Kafka source beside it (kafka-clients,
spark-sql-kafka ...), which PySpark does not ship. The wheel names them, with the sha256
of the files it was compiled against (``jvm/classpath.tsv``); this module puts each under
``<cache>/maven/<group>/<artifact>/<version>/`` the first time a session asks, and never
again. A download goes to a temporary file and is renamed into place once its digest
matches: two processes fetching at once both end with the same whole file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sluicegate.cache_dir import cache_root

log = logging.getLogger("sluicegate.spark")

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
TIMEOUT_S = 60.0


class JarFetchError(RuntimeError):
    """A jar could not be fetched, or what came is not the file the wheel was built with."""


@dataclass(frozen=True)
class MavenJar:
    """One jar: its coordinates and the sha256 of its file."""

    group_id: str
    artifact_id: str
    version: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact_id}-{self.version}.jar"

    def relative_path(self) -> str:
        return f"{self.group_id.replace('.', '/')}/{self.artifact_id}/{self.version}/{self.file_name}"

    def cached(self) -> Path:
        return cache_root() / "maven" / self.relative_path()

    def to_row(self) -> str:
        return "\t".join((self.group_id, self.artifact_id, self.version, self.sha256))

    @classmethod
    def from_row(cls, row: str) -> MavenJar:
        group_id, artifact_id, version, sha256 = row.split("\t")
        return cls(group_id, artifact_id, version, sha256)


def repository() -> str:
    """``$SLUICEGATE_MAVEN_REPOSITORY`` (a mirror, or a ``file://`` one) if set, else Maven Central."""
    return os.environ.get("SLUICEGATE_MAVEN_REPOSITORY", MAVEN_CENTRAL).rstrip("/")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_jar(jar: MavenJar) -> Path:
    """The jar's path in the cache, fetched from Maven Central if it is not there yet."""
    target = jar.cached()
    if target.is_file():
        return target
    url = f"{repository()}/{jar.relative_path()}"
    log.warning("fetching %s from Maven Central into %s (once per machine)", jar.file_name, target.parent)

    def download(part: IO[bytes]) -> None:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            shutil.copyfileobj(response, part)

    try:
        partial = _staged(target, download)
    except OSError as exc:
        raise JarFetchError(f"cannot fetch {url}: {exc}") from None
    got = sha256_of(partial)
    if got != jar.sha256:
        partial.unlink(missing_ok=True)
        raise JarFetchError(f"{url} has sha256 {got}, not the {jar.sha256} sluicegate was built with")
    os.replace(partial, target)
    return target


def place_jar(jar: MavenJar, source: Path) -> Path:
    """Put a jar resolved by other means (a build's Maven run) where ``ensure_jar`` finds it."""
    target = jar.cached()
    if not target.is_file():
        with source.open("rb") as whole:
            os.replace(_staged(target, lambda part: shutil.copyfileobj(whole, part)), target)
    return target


def _staged(target: Path, fill: Callable[[IO[bytes]], None]) -> Path:
    """A temporary file beside ``target`` written by ``fill`` (removed if ``fill`` fails), for
    the caller to rename into place: a reader of ``target`` never sees half a jar."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as part:
        partial = Path(part.name)
        try:
            fill(part)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return partial
