"""``MemoryRun`` (the kit's in-memory run) runs the product's coordinator loop: what the
loop does to bad input, failed commits and restarts happens in the kit as in a deployed
coordinator, on virtual time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluicegate.connectors import load_source
from sluicegate.testing import MemoryRun, assert_exactly_once

SPLITS, PER_SPLIT = 4, 10
OPTIONS = {"splits": str(SPLITS), "records_per_split": str(PER_SPLIT)}
EXPECTED = list(range(SPLITS * PER_SPLIT))


@pytest.fixture
def run() -> Iterator[MemoryRun]:
    opened = MemoryRun(lambda: load_source("sequence", OPTIONS), source_name="orders")
    for subtask in range(2):
        opened.start_reader(subtask)
    yield opened
    opened.close()


def finish(run: MemoryRun) -> None:
    run.run_until(run.is_finished, "the bounded end")
    assert_exactly_once([r.value for r in run.output], EXPECTED, "the memory run")


def test_a_record_the_coordinator_cannot_decode_is_dead_lettered_and_skipped(run: MemoryRun) -> None:
    broker = run.coordinator.broker
    run.round()
    broker.write(b"0", b"{not a control record")
    finish(run)
    dead = broker.records_to(run.coordinator.runner.topics.dead_letter)
    assert len(dead) == 1 and dead[0].value == b"{not a control record"
    assert run.core.metrics.counters["dead_letters"] == 1 and run.coordinator.undecodable == 1
    assert run.step_failures == []


def test_a_failed_commit_restarts_the_coordinator_from_its_last_commit(run: MemoryRun) -> None:
    """The broker aborts a transaction: nothing of it is visible, the host starts a
    successor from the last commit, and the readers go on; the output stays exact."""
    run.run_until(lambda: bool(run.output), "the first records committed")
    epoch = run.core.epoch
    run.coordinator.broker.fail_next_commits(1)
    run.round()
    assert len(run.step_failures) == 1 and "the broker aborted the transaction" in run.step_failures[0]
    assert run.core.epoch == epoch + 1
    finish(run)


def test_a_restarted_coordinator_serves_what_its_predecessor_committed(run: MemoryRun) -> None:
    run.run_until(lambda: len(run.output) >= len(EXPECTED) // 2, "half the records committed")
    owned = {s: set(run.core.tracker.owned_ids(s)) for s in range(2)}
    epoch = run.core.epoch
    run.restart_coordinator()
    assert run.core.epoch == epoch + 1
    assert {s: set(run.core.tracker.owned_ids(s)) for s in range(2)} == owned
    finish(run)
    assert run.step_failures == []
