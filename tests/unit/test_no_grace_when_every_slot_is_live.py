"""No split waits for a grace delay once every slot of its source has a live reader (issue
51 item 4: one reader of 8 splits was said to wait assignment_grace_ms for 7 of them at
every start although it was the only reader there could be). The grace delay keeps a
split for a reader that may come back; with every slot live there is nobody to wait for.
Checked on a real CoordinatorCore, with no time passing, at a first start and after a
coordinator restart with the readers restarting from their checkpoints."""

from __future__ import annotations

import pytest
from core_harness import CoreHarness, sequence_source

ASSIGNERS = ("fair_share", "sticky", "round_robin")
"""Every assigner that pushes splits (``pull`` gives them only to a reader that asks)."""


def unassigned_once_all_registered(h: CoreHarness, slots: int, restore: bool = False) -> int:
    for subtask in range(slots):
        h.register(subtask, restore=restore)
    return len(h.unassigned())


@pytest.mark.parametrize("assigner", ASSIGNERS)
@pytest.mark.parametrize("slots", [1, 3])
def test_every_split_is_assigned_when_the_last_slot_registers(assigner: str, slots: int) -> None:
    h = CoreHarness(sequence_source(splits=8, assigner=assigner, assignment_grace_ms="60000"), max_parallelism=slots)
    h.start()
    assert unassigned_once_all_registered(h, slots) == 0
    assert sum(len(h.owned(s)) for s in range(slots)) == 8


@pytest.mark.parametrize("assigner", ASSIGNERS)
def test_the_only_reader_gets_every_split_back_at_its_restart(assigner: str) -> None:
    h = CoreHarness(sequence_source(splits=8, assigner=assigner, assignment_grace_ms="60000"), max_parallelism=1)
    h.start()
    h.register(0)
    h.ack(0)
    h.leave(0)
    h.restart_coordinator()
    assert unassigned_once_all_registered(h, 1, restore=True) == 0
    assert len(h.owned(0)) == 8


def test_with_a_slot_free_a_split_does_wait() -> None:
    """The other side: a slot nobody registered keeps its splits for the grace delay."""
    h = CoreHarness(sequence_source(splits=8, assigner="sticky", assignment_grace_ms="60000"), max_parallelism=2)
    h.start()
    assert unassigned_once_all_registered(h, 1) > 0
