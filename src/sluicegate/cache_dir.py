"""The machine's sluicegate cache: what is built or downloaded once and shared by every
clone and run (Kafka's jars, Spark's Kafka source, the JVM read path's jar)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$SLUICEGATE_CACHE_DIR`` if set, else ``~/.cache/sluicegate``."""
    env = os.environ.get("SLUICEGATE_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sluicegate"
