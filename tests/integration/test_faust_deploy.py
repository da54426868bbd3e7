"""The coordinator deployed with plain Faust, `faust -A sluicegate.coordinator.app worker`,
configured by SLUICEGATE_* variables: it creates the topics itself, serves a bounded
source read by two reader processes exactly once, answers /health, and refuses a bad
variable at start-up naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_http import free_port, wait_until
from processes import ProcessGroup
from test_takeover import audit, audit_failure, expected_values, health, read_outputs, serving_epochs

FAUST_WORKER = ["-A", "sluicegate.coordinator.app", "worker", "-l", "info"]
OPTIONS = {"splits": "10", "records_per_split": "40", "rate": "400"}


def source_env(source: str, max_parallelism: str, **extra: str) -> dict[str, str]:
    """The SLUICEGATE_* variables of one sequence source (values as given, unchecked)."""
    return {
        "SLUICEGATE_SOURCE": source,
        "SLUICEGATE_CONNECTOR": "sequence",
        "SLUICEGATE_MAX_PARALLELISM": max_parallelism,
        **extra,
    }


@pytest.mark.kafka
@pytest.mark.timeout(240)
def test_a_faust_worker_configured_by_environment_serves_a_source(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    port = free_port()
    env = source_env(
        unique_source,
        "2",
        SLUICEGATE_OPTIONS=",".join(f"{k}={v}" for k, v in OPTIONS.items()),
        SLUICEGATE_WEB_PORT=str(port),
    )
    try:
        worker = group.start("faust-worker", FAUST_WORKER, module="faust", env=env)
        wait_until(lambda: serving_epochs(worker, unique_source), 90, "the Faust worker to serve the source")
        answer = wait_until(lambda: health(port), 30, "/health to answer")
        assert answer is not None
        assert unique_source in answer["active_sources"], answer

        outputs = [tmp_path / f"reader-{k}.jsonl" for k in range(2)]
        readers = [group.reader(unique_source, k, OPTIONS, outputs[k]) for k in range(2)]
        for reader in readers:
            assert reader.wait(120) == 0, f"{reader.name}:\n{reader.tail()}"

        counts = read_outputs(outputs)
        assert set(counts) == expected_values(10, 40)
        assert max(counts.values()) == 1, "a value was read twice without any failure"
        result = audit(kafka_bootstrap, unique_source)
        assert result.ok, audit_failure(result)
        assert result.summary.splits_finished == 10
    finally:
        group.stop_all()


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_a_bad_variable_stops_the_faust_worker_naming_it(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    worker = group.start("faust-worker", FAUST_WORKER, module="faust", env=source_env(unique_source, "four"))
    try:
        assert worker.wait(90) == 2, worker.tail()
        assert "SLUICEGATE_MAX_PARALLELISM" in worker.log(), worker.tail()
    finally:
        group.stop_all()
