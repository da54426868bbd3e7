"""What ``register(spark)`` knows of a Spark Connect session (``SparkSession.builder.remote("sc://...")``).

A Connect client has no SparkContext and no JVM of its own: the session lives in the
Connect server, whose Python workers run the data source (its planning as well as its
reads). So over Connect ``register``

- registers the data source and leaves the workers' Python to the server, which must
  have sluicegate (the server is started with ``PYSPARK_PYTHON`` naming such an
  interpreter, docs/kafka.md, "Spark Connect"). ``check_workers`` runs one
  task there, so that a server without it fails ``register`` saying so, rather than every
  query's first use with a worker's ``ModuleNotFoundError``;
- takes the session's task slots from the server's configuration (``spark.conf``), as
  task_slots.py reads them from a classic session's, except for ``local[*]``: the server's
  cores are not the client's to count, so such a session's are unknown (no cap);
- has no JVM read path: its planner is the query's ``SluicegateStreamReader`` in the
  driver's Python, which the Java source calls through Py4J, and a Connect session has no
  driver-side Python holding a JVM gateway. ``readPath=jvm`` fails where the server first
  analyses the query (``.schema``, an action, ``start()``: a Connect client's ``load()``
  only builds a plan) naming it: ``JVM_UNAVAILABLE`` from the Python source, or the Java
  source's own line where the server has sluicegate's jar (it then owns
  ``format("sluicegate")`` and forwards every other query to ``sluicegate_python``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sluicegate.api.errors import ConfigError

CONNECT_MODULE = "pyspark.sql.connect"

JVM_UNAVAILABLE = (
    "it needs classic PySpark (Py4J): this is a Spark Connect session, which has no driver-side "
    "JVM gateway for the Java source to call sluicegate's planner through "
    "(readPath=auto or python reads over Spark Connect)"
)
"""Why ``readPath=jvm`` cannot read in a Connect session (``SluicegateDataSource.jvm_unavailable``)."""

NAME_TAKEN = "DATA_SOURCE_ALREADY_EXISTS"
"""Spark's error condition for a Python data source of a name a JVM source has."""

MISSING = "No module named 'sluicegate"
"""What a server's Python worker says where its interpreter has no sluicegate."""

SLOT_SETTINGS = (
    "spark.executor.instances",
    "spark.executor.cores",
    "spark.dynamicAllocation.enabled",
    "spark.task.cpus",
)
"""The server's settings task_slots.py reads, besides its master."""


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (``pyspark.sql.connect.session.SparkSession``),
    told by its class's module so that a classic session never imports Connect's client (grpc)."""
    return type(spark).__module__.startswith(CONNECT_MODULE + ".")


def server_settings(spark: Any) -> tuple[str, dict[str, str]]:
    """The server's master and the settings of ``SLOT_SETTINGS`` it has (one call each)."""
    master = str(spark.conf.get("spark.master", "") or "")
    settings = {}
    for key in SLOT_SETTINGS:
        value = spark.conf.get(key, None)
        if value is not None:
            settings[key] = str(value)
    return master, settings


def known_master(master: str) -> str | None:
    """The master as task_slots.py counts it, or None where its cores are the server's
    machine's (``local[*]``), which the client cannot count."""
    return None if "*" in master else master


def check_workers(spark: Any) -> None:
    """Run one task in the server's Python workers, whose interpreter imports this module
    to unpickle it (``_imported``); raise ``ConfigError`` naming ``PYSPARK_PYTHON`` where it
    has no sluicegate. (The server starts its workers with the ``PYSPARK_PYTHON`` of its
    environment, ``python3`` without it; ``spark.pyspark.python`` is not read there.) Another
    failure is the server's to tell, and is raised as it comes (a Python version other than
    the client's, say)."""
    try:
        spark.range(1).mapInArrow(_imported, "id BIGINT").collect()
    except Exception as exc:
        if MISSING not in str(exc):
            raise
        raise ConfigError(
            "PYSPARK_PYTHON",
            "the Spark Connect server's Python workers have no sluicegate (No module named 'sluicegate'): "
            "start the server with PYSPARK_PYTHON in its environment naming an interpreter that has it "
            '(a Connect server\'s workers do not take spark.pyspark.python; docs/kafka.md, "Spark Connect")',
        ) from None


def _imported(batches: Iterator[Any]) -> Iterator[Any]:
    """``check_workers``'s task: pickled by reference, so running it imports sluicegate."""
    yield from batches
