"""The session's task slots, which cap a query's default parallelism (spark/task_slots.py)."""

from __future__ import annotations

import pytest

from sluicegate.spark.task_slots import capped_parallelism, task_slots


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local", 1),
        ("local[2]", 2),
        ("local[ 6 ]", 6),
        ("local[*]", 12),
        ("local[3, 4]", 3),  # threads, then task failures allowed
        ("local[*,2]", 12),
        ("local-cluster[2, 3, 1024]", 6),
    ],
)
def test_a_local_master_has_its_threads(master: str, expected: int) -> None:
    assert task_slots(master, {}, cpu_count=12) == expected


def test_a_static_cluster_has_its_executors_cores_over_the_cpus_of_a_task() -> None:
    conf = {"spark.executor.instances": "4", "spark.executor.cores": "8"}
    assert task_slots("spark://host:7077", conf, cpu_count=2) == 32
    assert task_slots("yarn", {**conf, "spark.task.cpus": "2"}, cpu_count=2) == 16
    assert task_slots("local[4]", {"spark.task.cpus": "8"}, cpu_count=2) == 1, "never below one"


@pytest.mark.parametrize(
    "conf",
    [
        {},  # executors as they register: a passing figure
        {"spark.executor.instances": "4"},
        {"spark.executor.cores": "8"},
        {"spark.executor.instances": "4", "spark.executor.cores": "8", "spark.dynamicAllocation.enabled": "true"},
        {"spark.executor.instances": "four", "spark.executor.cores": "8"},
    ],
)
def test_a_cluster_whose_configuration_does_not_fix_its_executors_has_no_known_slots(conf: dict[str, str]) -> None:
    assert task_slots("k8s://https://api:6443", conf, cpu_count=2) is None


def test_a_master_string_it_does_not_know_has_no_known_slots() -> None:
    assert task_slots("local[two]", {}, cpu_count=2) is None
    assert task_slots("mesos://host:5050", {}, cpu_count=2) is None


def test_a_suggested_parallelism_is_capped_by_known_slots_only() -> None:
    assert capped_parallelism(8, 2) == 2
    assert capped_parallelism(3, 12) == 3
    assert capped_parallelism(8, None) == 8, "unknown slots: no cap"
