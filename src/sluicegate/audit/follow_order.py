"""The coordinator's order, built incrementally as records arrive: ``FollowOrder``. Pure.

``audit --follow`` reads both control topics as they grow and must apply each record
to the ownership model in the order the batch replay uses (replay.py): readers-topic
records by ``cseq``, each after every inbox record up to its ``inbox_offset``. Records
arrive per partition, and the partitions run at their own pace, so a record waits
here until it is next: cseq N+1 after N, and only once the inbox has been read past
the offset it names. Because the coordinator numbers its records without gaps, the
next one is always known; a cseq that does not come while later ones wait for
``gap_timeout_ms`` is a gap (reported, and the order moves on to the next present).

Inbox records wait until the coordinator is known to have processed them: a
readers-topic record names them, or its committed progress does (``progress``: the
``meta`` state part, written in every commit, says it had sent cseq C when it had
processed inbox offset I). Applying an inbox record earlier could put it before a
coordinator record decided without it. Memory is the records waiting, no more.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from sluicegate.audit.replay import ReplayRecord


@dataclass(frozen=True)
class Gap:
    """Cseqs ``first``..``last`` never came; ``before`` is the record after them."""

    first: int
    last: int
    before: ReplayRecord


@dataclass(frozen=True)
class Duplicate:
    """A readers-topic record whose cseq another record already has (never applied)."""

    record: ReplayRecord
    cseq: int


Ready = ReplayRecord | Gap | Duplicate


class FollowOrder:
    def __init__(self, gap_timeout_ms: int, clock: Callable[[], float]) -> None:
        """``clock``: seconds (monotonic) — injected, so tests decide when a gap times out."""
        self.gap_timeout_s = gap_timeout_ms / 1000
        self._clock = clock
        self.next_cseq = 1
        self._waiting: dict[int, ReplayRecord] = {}
        self._inbox: deque[ReplayRecord] = deque()
        self._inbox_end = 0
        """The inbox's offset read up to (exclusive): offsets hold markers too."""
        self._skipped: set[int] = set()
        self._gap_since: float | None = None
        self._ready: list[Ready] = []
        self._progress: tuple[int, int] | None = None
        """(cseq, inbox offset) of the coordinator's latest commit seen."""

    @property
    def waiting(self) -> int:
        """Records held back (readers topic and inbox)."""
        return len(self._waiting) + len(self._inbox)

    def add_inbox(self, record: ReplayRecord) -> None:
        """An inbox record, in offset order."""
        self._inbox.append(record)

    def inbox_read_to(self, end: int) -> None:
        self._inbox_end = max(self._inbox_end, end)

    def add_readers(self, record: ReplayRecord) -> None:
        cseq = record.env.cseq
        if cseq is None:  # a protocol v1 coordinator numbers nothing: applied as it comes
            self._ready.append(record)
        elif cseq < self.next_cseq or cseq in self._waiting or cseq in self._skipped:
            self._ready.append(Duplicate(record, cseq))
        else:
            self._waiting[cseq] = record

    def progress(self, cseq: int, inbox_offset: int) -> None:
        """The coordinator committed having sent up to ``cseq`` and processed the inbox up to
        ``inbox_offset``."""
        if self._progress is None or (cseq, inbox_offset) > self._progress:
            self._progress = (cseq, inbox_offset)

    def skip(self, cseq: int) -> None:
        """A readers-topic record that does not decode but shows its cseq: its place is taken."""
        if cseq >= self.next_cseq:
            self._skipped.add(cseq)

    def ready(self) -> list[Ready]:
        """Everything that can be applied now, in order."""
        out, self._ready = self._ready, []
        while True:
            self._release_processed_inbox(out)
            cseq = self.next_cseq
            if cseq in self._skipped:
                self._skipped.discard(cseq)
                self.next_cseq += 1
                continue
            record = self._waiting.get(cseq)
            if record is None:
                gap = self._gap()
                if gap is None:
                    return out
                out.append(gap)
                self.next_cseq = gap.last + 1
                continue
            named = record.env.inbox_offset
            if named is not None and named >= self._inbox_end:
                return out  # the inbox records it was decided on are not read yet
            if named is not None:
                self._release_inbox_through(named, out)
            del self._waiting[cseq]
            out.append(record)
            self.next_cseq += 1
            self._gap_since = None

    def _release_processed_inbox(self, out: list[Ready]) -> None:
        """Inbox records the coordinator processed without sending anything after them
        (a SplitsFinished, a heartbeat): due once every record it had sent then is applied."""
        if self._progress is not None and self._progress[0] < self.next_cseq:
            self._release_inbox_through(self._progress[1], out)

    def _release_inbox_through(self, offset: int, out: list[Ready]) -> None:
        while self._inbox and self._inbox[0].location.offset <= offset:
            out.append(self._inbox.popleft())

    def _gap(self) -> Gap | None:
        """The gap before the lowest waiting record, once it has waited ``gap_timeout_s``."""
        if not self._waiting:
            self._gap_since = None
            return None
        now = self._clock()
        if self._gap_since is None:
            self._gap_since = now
        if now - self._gap_since < self.gap_timeout_s:
            return None
        self._gap_since = None
        lowest = min(self._waiting)
        return Gap(self.next_cseq, lowest - 1, self._waiting[lowest])
