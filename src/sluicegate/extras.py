"""The optional parts of an install (pyproject's extras) and the one error a missing one
raises at its first use, naming the pip command.

A base install runs standalone readers, the coordinator and the audit; ``sluicegate[spark]``
adds PySpark (``format("sluicegate")``), ``sluicegate[plots]`` matplotlib (``audit
--timeline``). PySpark is also checked for its version: the data source API sluicegate
uses changes between Spark's minor versions, and it is tested on ``PYSPARK_TESTED`` only.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

PYSPARK_TESTED = ((4, 3), (4, 4))
"""pyspark >= 4.3 and < 4.4 (pyproject's ``spark`` extra says the same)."""


class MissingExtra(ImportError):
    """An optional part of sluicegate is used and its extra is not installed."""


def require(extra: str, module: str, what: str) -> ModuleType:
    """``module`` imported, or MissingExtra naming ``what`` needs it and the pip command."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(
            f"{what} needs {module}, which this install lacks: pip install 'sluicegate[{extra}]'"
        ) from None


def require_pyspark() -> ModuleType:
    """pyspark, of a version sluicegate supports (else an ImportError naming the versions)."""
    pyspark = require("spark", "pyspark", "Spark's data source (sluicegate.spark)")
    version = str(getattr(pyspark, "__version__", "?"))
    low, high = PYSPARK_TESTED
    if not low <= _minor(version) < high:
        raise ImportError(
            f"pyspark {version} is not supported: sluicegate runs on pyspark >={_dotted(low)},<{_dotted(high)} "
            f"(pip install 'sluicegate[spark]' installs one)"
        )
    return pyspark


def _minor(version: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def _dotted(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"
