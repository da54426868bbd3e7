"""How many tasks a Spark session runs at once, when its configuration says so.

A query that names no ``parallelism`` reads with one reader subtask (one Spark task a
micro-batch) per split its connector suggests, at most the session's task slots: a task
reads every range its subtask owns in turn with its executor's consumer, so more tasks
than slots only add Spark's per-task cost (a Python worker call, a consumer re-assign and
a first fetch each) while they wait for a slot (benchmarks/README.md: at 8 partitions on
``local[2]``, 2 subtasks read 1.0x Spark's tuned Kafka source, 8 read 0.79x; latency p50
1.1-1.5x against 2.7x).

Only what the configuration fixes counts: the threads of a local master, or a static
cluster's ``spark.executor.instances`` x ``spark.executor.cores``. The executors that have
registered so far do not: under dynamic allocation, or right after a standalone
cluster's session starts, they are a passing figure, and a query keeps its parallelism
for its whole life (its checkpoint holds the subtasks). Unknown means no cap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_LOCAL = re.compile(r"local(?:\[\s*(\*|\d+)\s*(?:,\s*\d+\s*)?\])?$")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")


def task_slots(master: str, conf: Mapping[str, str], cpu_count: int) -> int | None:
    """The tasks the session can run at once, or None where its configuration does not
    fix them. ``conf``: the session's Spark configuration; ``cpu_count``: this machine's
    cores (what ``local[*]`` means)."""
    cores = _executor_cores(master.strip(), conf, cpu_count)
    if cores is None:
        return None
    task_cpus = _positive(conf.get("spark.task.cpus", "1")) or 1
    return max(1, cores // task_cpus)


def capped_parallelism(suggested: int, slots: int | None) -> int:
    """A connector's suggested parallelism, at most ``slots`` where they are known."""
    return min(suggested, slots) if slots is not None else suggested


def _executor_cores(master: str, conf: Mapping[str, str], cpu_count: int) -> int | None:
    local = _LOCAL.match(master)
    if local:
        threads = local.group(1)
        if threads is None:
            return 1  # "local": one thread
        return cpu_count if threads == "*" else _positive(threads)
    local_cluster = _LOCAL_CLUSTER.match(master)
    if local_cluster:
        return int(local_cluster.group(1)) * int(local_cluster.group(2))
    if conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true":
        return None
    instances = _positive(conf.get("spark.executor.instances", ""))
    cores = _positive(conf.get("spark.executor.cores", ""))
    return instances * cores if instances and cores else None


def _positive(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() and int(text) > 0 else None
