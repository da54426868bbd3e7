"""The sequence connector releasing its splits over time (``release_interval_ms``,
``splits_per_release``) through a periodic ``context.call_async``, driven through
the coordinator core (tests/support/core_harness.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from core_harness import CoreHarness, body, sequence_source

from sluicegate.api import ConfigError
from sluicegate.api.enumerator import AsyncCallHandle, EnumeratorMetrics, ReaderInfo, SplitEnumeratorContext
from sluicegate.coordinator.core import AsyncCall, CoreMetrics, Effects
from sluicegate.protocol.messages import AddSplits, NoMoreSplits
from sluicegate_connectors.sequence import SequenceEnumerator, SequenceOptions, SequenceSource, SequenceSplit

SPLITS = 10


class NoReaders(SplitEnumeratorContext[SequenceSplit]):
    """A context without readers: the enumerator keeps every split it knows."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self._metrics = CoreMetrics()

    def current_parallelism(self) -> int:
        return 1

    def registered_readers(self) -> Mapping[int, ReaderInfo[SequenceSplit]]:
        return {}

    def outstanding_split_count(self) -> int:
        return 0

    def assign_splits(self, assignment: Any) -> None:
        raise AssertionError("no reader to assign to")

    def signal_no_more_splits(self, subtask: int) -> None:
        raise AssertionError("no reader to signal")

    def send_event_to_source_reader(self, subtask: int, event: Any, attempt: int | None = None) -> None:
        raise AssertionError("no reader to send to")

    def call_async(
        self, callable_: Any, handler: Any, initial_delay_ms: int = 0, period_ms: int = 0
    ) -> AsyncCallHandle:
        self.calls.append((initial_delay_ms, period_ms))
        return AsyncCallHandle()

    @property
    def metrics(self) -> EnumeratorMetrics:
        return self._metrics


def released_source(splits: int = SPLITS, per_release: int = 3, interval_ms: int = 500) -> SequenceSource:
    return sequence_source(splits, 5, release_interval_ms=str(interval_ms), splits_per_release=str(per_release))


def start(h: CoreHarness) -> AsyncCall:
    """Start the core; return the one periodic discovery call the enumerator asked for."""
    effects = h.start()
    assert len(effects.async_calls) == 1
    return effects.async_calls[0]


def fire(h: CoreHarness, call: AsyncCall) -> Effects:
    """One period of the call: run the callable (as the host does, off the loop) and
    hand its result to the core."""
    return h._collect(h.core.on_async_result(call.call_id, call.fn(), None, h.now_ms))


def read_all(h: CoreHarness, subtasks: tuple[int, ...]) -> None:
    """Each reader checkpoints, finishes what it holds and asks for more, as a host does."""
    for subtask in subtasks:
        h.ack(subtask)
        h.finish(subtask)
        h.request_split(subtask)


def assigned_ids(h: CoreHarness) -> list[str]:
    return [s["split_id"] for e in h.of_type(AddSplits) for s in body(e, AddSplits).splits]


# -- options ------------------------------------------------------------------------------


def test_options_default_to_every_split_at_start() -> None:
    options = SequenceOptions.parse({})
    assert options.release_interval_ms == 0
    assert options.released_at_start == options.splits
    parsed = SequenceOptions.parse({"splits": "7", "release_interval_ms": "250", "splits_per_release": "2"})
    assert (parsed.release_interval_ms, parsed.splits_per_release, parsed.released_at_start) == (250, 2, 0)


@pytest.mark.parametrize(
    ("key", "value"),
    [("release_interval_ms", "-1"), ("release_interval_ms", "soon"), ("splits_per_release", "0")],
)
def test_bad_release_options_name_the_option(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        SequenceOptions.parse({key: value})
    assert info.value.setting == key


def test_without_release_interval_no_async_call_and_every_split_at_once() -> None:
    h = CoreHarness(sequence_source(SPLITS, 5), max_parallelism=1, start=False)
    assert h.start().async_calls == []
    h.register(0)
    assert len(assigned_ids(h)) == SPLITS


# -- releasing ----------------------------------------------------------------------------


def test_splits_are_released_in_order_by_the_periodic_call() -> None:
    h = CoreHarness(released_source(), max_parallelism=2, start=False)
    call = start(h)
    assert (call.initial_delay_ms, call.period_ms) == (500, 500)
    h.register(0)
    h.register(1)
    assert assigned_ids(h) == [], "nothing is known before the first release"
    fire(h, call)
    assert sorted(assigned_ids(h)) == ["seq-00000", "seq-00001", "seq-00002"]
    fire(h, call)
    fire(h, call)
    fire(h, call)  # 3 + 3 + 3 + 1
    assert sorted(assigned_ids(h)) == [f"seq-{k:05d}" for k in range(SPLITS)]
    assert h.unassigned() == []
    # after the last release the call keeps firing and changes nothing
    before = len(h.sent)
    fire(h, call)
    assert h.sent[before:] == []


def test_no_more_splits_waits_for_the_last_release() -> None:
    h = CoreHarness(released_source(per_release=4), max_parallelism=2, start=False)
    call = start(h)
    h.register(0)
    h.register(1)
    for _ in range(2):  # 8 of 10 released
        fire(h, call)
        read_all(h, (0, 1))
    assert h.of_type(NoMoreSplits) == [], "NoMoreSplits before every split was released"
    assert not h.core.is_finished()
    fire(h, call)
    read_all(h, (0, 1))
    assert {e.subtask for e in h.of_type(NoMoreSplits)} == {0, 1}
    assert h.core.is_finished()
    assert Counter(assigned_ids(h)) == Counter({f"seq-{k:05d}": 1 for k in range(SPLITS)})


def test_a_successor_coordinator_resumes_the_release_where_it_stopped() -> None:
    h = CoreHarness(released_source(), max_parallelism=2, start=False)
    first = start(h)
    h.register(0)
    fire(h, first)
    h.ack(0)
    effects = h.restart_coordinator()  # the state persisted after the release step
    # (besides a one-shot timer: splits wait for the assigner's grace delay, one slot has no reader)
    discovery = [c for c in effects.async_calls if c.period_ms > 0]
    assert len(discovery) == 1, "the restored enumerator asks for its discovery call again"
    call = discovery[0]
    assert h.core.enumerator.snapshot_state(0)["released"] == 3
    for _ in range(SPLITS):
        fire(h, call)
        read_all(h, (0,))
    read_all(h, (0,))
    assert Counter(assigned_ids(h)) == Counter({f"seq-{k:05d}": 1 for k in range(SPLITS)})
    assert [e.subtask for e in h.of_type(NoMoreSplits)] == [0]


def test_restored_with_release_turned_off_releases_the_rest_at_start() -> None:
    h = CoreHarness(released_source(), max_parallelism=1, start=False)
    call = start(h)
    h.register(0)
    fire(h, call)
    state = h.core.enumerator.snapshot_state(0)
    assert state["released"] == 3
    plain = sequence_source(SPLITS, 5)
    context = NoReaders()
    enumerator = plain.restore_enumerator(context, state)
    assert isinstance(enumerator, SequenceEnumerator) and not enumerator.all_released
    enumerator.start()
    assert enumerator.all_released
    assert context.calls == [], "no discovery call once everything is released"
    assert enumerator.pending_split_ids() == [f"seq-{k:05d}" for k in range(3, SPLITS)]


def test_unbounded_splits_can_be_released_over_time() -> None:
    source = sequence_source(4, "unbounded", release_interval_ms="100", splits_per_release="2")
    h = CoreHarness(source, max_parallelism=1, start=False)
    call = start(h)
    h.register(0)
    fire(h, call)
    fire(h, call)
    assert sorted(assigned_ids(h)) == [f"seq-{k:05d}" for k in range(4)]
    assert h.of_type(NoMoreSplits) == []
