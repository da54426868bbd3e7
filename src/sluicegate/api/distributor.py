"""``SplitDistributor``: an assigner (assigners.py) run for an enumerator, through its
context: the rounds, the grace timer, the end of a bounded source and the rebalancing
requests. The assigners decide; this carries their decisions out."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Generic

from sluicegate.api.assigners import (
    REBALANCE_SETTLE_MS,
    AssignmentRound,
    RebalanceRound,
    SplitAssigner,
    rebalance_budget,
)
from sluicegate.api.enumerator import AsyncCallHandle, OwnedSplits, ReaderLoads, SplitEnumeratorContext
from sluicegate.api.split import SplitT


class SplitDistributor(Generic[SplitT]):
    """Runs an assigner for an enumerator: builds the round from the context, assigns,
    and arms a one-shot ``call_async`` timer when a split waits for a grace delay, so
    the delay ends even when no other event comes. The enumerator calls ``distribute``
    on add_reader, add_splits_back and RequestSplit (no timer is armed while no reader
    is live: the next registration is the event that ends the wait). For an assigner
    that gives only to requesters it keeps the readers that asked and got nothing, and
    a round that new or returned splits started serves them (``_serve_awaiting``).

    It also ends a bounded source: once ``all_discovered()`` and no split is pending or
    owned by anyone, every live reader is told NoMoreSplits.

    And it rebalances: whenever a round that a change of readers or splits started
    (add_reader, add_splits_back, discovery, the grace timer; not a RequestSplit, which
    an idle reader repeats every second) leaves nothing pending, it asks the owners for
    the splits the assigner's plan moves (``rebalance``; off with a context that cannot,
    or with ``rebalance=False``), and gives each one returned to the reader the plan
    named. After a change of the live readers it first waits ``REBALANCE_SETTLE_MS`` (at
    most the grace delay) without another change, on a one-shot timer. The plans are not
    part of the enumerator's state: after a coordinator restart the splits still on their
    way back are assigned by the assigner's own rule."""

    def __init__(
        self,
        context: SplitEnumeratorContext[SplitT],
        assigner: SplitAssigner[SplitT],
        clock: Callable[[], int] | None = None,
        all_discovered: Callable[[], bool] = lambda: False,
        rebalance: bool = True,
    ) -> None:
        self.context = context
        self.assigner = assigner
        self._clock = clock or context.current_time_ms
        """The coordinator's step time by default, so a replayed step decides the same."""
        self._all_discovered = all_discovered
        """Whether the enumerator will never find another split (bounded and fully discovered)."""
        self._timer_due_ms: int | None = None
        self._timer: AsyncCallHandle | None = None
        # a context that cannot take splits back (e.g. a test's, or an older host's) turns it off
        cooperative = type(context).request_split_release is not SplitEnumeratorContext.request_split_release
        self._rebalance = rebalance and cooperative and assigner.rebalancing
        self._planned: dict[str, int] = {}
        """Split asked back -> the live subtask the plan gives it to once returned."""
        self._landed: dict[str, None] = {}
        """Planned splits added back since the last round, in arrival order: what a round
        looks up in ``_planned``, so that it costs what came back, not what is on its way."""
        self._readers_seen: frozenset[int] = frozenset()
        self._readers_changed_ms: int | None = None
        self._settle_due_ms: int | None = None
        self._settle_timer: AsyncCallHandle | None = None
        self._awaiting: dict[int, None] = {}
        """Subtasks that asked for work (RequestSplit) and have got nothing since, in the
        order they asked; not state: after a restart each asks again within a second."""

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        if self._planned:
            self._landed.update((s.split_id, None) for s in splits if s.split_id in self._planned)
        self.assigner.add_splits(splits)

    def distribute(self, requester: int | None = None) -> int:
        """Assign what can be assigned now, or signal the bounded end; returns how many
        splits went out."""
        readers = self.context.reader_loads()
        if not readers:
            return 0
        if requester is not None and self.assigner.gives_only_to_requesters:
            self._awaiting[requester] = None  # until a round gives it something
        if not len(self.assigner):
            if self._all_discovered() and self.context.outstanding_split_count() == 0:
                for subtask in list(readers):
                    self.context.signal_no_more_splits(subtask)
            elif requester is None:
                self.rebalance()
            return 0
        return self._assign_now(requester)

    def _assign_now(self, requester: int | None = None) -> int:
        loads = self.context.reader_loads()
        planned = self._take_planned(loads)
        # Splits on their way to a planned receiver count as its own already (the common
        # case has none: the coordinator's ordered loads are used as they are).
        live: Mapping[int, int] = (
            ReaderLoads({s: n + len(planned.get(s, ())) for s, n in loads.items()}) if planned else loads
        )
        round_ = AssignmentRound(
            parallelism=self.context.current_parallelism(),
            live=live,
            outstanding=self.context.outstanding_split_count() + sum(len(v) for v in planned.values()),
            now_ms=self._clock(),
            requester=requester,
        )
        assignment = self.assigner.assign(round_)
        if requester is None and self._awaiting:
            self._serve_awaiting(round_, assignment)
        for subtask, splits in planned.items():
            assignment[subtask] = [*splits, *assignment.get(subtask, [])]
        for subtask in assignment:
            self._awaiting.pop(subtask, None)
        if assignment:
            self.context.assign_splits(assignment)
        if round_.live:
            # With no live reader nothing can go out before one registers, and add_reader
            # distributes; a timer now would find its deadline past and re-arm every 1 ms.
            self._arm_timer(round_.now_ms)
        if requester is None and not len(self.assigner):
            self.rebalance()
        return sum(len(v) for v in assignment.values())

    def _serve_awaiting(self, round_: AssignmentRound, assignment: dict[int, list[SplitT]]) -> None:
        """A round that splits started (a discovery, splits given back, a timer) serves the
        readers that asked for work and got none, in the order they asked, as if each asked
        again now: a pull assigner gives only to a requester, and a reader repeats its
        request once a second (a new file waited up to that second; a ``Trigger.Once``
        batch planned in it read nothing). Flink's FileSource keeps these readers too."""
        live = round_.live
        for subtask in [s for s in self._awaiting if s not in live]:
            del self._awaiting[subtask]  # left: its next attempt asks again
        for subtask in list(self._awaiting):
            if not len(self.assigner):
                return
            if subtask in assignment:
                continue
            loads = {s: n + len(assignment.get(s, ())) for s, n in live.items()}
            given = sum(map(len, assignment.values()))
            asked = replace(round_, live=loads, outstanding=round_.outstanding + given, requester=subtask)
            for to, splits in self.assigner.assign(asked).items():
                assignment.setdefault(to, []).extend(splits)

    def _take_planned(self, live: Mapping[int, int]) -> dict[int, list[SplitT]]:
        """The returned splits that a plan gives to a reader that is still live (no plan,
        the common case, costs nothing: a round must not cost what is live)."""
        if not self._landed:
            return {}
        returned = [sid for sid in self._landed if sid in self._planned and sid in self.assigner]
        self._landed.clear()
        if not returned:
            return {}
        out: dict[int, list[SplitT]] = {}
        for split in self.assigner.remove([sid for sid in returned if self._planned[sid] in live]):
            out.setdefault(self._planned[split.split_id], []).append(split)
        for sid in returned:
            del self._planned[sid]  # a receiver that left: the assigner decides
        return out

    def rebalance(self) -> int:
        """Ask owners for the splits the assigner's plan moves; returns how many were
        asked for. Only with nothing pending: pending splits are placed first, and a split
        waiting for its slot's grace delay must not be overtaken by a move."""
        if not self._rebalance or len(self.assigner):
            return 0
        readers = self.context.registered_readers()
        if len(readers) < 2 or not self._settled(frozenset(readers)):
            return 0
        try:
            owned: dict[int, Sequence[SplitT]] = {}
            asked_back: list[OwnedSplits[SplitT]] = []
            for subtask in readers:
                asked = self.context.releasing_split_ids(subtask)
                splits = self.context.owned_split_view(subtask)  # decoded only as far as the assigner reads
                owned[subtask] = splits.without(asked)
                asked_back.append(splits.only(asked))
            in_flight = OwnedSplits.joined(asked_back)  # at 1M splits, 100,000s: none decoded here
            budget = rebalance_budget(sum(map(len, owned.values())) + len(in_flight))
            round_ = RebalanceRound(self.context.current_parallelism(), owned, in_flight, max_moves=budget)
            plan = self.assigner.rebalance(round_)
            # A plan whose split is no longer on its way (its owner failed, it finished) is void;
            # the splits in flight may get a new receiver (they have not landed yet).
            flying = set(in_flight.split_ids())
            self._planned = {sid: to for sid, to in self._planned.items() if sid in flying and to in readers}
            self._planned.update(plan.placed)
            for subtask, moves in sorted(plan.moves.items()):
                self.context.request_split_release(subtask, list(moves))
                self._planned.update(moves)
        except NotImplementedError:
            self._rebalance = False  # a context without cooperative rebalancing
            return 0
        return plan.move_count

    def _settled(self, live: frozenset[int]) -> bool:
        """Whether the live readers have not changed for the settle delay; if they have,
        a one-shot timer rebalances once it is over."""
        now = self._clock()
        if live != self._readers_seen:
            self._readers_seen = live
            self._readers_changed_ms = now
        settle = min(self.assigner.grace_ms, REBALANCE_SETTLE_MS)
        if self._readers_changed_ms is None or now - self._readers_changed_ms >= settle:
            return True
        due = self._readers_changed_ms + settle
        if self._settle_due_ms is None or self._settle_due_ms < due:
            self._settle_due_ms = due
            # One timer at a time: 64 readers registering over 30 s armed 64 timers, and each
            # that fired ran a rebalance of everything in flight (a 60 s step at 1M splits).
            if self._settle_timer is not None:
                self._settle_timer.cancel()
            self._settle_timer = self.context.call_async(_nothing, self._on_settled, initial_delay_ms=max(1, due - now))
        return False

    def _on_settled(self, _result: None, _error: BaseException | None) -> None:
        self._settle_due_ms = None  # fired early (clocks disagree a little): rebalance re-arms
        self._settle_timer = None
        self.rebalance()

    def _arm_timer(self, now_ms: int) -> None:
        deadline = self.assigner.next_deadline_ms()
        if deadline is None or (self._timer_due_ms is not None and self._timer_due_ms <= deadline):
            return
        self._timer_due_ms = deadline
        delay = max(1, deadline - now_ms)
        if self._timer is not None:
            self._timer.cancel()  # due later: the earlier one's round does what it would
        self._timer = self.context.call_async(_nothing, self._on_timer, initial_delay_ms=delay)

    def _on_timer(self, _result: None, _error: BaseException | None) -> None:
        self._timer_due_ms = None
        self._timer = None
        self._assign_now()


def _nothing() -> None:
    return None
