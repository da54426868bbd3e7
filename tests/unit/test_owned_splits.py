"""OwnedSplits, the view of a subtask's splits a rebalance reads (api/enumerator.py): it
decodes only what is read, so a fair-share rebalance of a million owned splits decodes the
few it moves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from sluicegate.api.assigners import FairShareAssigner, RebalanceRound
from sluicegate.api.enumerator import OwnedSplits


@dataclass(frozen=True)
class Split:
    split_id: str


class CountingDecode:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, wire: dict[str, Any]) -> Split:
        self.calls += 1
        return Split(wire["split_id"])


def _view(n: int, prefix: str = "s", decode: CountingDecode | None = None) -> OwnedSplits[Split]:
    wire = {f"{prefix}{k}": {"split_id": f"{prefix}{k}"} for k in range(n)}
    return OwnedSplits(wire, decode or CountingDecode())


def test_it_reads_like_the_list_of_splits_oldest_first() -> None:
    view = _view(6).without(["s1", "s4", "not-owned"])
    as_list = [Split(i) for i in ("s0", "s2", "s3", "s5")]
    assert len(view) == 4 and list(view) == as_list
    assert view[0] == as_list[0] and view[-1] == as_list[-1] and view[1:3] == as_list[1:3]
    assert view[::2] == as_list[::2] and view[:100] == as_list
    with pytest.raises(IndexError):
        view[4]
    assert list(_view(6).only(["s4", "s1", "nope"])) == [Split("s4"), Split("s1")]
    assert list(view.only(["s1"])) == [], "an excluded split is not in the view"
    assert list(OwnedSplits.of(as_list)) == as_list


def test_a_slice_from_the_front_decodes_only_what_it_holds() -> None:
    decode = CountingDecode()
    view = _view(100_000, decode=decode)
    assert len(view) == 100_000 and decode.calls == 0
    assert [s.split_id for s in view[:3]] == ["s0", "s1", "s2"] and decode.calls == 3


def test_a_fair_share_rebalance_of_many_owned_splits_decodes_the_ones_it_moves() -> None:
    decode = CountingDecode()
    owned = {0: _view(200_000, "a", decode), 1: _view(0, "b", decode), 2: _view(0, "c", decode)}
    plan = FairShareAssigner[Split]().rebalance(RebalanceRound(3, owned, max_moves=1_000))
    assert plan.move_count == 1_000
    assert set(plan.moves) == {0} and set(plan.moves[0].values()) == {1, 2}
    assert list(plan.moves[0]) == [f"a{k}" for k in range(1_000)], "the oldest move first"
    assert decode.calls == 1_000


def test_splits_asked_back_are_placed_by_id_without_decoding_one() -> None:
    decode = CountingDecode()
    first, second = _view(50_000, "a", decode), _view(50_000, "b", decode)
    in_flight = OwnedSplits.joined([first.only(["a7", "a3", "gone"]), second.without(["b1"]).only(["b1", "b2"])])
    assert len(in_flight) == 3 and in_flight.split_ids() == ["a7", "a3", "b2"]
    owned = {0: first.without(["a7", "a3"]), 1: _view(0, "c", decode), 2: _view(0, "d", decode)}
    plan = FairShareAssigner[Split]().rebalance(RebalanceRound(3, owned, in_flight, max_moves=10))
    assert set(plan.placed) == {"a7", "a3", "b2"} and set(plan.placed.values()) <= {1, 2}
    assert decode.calls == plan.move_count == 10, "only the splits asked for now are decoded"
    assert list(in_flight) == [Split("a7"), Split("a3"), Split("b2")]
