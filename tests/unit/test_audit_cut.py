"""The consistent cut of a live read (audit/cut.py): what must still be read, and what is
left out, when a step's records are readable on some partitions and not yet on others."""

from __future__ import annotations

import orjson

from sluicegate.audit.cut import CutPlan
from sluicegate.audit.replay import Numbered, ReadersRecord, numbered


def record(partition: int, offset: int, cseq: int, inbox_offset: int | None = None) -> ReadersRecord:
    return partition, offset, orjson.dumps({"cseq": cseq, "inbox_offset": inbox_offset, "type": "AddSplits"})


def test_nothing_numbered_needs_no_cut() -> None:
    assert CutPlan.first([]) is None
    assert CutPlan.first([Numbered(None, 3)]) is None


def test_a_complete_first_read_is_its_own_cut() -> None:
    plan = CutPlan.first([Numbered(1, 0), Numbered(2, 4), Numbered(3, 4)])
    assert plan is not None
    assert plan.complete(inbox_end=5)
    cut = plan.cut(inbox_end=5, left_out=0)
    assert (cut.cseq, cut.inbox_end, cut.unresolved) == (3, 5, ())


def test_a_step_seen_on_one_partition_only_waits_for_the_other() -> None:
    """Cseqs 4 and 5 are one step on partitions 0 and 1; partition 1's marker is late: the
    first read has 5 and not 4. The read goes on; step 6, committed since, is left out."""
    first = [record(0, 0, 1, 0), record(1, 0, 2, 0), record(0, 1, 3, 1), record(0, 2, 5, 2)]
    plan = CutPlan.first(numbered(raw) for _, _, raw in first)
    assert plan is not None and plan.missing == {4}
    assert not plan.complete(inbox_end=3)
    later = [record(1, 1, 4, 2), record(1, 2, 6, 3)]
    kept, left_out = plan.take(later)
    assert kept == later[:1] and left_out == 1
    assert plan.complete(inbox_end=3)
    assert plan.cut(3, left_out).describe() == (
        "coordinator records up to cseq 5, the inbox below offset 3 (1 later records left out)"
    )


def test_records_that_name_inbox_records_not_read_yet_wait_for_them() -> None:
    plan = CutPlan.first([Numbered(1, 7)])
    assert plan is not None
    assert not plan.complete(inbox_end=7)  # inbox offset 7 is not read yet
    assert plan.complete(inbox_end=8)


def test_a_cseq_that_never_comes_is_unresolved() -> None:
    """A forged record with a cseq far ahead: the read gives up, and the replay reports the
    gap (test_audit.py)."""
    plan = CutPlan.first([Numbered(1, 0), Numbered(1_000, 0)])
    assert plan is not None
    cut = plan.cut(inbox_end=1, left_out=0)
    assert len(cut.unresolved) == 998 and cut.unresolved[0] == 2
    assert "998 records up to the cut never became readable" in cut.describe()


def test_values_are_read_leniently() -> None:
    assert numbered(None) == Numbered(None, None)
    assert numbered(b"not json") == Numbered(None, None)
    assert numbered(b"[1, 2]") == Numbered(None, None)
    assert numbered(b'{"cseq": true, "inbox_offset": "3"}') == Numbered(None, None)
    assert numbered(b'{"cseq": 9, "inbox_offset": 3}') == Numbered(9, 3)
