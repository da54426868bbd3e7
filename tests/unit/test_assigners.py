"""Split assigners (sluicegate.api.assigners), pure: who gets which pending split, the
grace delay after which no split waits for a slot without a live reader, and the
SplitDistributor's one-shot timer, with a fake enumerator context and clock."""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate.api import ConfigError, ReaderInfo, SplitEnumeratorContext
from sluicegate.api.assigners import (
    DEFAULT_GRACE_MS,
    REBALANCE_SETTLE_MS,
    AssignmentRound,
    FairShareAssigner,
    PullAssigner,
    RebalanceRound,
    RoundRobinAssigner,
    SplitAssigner,
    StickyHashAssigner,
    assigner_from_options,
)
from sluicegate.api.distributor import SplitDistributor
from sluicegate.api.enumerator import AsyncCallHandle, EnumeratorMetrics, ReaderLoads, SplitsAssignment

GRACE = 2_000
T0 = 1_000_000


@dataclass(frozen=True)
class Split:
    split_id: str


def splits(*indices: int) -> list[Split]:
    return [Split(f"s-{k}") for k in indices]


def index_of(split: Split) -> int:
    """An owner key: split s-k belongs to subtask k % parallelism."""
    return int(split.split_id.split("-")[1])


def ids(assignment: Mapping[int, Sequence[Split]]) -> dict[int, list[str]]:
    return {subtask: [s.split_id for s in given] for subtask, given in assignment.items()}


def pending_ids(assigner: SplitAssigner[Split]) -> list[str]:
    return [s.split_id for s in assigner.pending]


def round_(live: Mapping[int, int], now_ms: int, parallelism: int, outstanding: int | None = None, **kw: Any) -> Any:
    """A round; ``outstanding`` defaults to what the live readers own."""
    total = sum(live.values()) if outstanding is None else outstanding
    return AssignmentRound(parallelism=parallelism, live=dict(live), outstanding=total, now_ms=now_ms, **kw)


STRATEGIES: dict[str, Callable[[int], SplitAssigner[Split]]] = {
    "sticky": lambda grace: StickyHashAssigner(grace, owner_key=index_of),
    "round_robin": lambda grace: RoundRobinAssigner(grace),
    "fair_share": lambda grace: FairShareAssigner(grace),
}


# -- sticky -------------------------------------------------------------------------


def test_sticky_by_default_owns_a_split_by_the_crc32_of_its_id() -> None:
    assigner: StickyHashAssigner[Split] = StickyHashAssigner()
    batch = splits(*range(40))
    assigner.add_splits(batch)
    got = assigner.assign(round_({0: 0, 1: 0, 2: 0}, T0, parallelism=3))
    expected: dict[int, list[str]] = {}
    for split in batch:
        expected.setdefault(zlib.crc32(split.split_id.encode()) % 3, []).append(split.split_id)
    assert ids(got) == expected
    assert len(expected) == 3, "40 splits hashed over 3 subtasks should reach each of them"
    assert not assigner.pending and assigner.next_deadline_ms() is None


def test_sticky_keeps_a_split_on_its_subtask_across_add_splits_back() -> None:
    """Whatever the loads, a split returned goes back to the subtask it had, while the
    parallelism holds; the custom owner_key decides that subtask."""
    assigner: StickyHashAssigner[Split] = StickyHashAssigner(GRACE, owner_key=index_of)
    assigner.add_splits(splits(*range(8)))
    first = assigner.assign(round_({0: 0, 1: 0, 2: 0, 3: 0}, T0, parallelism=4))
    assert ids(first) == {k: [f"s-{k}", f"s-{k + 4}"] for k in range(4)}
    owner = {sid: subtask for subtask, given in ids(first).items() for sid in given}

    # every split comes back (failures, departures) and is handed out again, to very
    # uneven readers: subtask 3 owns a lot, subtask 0 nothing
    for now, loads in ((T0 + 10, {0: 0, 1: 5, 2: 1, 3: 50}), (T0 + 20, {0: 7, 1: 0, 2: 3, 3: 0})):
        assigner.add_splits([s for given in first.values() for s in given])
        again = assigner.assign(round_(loads, now, parallelism=4))
        assert {sid: subtask for subtask, given in ids(again).items() for sid in given} == owner


def test_sticky_owner_key_is_taken_modulo_the_parallelism() -> None:
    assigner: StickyHashAssigner[Split] = StickyHashAssigner(GRACE, owner_key=lambda s: 1000 + index_of(s))
    assigner.add_splits(splits(0, 1, 2))
    got = assigner.assign(round_({0: 0, 1: 0, 2: 0}, T0, parallelism=3))
    assert ids(got) == {1: ["s-0"], 2: ["s-1"], 0: ["s-2"]}  # (1000 + k) % 3


def test_sticky_from_options_uses_the_connector_s_owner_key() -> None:
    make = assigner_from_options({"assigner": "sticky", "assignment_grace_ms": "0"}, "fair_share", owner_key=index_of)
    assigner = make()
    assert isinstance(assigner, StickyHashAssigner) and assigner.grace_ms == 0
    assigner.add_splits(splits(5, 6))
    assert ids(assigner.assign(round_({0: 0, 1: 0, 2: 0, 3: 0}, T0, parallelism=4))) == {1: ["s-5"], 2: ["s-6"]}
    # an owner_key is only for the sticky assigner
    other = assigner_from_options({"assigner": "round_robin"}, "sticky", owner_key=index_of)()
    assert isinstance(other, RoundRobinAssigner)


# -- round robin -------------------------------------------------------------------


def test_round_robin_takes_the_subtasks_in_turn_in_discovery_order() -> None:
    assigner: RoundRobinAssigner[Split] = RoundRobinAssigner(GRACE)
    assigner.add_splits(splits(10, 11, 12, 13, 14))
    got = assigner.assign(round_({0: 0, 1: 0, 2: 0}, T0, parallelism=3))
    assert ids(got) == {0: ["s-10", "s-13"], 1: ["s-11", "s-14"], 2: ["s-12"]}

    # later discoveries continue the rotation (the 6th split seen goes to subtask 2), whatever the loads
    assigner.add_splits(splits(15, 16))
    got = assigner.assign(round_({0: 9, 1: 0, 2: 9}, T0 + 1, parallelism=3))
    assert ids(got) == {2: ["s-15"], 0: ["s-16"]}


def test_round_robin_gives_a_returned_split_its_old_turn() -> None:
    assigner: RoundRobinAssigner[Split] = RoundRobinAssigner(GRACE)
    assigner.add_splits(splits(0, 1, 2, 3))
    first = assigner.assign(round_({0: 0, 1: 0}, T0, parallelism=2))
    assert ids(first) == {0: ["s-0", "s-2"], 1: ["s-1", "s-3"]}
    assigner.add_splits([first[1][1], first[0][0]])  # s-3 and s-0 come back, in that order
    assert ids(assigner.assign(round_({0: 1, 1: 1}, T0 + 1, parallelism=2))) == {1: ["s-3"], 0: ["s-0"]}


# -- fair share ----------------------------------------------------------------------


def test_fair_share_gives_each_reader_up_to_ceil_outstanding_over_parallelism() -> None:
    """One reader of four slots gets ceil(8/4) = 2 of 8 splits, in the order they came;
    the rest wait for the other slots."""
    assigner: FairShareAssigner[Split] = FairShareAssigner(GRACE)
    assigner.add_splits(splits(*range(8)))
    assert ids(assigner.assign(round_({0: 0}, T0, parallelism=4))) == {0: ["s-0", "s-1"]}
    assert pending_ids(assigner) == [f"s-{k}" for k in range(2, 8)]
    # a second reader registers: ceil((6 pending + 2 owned) / 4) = 2 for it too
    assert ids(assigner.assign(round_({0: 2, 1: 0}, T0 + 100, parallelism=4))) == {1: ["s-2", "s-3"]}
    assert len(assigner) == 4


def test_fair_share_counts_splits_owned_by_slots_without_a_live_reader() -> None:
    """outstanding includes the splits of subtasks awaiting their next attempt."""
    assigner: FairShareAssigner[Split] = FairShareAssigner(GRACE)
    assigner.add_splits(splits(*range(4)))
    # 4 pending + 8 owned (2 by the live reader) over 3 slots: share 4, room 2
    got = assigner.assign(round_({0: 2}, T0, parallelism=3, outstanding=8))
    assert ids(got) == {0: ["s-0", "s-1"]}


def test_fair_share_serves_the_fewest_owned_first() -> None:
    assigner: FairShareAssigner[Split] = FairShareAssigner(GRACE)
    assigner.add_splits(splits(*range(3)))
    # 3 pending + 3 owned over 3 slots: share 2; subtask 2 (owns 0) first, then 1 (owns 1)
    got = assigner.assign(round_({0: 2, 1: 1, 2: 0}, T0, parallelism=3))
    assert ids(got) == {2: ["s-0", "s-1"], 1: ["s-2"]}
    # ties go to the lower subtask
    assigner.add_splits(splits(3, 4, 5))
    # (4 slots, the 6 owned are slot 3's) share ceil(9/4) = 3: the first takes them all
    got = assigner.assign(round_({0: 0, 1: 0, 2: 0}, T0 + 1, parallelism=4, outstanding=6))
    assert ids(got) == {0: ["s-3", "s-4", "s-5"]}


def test_fair_share_requester_with_nothing_gets_a_full_share() -> None:
    """A reader that asks while owning nothing gets a whole share, even when the other
    readers are past theirs; a requester that owns something only tops up to the share."""
    assigner: FairShareAssigner[Split] = FairShareAssigner(GRACE)
    assigner.add_splits(splits(*range(6)))
    # 6 pending + 6 owned (all by subtask 1) over 4 slots: share 3
    got = assigner.assign(round_({0: 0, 1: 6}, T0, parallelism=4, requester=0))
    assert ids(got) == {0: ["s-0", "s-1", "s-2"]}
    got = assigner.assign(round_({0: 3, 1: 6}, T0 + 1, parallelism=4, requester=0))
    assert got == {}, "a requester that holds its share gets nothing more"
    got = assigner.assign(round_({0: 1, 1: 6}, T0 + 2, parallelism=4, outstanding=7, requester=0))
    # 3 pending + 7 owned over 4: share 3, the requester owns 1: two more
    assert ids(got) == {0: ["s-3", "s-4"]}


def test_pull_gives_splits_only_to_a_requester_its_share_and_never_moves_them() -> None:
    assigner: PullAssigner[Split] = PullAssigner()
    assigner.add_splits(splits(*range(5)))
    assert assigner.assign(round_({0: 0, 1: 0}, T0, parallelism=2)) == {}, "nothing is pushed"
    assert ids(assigner.assign(round_({0: 0, 1: 0}, T0, parallelism=2, requester=1))) == {1: ["s-0", "s-1", "s-2"]}
    # 2 pending + 5 owned over 2 live: share 4; the requester owns 3: one more
    assert ids(assigner.assign(round_({0: 3, 1: 2}, T0, parallelism=2, requester=0))) == {0: ["s-3"]}
    assert assigner.next_deadline_ms() is None
    assert assigner.rebalance(RebalanceRound(2, {0: splits(7, 8, 9), 1: []})).move_count == 0


def test_fair_share_with_every_slot_live_leaves_nothing_pending() -> None:
    assigner: FairShareAssigner[Split] = FairShareAssigner(GRACE)
    assigner.add_splits(splits(*range(7)))
    got = assigner.assign(round_({0: 3, 1: 0, 2: 1}, T0, parallelism=3))
    assert sum(len(v) for v in got.values()) == 7 and not assigner.pending
    assert math.ceil((7 + 4) / 3) == 4
    assert ids(got) == {1: ["s-0", "s-1", "s-2", "s-3"], 2: ["s-4", "s-5", "s-6"]}
    assert assigner.next_deadline_ms() is None


# -- the grace delay, for every strategy ------------------------------------------------


def waiting_for_slot_2(name: str, grace_ms: int) -> SplitAssigner[Split]:
    """An assigner holding one pending split, s-2, that no live reader may take at once
    when subtasks 0 (owns 5) and 1 (owns 3) of 3 are live: the owner assigners give it
    to slot 2, and for fair share both live readers are at their share ceil(9/3) = 3."""
    assigner = STRATEGIES[name](grace_ms)
    if name == "round_robin":
        assigner.add_splits(splits(0, 1, 2))
        assert [s.split_id for s in assigner.remove(["s-0", "s-1"])] == ["s-0", "s-1"]
    else:
        assigner.add_splits(splits(2))
    return assigner


LIVE_0_1 = {0: 5, 1: 3}


@pytest.mark.parametrize("name", STRATEGIES)
def test_a_split_waits_for_its_slot_until_the_grace_delay_has_passed(name: str) -> None:
    assigner = waiting_for_slot_2(name, GRACE)
    assert assigner.next_deadline_ms() is None, "no wait starts before a round"
    assert assigner.assign(round_(LIVE_0_1, T0, parallelism=3)) == {}
    assert pending_ids(assigner) == ["s-2"]
    assert assigner.next_deadline_ms() == T0 + GRACE
    # another round before the deadline: it still waits, and its deadline does not move
    assert assigner.assign(round_(LIVE_0_1, T0 + GRACE - 1, parallelism=3)) == {}
    assert assigner.next_deadline_ms() == T0 + GRACE
    # at the deadline it goes to the live reader that owns the fewest
    assert ids(assigner.assign(round_(LIVE_0_1, T0 + GRACE, parallelism=3))) == {1: ["s-2"]}
    assert not assigner.pending and assigner.next_deadline_ms() is None


@pytest.mark.parametrize("name", STRATEGIES)
def test_after_the_grace_delay_the_least_loaded_live_reader_gets_it_whatever_its_number(name: str) -> None:
    assigner = waiting_for_slot_2(name, GRACE)
    assert assigner.assign(round_({0: 3, 1: 5}, T0, parallelism=3)) == {}
    assert ids(assigner.assign(round_({0: 3, 1: 5}, T0 + GRACE + 500, parallelism=3))) == {0: ["s-2"]}


@pytest.mark.parametrize("name", STRATEGIES)
def test_with_grace_0_a_split_goes_to_a_live_reader_at_once(name: str) -> None:
    assigner = waiting_for_slot_2(name, 0)
    assert ids(assigner.assign(round_(LIVE_0_1, T0, parallelism=3))) == {1: ["s-2"]}
    assert assigner.next_deadline_ms() is None


@pytest.mark.parametrize("grace", [0, GRACE])
@pytest.mark.parametrize("name", STRATEGIES)
def test_without_a_live_reader_nothing_is_assigned_even_past_the_deadline(name: str, grace: int) -> None:
    assigner = waiting_for_slot_2(name, grace)
    assert assigner.assign(round_({}, T0, parallelism=3)) == {}
    assert assigner.assign(round_({}, T0 + 10 * GRACE, parallelism=3, outstanding=8)) == {}
    assert pending_ids(assigner) == ["s-2"]
    # the first reader to register gets it at once: its wait is long over
    assert ids(assigner.assign(round_({1: 3}, T0 + 10 * GRACE + 1, parallelism=3))) == {1: ["s-2"]}


@pytest.mark.parametrize("name", ["sticky", "round_robin"])
def test_a_split_s_own_reader_coming_back_within_the_grace_delay_gets_it(name: str) -> None:
    assigner = waiting_for_slot_2(name, GRACE)
    assert assigner.assign(round_(LIVE_0_1, T0, parallelism=3)) == {}
    got = assigner.assign(round_({**LIVE_0_1, 2: 0}, T0 + GRACE - 1, parallelism=3))
    assert ids(got) == {2: ["s-2"]}


def test_fair_share_divides_by_the_live_readers_once_a_split_is_overdue() -> None:
    """Four slots, two live readers: each takes 2 of 8 at once; after the grace delay
    the share is ceil(8/2) = 4 and every split is read."""
    assigner: FairShareAssigner[Split] = FairShareAssigner(GRACE)
    assigner.add_splits(splits(*range(8)))
    assert ids(assigner.assign(round_({0: 0, 1: 0}, T0, parallelism=4))) == {0: ["s-0", "s-1"], 1: ["s-2", "s-3"]}
    assert assigner.next_deadline_ms() == T0 + GRACE
    assert assigner.assign(round_({0: 2, 1: 2}, T0 + GRACE - 1, parallelism=4)) == {}
    got = assigner.assign(round_({0: 2, 1: 2}, T0 + GRACE, parallelism=4))
    assert ids(got) == {0: ["s-4", "s-5"], 1: ["s-6", "s-7"]}


@pytest.mark.parametrize("name", ["sticky", "round_robin"])
def test_next_deadline_is_the_earliest_wait_plus_the_grace_delay(name: str) -> None:
    """Owner assigners: each split has its own deadline (fair share hands out every
    pending split once one is overdue)."""
    assigner = STRATEGIES[name](GRACE)
    live = {3: 0}  # the owners of both splits (slots 1 and 2 for sticky, 0 and 1 for round robin) are away
    assigner.add_splits(splits(1))
    assert assigner.assign(round_(live, T0, parallelism=4)) == {}
    assigner.add_splits(splits(2))
    assert assigner.assign(round_(live, T0 + 700, parallelism=4)) == {}
    assert pending_ids(assigner) == ["s-1", "s-2"]
    assert assigner.next_deadline_ms() == T0 + GRACE
    assert ids(assigner.assign(round_(live, T0 + GRACE, parallelism=4))) == {3: ["s-1"]}
    assert assigner.next_deadline_ms() == T0 + 700 + GRACE
    assert assigner.assign(round_({3: 1}, T0 + 700 + GRACE - 1, parallelism=4)) == {}
    assert ids(assigner.assign(round_({3: 1}, T0 + 700 + GRACE, parallelism=4))) == {3: ["s-2"]}
    assert assigner.next_deadline_ms() is None


@pytest.mark.parametrize("name", STRATEGIES)
def test_remove_takes_pending_splits_out(name: str) -> None:
    assigner = STRATEGIES[name](GRACE)
    assigner.add_splits(splits(1, 2, 3))
    # keep them waiting: their owners (sticky 1-3, round robin 0-2) are away, reader 4 is past its share
    assert assigner.assign(round_({4: 9}, T0, parallelism=8, outstanding=30)) == {}
    assert len(assigner) == 3 and assigner.next_deadline_ms() == T0 + GRACE
    removed = assigner.remove(["s-3", "nope", "s-1"])
    assert [s.split_id for s in removed] == ["s-3", "s-1"]
    assert pending_ids(assigner) == ["s-2"] and len(assigner) == 1
    assert assigner.remove(["s-1"]) == []
    assigner.remove(["s-2"])
    assert assigner.next_deadline_ms() is None, "a removed split waits for nothing"
    assert assigner.assign(round_({4: 0}, T0 + 2 * GRACE, parallelism=8)) == {}


@pytest.mark.parametrize("name", STRATEGIES)
def test_adding_a_known_id_replaces_the_pending_split(name: str) -> None:
    @dataclass(frozen=True)
    class Positioned:
        split_id: str
        position: int

    assigner: SplitAssigner[Any] = STRATEGIES[name](0)
    assigner.add_splits([Positioned("s-0", 1), Positioned("s-1", 1)])
    assigner.add_splits([Positioned("s-0", 7)])
    assert assigner.pending == [Positioned("s-0", 7), Positioned("s-1", 1)]
    given = assigner.assign(round_({0: 0}, T0, parallelism=1))
    assert given == {0: [Positioned("s-0", 7), Positioned("s-1", 1)]}


# -- options ---------------------------------------------------------------------------


def test_assigner_from_options_builds_the_named_assigner() -> None:
    default = assigner_from_options({}, "round_robin")()
    assert isinstance(default, RoundRobinAssigner) and default.grace_ms == DEFAULT_GRACE_MS
    made = assigner_from_options({"assigner": " Fair_Share ", "assignment_grace_ms": "250"}, "sticky")()
    assert isinstance(made, FairShareAssigner) and made.grace_ms == 250
    sticky = assigner_from_options({"assigner": "sticky"}, "fair_share")
    assert sticky() is not sticky(), "the factory makes a fresh assigner per enumerator"


@pytest.mark.parametrize(
    ("options", "setting", "words"),
    [
        ({"assigner": "random"}, "assigner", "random"),
        ({"assigner": ""}, "assigner", "known: fair_share, pull, round_robin, sticky"),
        ({"assignment_grace_ms": "soon"}, "assignment_grace_ms", "soon"),
        ({"assignment_grace_ms": "1.5"}, "assignment_grace_ms", "integer"),
        ({"assignment_grace_ms": "-1"}, "assignment_grace_ms", ">= 0"),
    ],
)
def test_bad_options_raise_config_error_naming_the_option(options: dict[str, str], setting: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        assigner_from_options(options, "fair_share")
    assert caught.value.setting == setting
    assert setting in str(caught.value) and words in str(caught.value)


@pytest.mark.parametrize("name", STRATEGIES)
def test_a_negative_grace_is_refused_by_the_constructor(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        STRATEGIES[name](-5)
    assert caught.value.setting == "assignment_grace_ms"


def test_the_sequence_connector_refuses_a_bad_assigner_naming_the_option() -> None:
    from sluicegate_connectors.sequence import SequenceSource

    for options, setting in (
        ({"assigner": "lottery"}, "assigner"),
        ({"assignment_grace_ms": "x"}, "assignment_grace_ms"),
    ):
        with pytest.raises(ConfigError) as caught:
            SequenceSource.from_options(options)
        assert caught.value.setting == setting
    source = SequenceSource.from_options({"assigner": "round_robin", "assignment_grace_ms": "100"})
    made = source.options.assigner()
    assert isinstance(made, RoundRobinAssigner) and made.grace_ms == 100


# -- property: nothing assigned twice, nothing lost, nothing waits past its deadline ---------

Op = tuple[Any, ...]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 5)),
        st.tuples(st.just("return"), st.integers(0, 7), st.integers(1, 4)),
        st.tuples(st.just("finish"), st.integers(0, 7), st.integers(1, 4)),
        st.tuples(st.just("remove"), st.integers(0, 3)),
        st.tuples(
            st.just("round"),
            st.frozensets(st.integers(0, 7), max_size=8),
            st.sampled_from([0, 1, 10, 500, 999, 1000, 1001, 2500]),
            st.booleans(),
        ),
    ),
    max_size=40,
)


class TrackedLoads(ReaderLoads):
    """Live loads that name the subtasks changed since the last round, as the coordinator's
    do (an assigner may look only at those)."""

    def __init__(self, loads: Mapping[int, int], before: Mapping[int, int]) -> None:
        super().__init__(loads)
        self._changed = [s for s in sorted(set(loads) | set(before)) if loads.get(s) != before.get(s)]

    def touched(self) -> list[int]:
        return self._changed


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from([*sorted(STRATEGIES), "sticky-crc32"]),
    grace=st.sampled_from([0, 1, 1000]),
    parallelism=st.integers(1, 6),
    script=ops,
    tracked=st.booleans(),
)
def test_random_rounds_assign_each_split_once_to_a_live_reader_and_leave_none_overdue(
    name: str, grace: int, parallelism: int, script: list[Op], tracked: bool
) -> None:
    """``tracked``: the live loads name only what changed since the last round."""
    assigner = StickyHashAssigner(grace) if name == "sticky-crc32" else STRATEGIES[name](grace)
    owner_based = name != "fair_share"
    now = T0
    added: set[str] = set()
    pending: dict[str, Split] = {}
    owned: dict[str, int] = {}  # split id -> subtask (live or not)
    finished: set[str] = set()
    removed: set[str] = set()
    next_id = 0
    live_before: dict[int, int] = {}

    def owned_by(subtask: int) -> list[str]:
        return sorted(sid for sid, s in owned.items() if s == subtask)

    for op in script:
        kind = op[0]
        if kind == "add":
            new = splits(*range(next_id, next_id + op[1]))
            next_id += op[1]
            assigner.add_splits(new)
            added.update(s.split_id for s in new)
            pending.update((s.split_id, s) for s in new)
        elif kind in ("return", "finish"):
            subtask, count = op[1] % parallelism, op[2]
            mine = owned_by(subtask)[:count]
            for sid in mine:
                del owned[sid]
            if kind == "return":  # failure or departure: back to the enumerator
                back = [Split(sid) for sid in mine]
                assigner.add_splits(back)
                pending.update((s.split_id, s) for s in back)
            else:
                finished.update(mine)
        elif kind == "remove":
            victims = sorted(pending)[: op[1]]
            assert sorted(s.split_id for s in assigner.remove(victims)) == victims
            for sid in victims:
                del pending[sid]
            removed.update(victims)
        else:
            _, live_set, step, ask = op
            live_set = {s for s in live_set if s < parallelism}
            now += step
            live = {s: len(owned_by(s)) for s in sorted(live_set)}
            requester = min(live) if ask and live else None
            deadline_before = assigner.next_deadline_ms()
            loads: Mapping[int, int] = TrackedLoads(live, live_before) if tracked else live
            rnd = AssignmentRound(parallelism, loads, len(owned), now, requester)
            got = assigner.assign(rnd)

            given = [s.split_id for batch in got.values() for s in batch]
            assert set(got) <= set(live), f"assigned to a subtask without a live reader: {got} live {live}"
            assert all(got.values()), "an empty assignment"
            assert len(given) == len(set(given)), "a split given twice in one round"
            assert set(given) <= set(pending), "a split that was not pending was given"
            for subtask, batch in got.items():
                for split in batch:
                    assert split is pending.pop(split.split_id)
                    owned[split.split_id] = subtask
            live_before = {s: len(owned_by(s)) for s in live}  # what the next round changes from

            if live:
                # nothing is left overdue while a reader is live
                deadline = assigner.next_deadline_ms()
                assert deadline is None or deadline > now, (deadline, now)
                if grace == 0 or len(live) == parallelism:
                    assert not pending, "nothing waits with grace 0 or with every slot live"
                if owner_based:
                    owner = getattr(assigner, "owner")  # noqa: B009 (only the owner-based assigners have it)
                    for split in assigner.pending:
                        assert owner(split, parallelism) not in live, "a split waits for a reader that is live"
                elif deadline_before is not None and now >= deadline_before:
                    assert not pending, "fair share left splits pending past the deadline"
            if pending:
                assert assigner.next_deadline_ms() is not None or not live

        assert pending_ids(assigner) == list(pending), "pending: not the splits, or not in the order they came"
        assert len(assigner) == len(pending)
        # nothing lost, nothing in two places
        assert not set(pending) & set(owned) and not (set(pending) | set(owned)) & (finished | removed)
        assert set(pending) | set(owned) | finished | removed == added


# -- SplitDistributor ----------------------------------------------------------------------


class FakeContext(SplitEnumeratorContext[Split]):
    """Records assign_splits and call_async; readers and their loads are set by the test."""

    def __init__(self, parallelism: int, live: set[int]) -> None:
        self.parallelism = parallelism
        self.live = set(live)
        self.owned: dict[str, int] = {}
        self.assignments: list[dict[int, list[str]]] = []
        self.timers: list[tuple[Callable[[], Any], Callable[[Any, BaseException | None], None], int, int]] = []
        self.handles: list[AsyncCallHandle] = []
        """One per timer, as the host's: a cancelled timer's handler never runs."""

    def armed(self) -> int:
        """Timers neither cancelled nor fired."""
        return sum(1 for handle in self.handles if not handle.cancelled)

    def current_parallelism(self) -> int:
        return self.parallelism

    def registered_readers(self) -> Mapping[int, ReaderInfo[Split]]:
        counts = {s: sum(1 for o in self.owned.values() if o == s) for s in self.live}
        return {s: ReaderInfo(s, 1, "test", owned_split_count=counts[s]) for s in sorted(self.live)}

    def outstanding_split_count(self) -> int:
        return len(self.owned)

    def assign_splits(self, assignment: SplitsAssignment[Split] | Mapping[int, Sequence[Split]]) -> None:
        mapping = assignment.assignment if isinstance(assignment, SplitsAssignment) else assignment
        for subtask, batch in mapping.items():
            assert subtask in self.live, f"assigned to subtask {subtask} without a live reader"
            for split in batch:
                assert split.split_id not in self.owned, f"{split.split_id} assigned twice"
                self.owned[split.split_id] = subtask
        self.assignments.append(ids(mapping))

    def signal_no_more_splits(self, subtask: int) -> None:
        raise AssertionError("unused")

    def send_event_to_source_reader(self, subtask: int, event: Any, attempt: int | None = None) -> None:
        raise AssertionError("unused")

    def call_async(
        self,
        callable_: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        initial_delay_ms: int = 0,
        period_ms: int = 0,
    ) -> AsyncCallHandle:
        self.timers.append((callable_, handler, initial_delay_ms, period_ms))
        self.handles.append(AsyncCallHandle())
        return self.handles[-1]

    def fire(self, index: int = -1) -> None:
        """Run a timer as the host does: the callable off the loop, then its handler (not
        for a timer cancelled meanwhile). A one-shot timer is then spent."""
        callable_, handler, _, period_ms = self.timers[index]
        handle = self.handles[index]
        if handle.cancelled:
            return
        if not period_ms:
            handle.cancel()
        handler(callable_(), None)

    @property
    def metrics(self) -> EnumeratorMetrics:
        raise AssertionError("unused")


class Clock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def distributor(
    name: str, parallelism: int, live: set[int], grace: int = GRACE
) -> tuple[SplitDistributor[Split], FakeContext, Clock]:
    ctx, clock = FakeContext(parallelism, live), Clock()
    return SplitDistributor(ctx, STRATEGIES[name](grace), clock=clock), ctx, clock


@pytest.mark.parametrize("name", STRATEGIES)
def test_the_distributor_arms_one_timer_per_deadline_and_its_firing_assigns_the_overdue_splits(name: str) -> None:
    """Four slots, readers 0 and 1 live, eight splits: whatever the strategy, some wait;
    one one-shot timer is armed for their deadline, however many rounds happen
    meanwhile, and when it fires everything is assigned to the live readers."""
    dist, ctx, clock = distributor(name, 4, {0, 1})
    dist.add_splits(splits(*range(8)))
    first = dist.distribute()
    assert 0 < first < 8 and len(ctx.assignments) == 1
    assert [(delay, period) for _, _, delay, period in ctx.timers] == [(GRACE, 0)]
    assert ctx.timers[0][0]() is None, "the timer's callable does no work off the loop"

    for elapsed in (1, 700, GRACE - 1):  # other events (heartbeats, requests) meanwhile
        clock.now_ms = T0 + elapsed
        assert dist.distribute(requester=0) == 0
    assert len(ctx.timers) == 1, "a second timer was armed for the same deadline"

    clock.now_ms = T0 + GRACE
    ctx.fire()
    assert len(ctx.owned) == 8 and set(ctx.owned.values()) == {0, 1}
    assert sum(len(v) for a in ctx.assignments[1:] for v in a.values()) == 8 - first
    assert len(ctx.timers) == 1 and dist.assigner.next_deadline_ms() is None


def test_the_distributor_re_arms_for_the_next_deadline() -> None:
    dist, ctx, clock = distributor("sticky", 4, {0})
    dist.add_splits(splits(1))
    dist.distribute()
    clock.now_ms = T0 + 500
    dist.add_splits(splits(2))
    dist.distribute()
    assert [delay for _, _, delay, _ in ctx.timers] == [GRACE]
    clock.now_ms = T0 + GRACE
    ctx.fire()
    assert ctx.assignments == [{0: ["s-1"]}]
    assert [delay for _, _, delay, _ in ctx.timers] == [GRACE, 500], "the next timer covers what is left"
    clock.now_ms = T0 + 500 + GRACE
    ctx.fire()
    assert ctx.assignments == [{0: ["s-1"]}, {0: ["s-2"]}]
    assert len(ctx.timers) == 2


def test_a_timer_that_fires_early_assigns_nothing_and_re_arms_for_the_rest() -> None:
    dist, ctx, clock = distributor("round_robin", 2, {0})
    dist.add_splits(splits(0, 1))
    dist.distribute()
    assert ctx.assignments == [{0: ["s-0"]}]
    clock.now_ms = T0 + GRACE - 30  # the host's timer and the wall clock disagree a little
    ctx.fire()
    assert ctx.assignments == [{0: ["s-0"]}]
    assert [delay for _, _, delay, _ in ctx.timers] == [GRACE, 30]
    clock.now_ms = T0 + GRACE
    ctx.fire()
    assert ctx.assignments == [{0: ["s-0"]}, {0: ["s-1"]}]


@pytest.mark.parametrize("name", STRATEGIES)
def test_a_timer_firing_with_no_live_reader_does_not_re_arm_and_a_registration_assigns(name: str) -> None:
    """The live readers leave before the deadline. The timer fires, nothing can be
    assigned, and it must not re-arm itself for a deadline that is already past (a
    timer every millisecond, each a coordinator step and a commit, until a reader comes
    back): the next registration distributes anyway."""
    dist, ctx, clock = distributor(name, 4, {0, 1})
    dist.add_splits(splits(*range(8)))
    dist.distribute()
    assert len(ctx.timers) == 1
    for sid in list(ctx.owned):  # both readers leave: their splits come back
        del ctx.owned[sid]
    back = [Split(sid) for a in ctx.assignments for batch in a.values() for sid in batch]
    ctx.live.clear()
    dist.add_splits(back)
    clock.now_ms = T0 + GRACE
    ctx.fire()
    clock.now_ms += 10
    assert dist.distribute() == 0
    assert len(ctx.timers) == 1, f"timers re-armed with no reader live: {[t[2] for t in ctx.timers]}"

    clock.now_ms = T0 + 5 * GRACE
    ctx.live.add(3)  # a reader registers (add_reader): the overdue splits go to it at once
    assert dist.distribute() == 8
    assert set(ctx.owned.values()) == {3} and len(ctx.owned) == 8
    assert len(ctx.timers) == 1


def test_a_distributor_with_nothing_waiting_arms_no_timer() -> None:
    dist, ctx, _ = distributor("fair_share", 2, {0, 1})
    dist.add_splits(splits(0, 1, 2))
    assert dist.distribute() == 3
    assert ctx.timers == []
    dist0, ctx0, _ = distributor("sticky", 4, {0}, grace=0)
    dist0.add_splits(splits(1, 2, 3))
    assert dist0.distribute() == 3 and ctx0.timers == []


def test_a_pull_distributor_serves_the_readers_that_asked_for_nothing_when_splits_arrive() -> None:
    """Flink's FileSource keeps its readers awaiting a split: readers 0, 2 and 1 ask while
    nothing is pending and get nothing; reader 2 leaves; a discovery then adds five splits
    and its round (no requester) gives the two still waiting their share at once, in the
    order they asked, instead of at their next request a second later. Served, a reader
    waits no more; a request that finds splits is served by its own round."""
    ctx = FakeContext(3, {0, 1, 2})
    dist = SplitDistributor(ctx, PullAssigner[Split](), clock=Clock())
    for subtask in (0, 2, 1):
        assert dist.distribute(requester=subtask) == 0
    ctx.live.discard(2)
    dist.add_splits(splits(*range(5)))
    assert dist.distribute() == 5
    assert ctx.assignments == [{0: ["s-0", "s-1", "s-2"], 1: ["s-3", "s-4"]}]
    dist.add_splits(splits(5, 6))
    assert dist.distribute() == 0, "served readers were not waiting any more"
    # 2 pending + 5 owned over 2 live: share 4, reader 1 owns 2
    assert dist.distribute(requester=1) == 2 and ctx.assignments[-1] == {1: ["s-5", "s-6"]}
    ctx.live.add(2)
    assert dist.distribute(requester=2) == 0
    dist.add_splits(splits(7))
    assert dist.distribute() == 1 and ctx.assignments[-1] == {2: ["s-7"]}


# -- rebalancing: load follows readers --------------------------------------------------------


class RebalancingContext(FakeContext):
    """FakeContext plus what cooperative rebalancing needs, kept as the core keeps it: a
    split asked back stays owned (and cannot be assigned elsewhere) until its owner's
    checkpoint returns it (``give_back``)."""

    def __init__(self, parallelism: int, live: set[int], clock: Clock) -> None:
        super().__init__(parallelism, live)
        self.clock = clock
        self.releasing: dict[str, int] = {}
        self.requests: list[tuple[int, list[str]]] = []
        self._fired = 0

    def after_settling(self) -> None:
        """The readers stay as they are for the settle delay: the timers armed meanwhile
        fire (and those they arm, a settle delay later)."""
        for _ in range(5):
            armed = len(self.timers)
            if self._fired == armed:
                return
            self.clock.now_ms += REBALANCE_SETTLE_MS
            while self._fired < armed:
                self._fired += 1
                self.fire(self._fired - 1)
        raise AssertionError("the timers keep re-arming")

    def owned_splits(self, subtask: int) -> list[Split]:
        return [Split(sid) for sid, owner in self.owned.items() if owner == subtask]

    def releasing_split_ids(self, subtask: int) -> frozenset[str]:
        return frozenset(sid for sid, owner in self.releasing.items() if owner == subtask)

    def request_split_release(self, subtask: int, split_ids: Sequence[str]) -> None:
        assert subtask in self.live, f"asked subtask {subtask} without a live reader"
        assert split_ids, "an empty request"
        for sid in split_ids:
            assert self.owned.get(sid) == subtask, f"asked {subtask} for {sid}, owned by {self.owned.get(sid)}"
            assert sid not in self.releasing, f"{sid} asked for twice"
            self.releasing[sid] = subtask
        self.requests.append((subtask, list(split_ids)))

    def give_back(self, dist: SplitDistributor[Split], subtask: int) -> None:
        """The owner's checkpoint returned what it was asked for; the enumerator gets it back."""
        back = [sid for sid, owner in self.releasing.items() if owner == subtask]
        if not back:
            return
        for sid in back:
            del self.releasing[sid]
            del self.owned[sid]
        dist.add_splits([Split(sid) for sid in back])
        dist.distribute()

    def settle(self, dist: SplitDistributor[Split]) -> None:
        """Time passes and every owner checkpoints, until nothing moves any more."""
        self.after_settling()
        while self.releasing:
            for subtask in sorted(set(self.releasing.values())):
                self.give_back(dist, subtask)
            self.after_settling()

    def join(self, dist: SplitDistributor[Split], subtask: int) -> None:
        self.live.add(subtask)
        dist.distribute()  # add_reader

    def leave(self, dist: SplitDistributor[Split], subtask: int) -> None:
        """ReaderLeaving: everything it owned (asked for or not) goes back."""
        self.live.discard(subtask)
        back = [sid for sid, owner in self.owned.items() if owner == subtask]
        for sid in back:
            del self.owned[sid]
            self.releasing.pop(sid, None)
        dist.add_splits([Split(sid) for sid in back])
        dist.distribute()

    def loads(self) -> dict[int, int]:
        return {s: sum(1 for o in self.owned.values() if o == s) for s in sorted(self.live)}

    def assigned_counts(self) -> Counter[str]:
        return Counter(sid for a in self.assignments for batch in a.values() for sid in batch)


def rebalancing(
    name: str, parallelism: int, live: set[int], count: int, grace: int = GRACE
) -> tuple[SplitDistributor[Split], RebalancingContext, Clock]:
    """``count`` splits spread over the ``live`` readers (past the grace delay)."""
    clock = Clock()
    ctx = RebalancingContext(parallelism, live, clock)
    dist = SplitDistributor(ctx, STRATEGIES[name](grace), clock=clock)
    dist.add_splits(splits(*range(count)))
    dist.distribute()
    clock.now_ms += grace
    ctx.settle(dist)
    assert len(ctx.owned) == count and not dist.assigner.pending
    return dist, ctx, clock


def test_readers_joining_one_by_one_leave_one_settle_timer_armed_not_one_each() -> None:
    """Each join moves the end of the settle delay; the timer armed for the earlier end is
    cancelled. At 64 readers joining over 30 s, 64 timers each ran a rebalance of every
    split in flight in one coordinator step (60 s at 1M splits)."""
    dist, ctx, clock = rebalancing("fair_share", 16, {0, 1}, 32)
    for subtask in range(2, 10):
        clock.now_ms += REBALANCE_SETTLE_MS // 4
        ctx.join(dist, subtask)
        assert ctx.armed() == 1, f"{ctx.armed()} timers armed after reader {subtask} joined"
    ctx.settle(dist)
    assert sorted(ctx.loads().values()) == [3] * 8 + [4] * 2


def test_fair_share_readers_that_join_take_their_share_from_the_others_each_split_moving_once() -> None:
    """4 readers of 8 slots own 16 splits (4 each); 2 more join, and 2 more while the
    first splits asked back are still on their way: in the end each of the 8 owns 2, and
    no split moved twice."""
    dist, ctx, _ = rebalancing("fair_share", 8, {0, 1, 2, 3}, 16)
    assert ctx.loads() == {0: 4, 1: 4, 2: 4, 3: 4} and ctx.requests == []
    before = ctx.assigned_counts()
    ctx.join(dist, 4)
    ctx.join(dist, 5)
    assert ctx.requests == [], "readers that join together are planned for together, once they settle"
    ctx.after_settling()
    assert sum(len(ids) for _, ids in ctx.requests) == 4  # 16 over 6: 3, 3, 3, 3 and 2, 2 for them
    ctx.give_back(dist, 0)  # only one owner has checkpointed meanwhile
    ctx.join(dist, 6)
    ctx.join(dist, 7)
    ctx.settle(dist)
    assert ctx.loads() == dict.fromkeys(range(8), 2)
    moved = ctx.assigned_counts() - before
    assert len(moved) == 8 and set(moved.values()) == {1}, f"a split moved twice: {moved}"
    assert all(s < 4 for s, _ in ctx.requests), "a newcomer was asked for splits"


def test_readers_that_leave_for_good_have_their_splits_spread_over_the_rest() -> None:
    dist, ctx, clock = rebalancing("fair_share", 8, set(range(8)), 16)
    for s in (4, 5, 6, 7):
        ctx.leave(dist, s)
    clock.now_ms += GRACE
    ctx.settle(dist)
    assert ctx.loads() == {0: 4, 1: 4, 2: 4, 3: 4}


@pytest.mark.parametrize("name", ["sticky", "round_robin"])
def test_owner_assigners_move_a_split_to_its_own_slot_once_that_slot_has_a_reader(name: str) -> None:
    """Slots 0 and 1 of 4 live: the splits of slots 2 and 3 went to them after the grace
    delay (0 got s-2 and s-6, 1 got s-3 and s-7). Reader 2 joins: its splits go to it,
    and the guests of slot 3 (no reader) are spread to balanced counts."""
    dist, ctx, _ = rebalancing(name, 4, {0, 1}, 8)
    assert ctx.loads() == {0: 4, 1: 4}
    ctx.join(dist, 2)
    ctx.after_settling()
    assert sorted(ctx.requests) == [(0, ["s-2", "s-6"]), (1, ["s-3"])]
    ctx.settle(dist)
    assert sorted(sid for sid, s in ctx.owned.items() if s == 2) == ["s-2", "s-6"]
    assert ctx.loads() == {0: 3, 1: 3, 2: 2}
    # slot 3's reader joins: its splits go home, and nothing else moves
    ctx.requests.clear()
    ctx.join(dist, 3)
    ctx.after_settling()
    assert sorted(ctx.requests) == [(0, ["s-3"]), (1, ["s-7"])]
    ctx.settle(dist)
    assert {sid: s for sid, s in ctx.owned.items()} == {f"s-{k}": k % 4 for k in range(8)}


def test_a_round_asks_back_up_to_a_tenth_of_the_owned_splits_and_at_least_the_batch() -> None:
    """With many splits, 1,000 a round (each round a checkpoint of the owner away) left
    late readers empty for minutes: a round may ask for a tenth of what is owned."""
    dist, ctx, _ = rebalancing("fair_share", 2, {0}, 30_000, grace=0)
    ctx.join(dist, 1)
    ctx.after_settling()
    assert [(s, len(ids)) for s, ids in ctx.requests] == [(0, 3_000)]
    ctx.settle(dist)
    assert ctx.loads() == {0: 15_000, 1: 15_000}
    small, small_ctx, _ = rebalancing("fair_share", 2, {0}, 3_000, grace=0)
    small_ctx.join(small, 1)
    small_ctx.after_settling()
    assert [(s, len(ids)) for s, ids in small_ctx.requests] == [(0, 1_000)]


def test_a_reader_back_within_the_grace_delay_moves_nothing() -> None:
    """A reader leaves and its slot's reader is back before the grace delay ends: its
    splits wait for it and nobody else's move."""
    dist, ctx, clock = rebalancing("sticky", 4, {0, 1, 2, 3}, 8)
    before = ctx.assigned_counts()
    ctx.leave(dist, 3)
    clock.now_ms += GRACE // 2
    ctx.join(dist, 3)
    ctx.after_settling()
    assert ctx.requests == []
    assert ctx.assigned_counts() - before == Counter({"s-3": 1, "s-7": 1})


def test_no_rebalance_while_splits_are_pending_nor_on_a_request_for_work() -> None:
    dist, ctx, _ = rebalancing("fair_share", 4, {0}, 4)
    ctx.live.add(1)
    dist.distribute(requester=1)  # an idle reader asking for work is not a change of readers
    assert ctx.requests == []
    dist.add_splits(splits(10))
    ctx.live.add(2)
    assert dist.distribute() == 1  # the pending split goes out first; then the plan
    ctx.after_settling()
    assert ctx.requests


def test_a_context_without_rebalancing_turns_it_off() -> None:
    dist, ctx, _ = distributor("fair_share", 2, {0}, grace=0)
    dist.add_splits(splits(0, 1))
    assert dist.distribute() == 2
    ctx.live.add(1)
    assert dist.distribute() == 0 and dist.rebalance() == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(STRATEGIES)),
    parallelism=st.integers(2, 8),
    count=st.integers(0, 30),
    script=st.lists(st.tuples(st.sampled_from(["join", "leave", "return", "settle"]), st.integers(0, 7)), max_size=25),
)
def test_random_joins_and_leaves_converge_to_the_assigner_s_target_with_no_split_moved_twice_per_change(
    name: str, parallelism: int, count: int, script: list[tuple[str, int]]
) -> None:
    dist, ctx, clock = rebalancing(name, parallelism, {0}, count, grace=0)
    assigned = ctx.assigned_counts()
    changes = Counter[str]()  # changes of readers seen while a split was on its way
    for op, k in script:
        s = k % parallelism
        if op == "join" and s not in ctx.live:
            ctx.join(dist, s)
        elif op == "leave" and s in ctx.live and len(ctx.live) > 1:
            ctx.leave(dist, s)
        elif op == "return":
            ctx.give_back(dist, s)
        elif op == "settle":
            ctx.settle(dist)
        if op in ("join", "leave"):
            changes.update(list(ctx.owned))
    ctx.settle(dist)
    clock.now_ms += 1
    # nothing lost, nothing owned twice, nothing waiting
    assert sorted(ctx.owned) == sorted(s.split_id for s in splits(*range(count)))
    assert not dist.assigner.pending
    loads = ctx.loads()
    if name == "fair_share":
        assert max(loads.values()) - min(loads.values()) <= 1, loads
    else:
        owner = getattr(dist.assigner, "_known_owner")  # noqa: B009
        for sid, s in ctx.owned.items():
            home = owner(Split(sid), parallelism)
            assert home not in ctx.live or home == s, f"{sid} is on {s}, its slot {home} is live"
    # each split moved at most once per change of readers (plus its first assignment)
    moved = ctx.assigned_counts() - assigned
    for sid, n in moved.items():
        assert n <= changes[sid] + 1, f"{sid} moved {n} times over {changes[sid]} changes"


def test_the_assignment_rebalance_option_turns_rebalancing_off_and_is_checked() -> None:
    made = assigner_from_options({"assignment_rebalance": "False", "assignment_grace_ms": "0"}, "fair_share")()
    assert made.rebalancing is False
    assert assigner_from_options({}, "sticky")().rebalancing is True
    clock = Clock()
    ctx = RebalancingContext(4, {0}, clock)
    dist = SplitDistributor(ctx, made, clock=clock)
    dist.add_splits(splits(*range(8)))
    dist.distribute()
    ctx.settle(dist)
    ctx.join(dist, 1)
    ctx.after_settling()
    assert ctx.requests == [] and ctx.loads() == {0: 8, 1: 0}
    with pytest.raises(ConfigError) as caught:
        assigner_from_options({"assignment_rebalance": "sometimes"}, "fair_share")
    assert caught.value.setting == "assignment_rebalance"
