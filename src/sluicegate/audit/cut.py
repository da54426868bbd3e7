"""Where a read of a running source's control topics is judged: a consistent cut. Pure.

A coordinator step commits its records in one Kafka transaction, often on several
partitions of ``NS.S.readers``. The transaction's markers reach the partitions one
by one, so a read_committed read taken at one instant can see a step's records on
one partition and not yet on another, and a record whose ``inbox_offset`` names
inbox records past the inbox's end as read. Judged so, a history that never
existed would show violations: a release not yet visible makes a split owned
twice, an acknowledgement not yet read makes a release imprecise.

The coordinator numbers every record it sends (``cseq``) without gaps, and its
transactions commit one after the other. So once a record of cseq C is readable,
every record up to C is committed, only perhaps not readable yet: the cut is
the highest cseq of the first read, the read goes on until every record up to it
and every inbox record those records name are there, and records numbered past
it are left out. Every record up to the cut was written by steps that all
committed: a state that existed.

A cseq still missing when the reader gives up (a forged record with a cseq far
ahead, say) stays missing; the replay reports it as a gap (replay.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sluicegate.audit.replay import Numbered, ReadersRecord, numbered


@dataclass(frozen=True)
class Cut:
    """The judged cut: every coordinator record up to ``cseq``, the inbox below ``inbox_end``."""

    cseq: int
    inbox_end: int
    """The inbox's offset read up to (exclusive)."""
    left_out: int = 0
    """Readers-topic records read past the cut (later steps), not judged."""
    unresolved: tuple[int, ...] = ()
    """Cseqs up to ``cseq`` still unreadable when the reader gave up (judged as gaps)."""
    rereads: int = 0
    """Reads after the first one that completing the cut took (0: the first read was consistent)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "cseq": self.cseq,
            "inbox_end": self.inbox_end,
            "left_out": self.left_out,
            "unresolved": list(self.unresolved),
            "rereads": self.rereads,
        }

    def describe(self) -> str:
        text = f"coordinator records up to cseq {self.cseq}, the inbox below offset {self.inbox_end}"
        if self.left_out:
            text += f" ({self.left_out} later records left out)"
        if self.unresolved:
            text += f"; {len(self.unresolved)} records up to the cut never became readable"
        return text


@dataclass
class CutPlan:
    """The cut being completed: what is still missing below it."""

    cseq: int
    missing: set[int]
    inbox_needed: int
    """The inbox must be read below this offset (one past the highest inbox_offset named)."""

    @classmethod
    def first(cls, values: Iterable[Numbered]) -> CutPlan | None:
        """From the first read; None when nothing is numbered (no cut: v1 records or none)."""
        seen = list(values)
        cseqs = {v.cseq for v in seen if v.cseq is not None}
        if not cseqs:
            return None
        plan = cls(max(cseqs), set(range(1, max(cseqs) + 1)) - cseqs, 0)
        plan._name_inbox(seen)
        return plan

    def take(self, later: Sequence[ReadersRecord]) -> tuple[list[ReadersRecord], int]:
        """Records read after the first read: those up to the cut fill what was missing and
        are kept; returned: (kept, how many were left out)."""
        kept: list[ReadersRecord] = []
        for record in later:
            value = numbered(record[2])
            if value.cseq is not None and value.cseq <= self.cseq:
                kept.append(record)
                self.missing.discard(value.cseq)
                self._name_inbox([value])
        return kept, len(later) - len(kept)

    def _name_inbox(self, values: Iterable[Numbered]) -> None:
        named = [v.inbox_offset for v in values if v.inbox_offset is not None]
        self.inbox_needed = max([self.inbox_needed, *(offset + 1 for offset in named)])

    def complete(self, inbox_end: int) -> bool:
        return not self.missing and inbox_end >= self.inbox_needed

    def cut(self, inbox_end: int, left_out: int, rereads: int = 0) -> Cut:
        return Cut(self.cseq, inbox_end, left_out, tuple(sorted(self.missing)), rereads)
