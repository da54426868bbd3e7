"""Split assignment as a strategy: which live reader gets which pending split.

An enumerator discovers splits and hands them to a ``SplitAssigner``; the
assigner decides, on each event (a reader registered, splits came back, a reader
asked for work, a grace delay ran out), which pending splits go to which live
subtask. Connectors share the strategies instead of writing their own rules:

- ``sticky`` (``StickyHashAssigner``): a split always belongs to the same subtask
  while the parallelism holds, the rule of Flink's KafkaSourceEnumerator; the
  owner comes from a stable hash of the split (a connector may give its own
  ``owner_key``, e.g. Kafka spreads the partitions of a topic over consecutive
  subtasks);
- ``round_robin`` (``RoundRobinAssigner``): splits take the subtasks in turn, in
  the order they are discovered;
- ``fair_share`` (``FairShareAssigner``): fewest-owned first, up to
  ``ceil(outstanding / parallelism)`` each; a reader that asks while it owns
  nothing gets a share even beyond that.

Unlike Flink's, sluicegate's readers come and go: a slot may have no live
reader for a long time. No assigner leaves a split waiting for such a slot
longer than ``grace_ms``: after it, the split goes to the live reader that owns
the fewest (the fair-share rule then also counts only the live readers). The
grace delay lets a restarting reader get its own splits back, as Kafka
Connect's scheduled rebalance delay does.

Pure: no I/O and no clock of its own; the caller passes ``now_ms``.
``SplitDistributor`` connects an assigner to an enumerator's context.
"""

from __future__ import annotations

import itertools
import math
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic

from sluicegate.api.enumerator import ReaderLoads, SplitEnumeratorContext
from sluicegate.api.errors import ConfigError
from sluicegate.api.split import SplitT

DEFAULT_GRACE_MS = 5_000
ASSIGNER_OPTION = "assigner"
GRACE_OPTION = "assignment_grace_ms"


@dataclass(frozen=True)
class AssignmentRound:
    """What an assigner sees when it is asked to hand out pending splits."""

    parallelism: int
    live: Mapping[int, int]
    """Each live subtask and the number of splits it owns now."""
    outstanding: int
    """Splits owned by any subtask (live or awaiting its next attempt)."""
    now_ms: int
    requester: int | None = None
    """A subtask that asked for work (RequestSplit), if that is what triggered the round."""


class SplitAssigner(ABC, Generic[SplitT]):
    """Holds the pending splits and decides who reads them."""

    name: ClassVar[str]

    def __init__(self, grace_ms: int = DEFAULT_GRACE_MS) -> None:
        if grace_ms < 0:
            raise ConfigError(GRACE_OPTION, f"must be >= 0, got {grace_ms}")
        self.grace_ms = grace_ms
        self._pending: dict[str, SplitT] = {}
        self._waiting_since: dict[str, int] = {}
        """Insertion-ordered by time (the step clock only moves on), so the first entry
        is the oldest: the next deadline without a scan of every waiting split."""
        self._not_waiting: list[str] = []
        """Ids added since the last round, which may not have a waiting time yet."""
        self.on_removed: Callable[[SplitT], None] | None = None
        """Called with each split that leaves the pending ones (assigned or removed), so an
        enumerator can keep its own account of them instead of rescanning every pending split."""

    # -- the pending splits --------------------------------------------------------

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        """New or returned splits; they wait here until assigned (a known id is replaced)."""
        for split in splits:
            self._pending[split.split_id] = split
            self._not_waiting.append(split.split_id)
            self._on_added(split)

    def remove(self, split_ids: Sequence[str]) -> list[SplitT]:
        """Take splits out (e.g. their partition was deleted); unknown ids are ignored."""
        removed = [self._pending.pop(sid) for sid in split_ids if sid in self._pending]
        for split in removed:
            self._waiting_since.pop(split.split_id, None)
            if self.on_removed is not None:
                self.on_removed(split)
        return removed

    @property
    def pending(self) -> list[SplitT]:
        """The splits not assigned yet, in the order they came."""
        return list(self._pending.values())

    def __len__(self) -> int:
        return len(self._pending)

    # -- deciding -------------------------------------------------------------------

    @abstractmethod
    def assign(self, round_: AssignmentRound) -> dict[int, list[SplitT]]:
        """Take the splits that go to live readers now out of the pending ones; the
        splits that stay start (or keep) waiting."""

    def next_deadline_ms(self) -> int | None:
        """When the grace delay of a waiting split runs out (None: nothing waits)."""
        if not self._waiting_since:
            return None
        return next(iter(self._waiting_since.values())) + self.grace_ms

    def _overdue(self, split_id: str, now_ms: int) -> bool:
        since = self._waiting_since.get(split_id)
        return self.grace_ms == 0 or (since is not None and now_ms - since >= self.grace_ms)

    def _take(self, split_id: str) -> SplitT:
        self._waiting_since.pop(split_id, None)
        split = self._pending.pop(split_id)
        if self.on_removed is not None:
            self.on_removed(split)
        return split

    def _wait_rest(self, now_ms: int) -> None:
        # Only the splits added since the last round can lack a waiting time: a round
        # then costs what it assigns, not what is pending.
        for split_id in self._not_waiting:
            if split_id in self._pending:
                self._waiting_since.setdefault(split_id, now_ms)
        self._not_waiting.clear()

    def _any_overdue(self, now_ms: int) -> bool:
        deadline = self.next_deadline_ms()
        return bool(self._pending) and (self.grace_ms == 0 or (deadline is not None and now_ms >= deadline))

    def _on_added(self, split: SplitT) -> None:
        """A split entered the pending set."""


class _OwnerAssigner(SplitAssigner[SplitT]):
    """Each split has an owner slot; it waits for that slot's reader up to the grace
    delay, then goes to the live reader that owns the fewest."""

    def assign(self, round_: AssignmentRound) -> dict[int, list[SplitT]]:
        owned = dict(round_.live)
        out: dict[int, list[SplitT]] = {}
        for split_id, split in list(self._pending.items()):
            subtask: int | None = self.owner(split, round_.parallelism)
            if subtask not in owned:
                overdue = owned and self._overdue(split_id, round_.now_ms)
                subtask = min(owned, key=lambda s: (owned[s], s)) if overdue else None
            if subtask is None:
                continue
            out.setdefault(subtask, []).append(self._take(split_id))
            owned[subtask] += 1
        self._wait_rest(round_.now_ms)
        return out

    @abstractmethod
    def owner(self, split: SplitT, parallelism: int) -> int: ...


class StickyHashAssigner(_OwnerAssigner[SplitT]):
    """Owner = ``owner_key(split) % parallelism``; by default a CRC-32 of the split id."""

    name = "sticky"

    def __init__(self, grace_ms: int = DEFAULT_GRACE_MS, owner_key: Callable[[SplitT], int] | None = None) -> None:
        super().__init__(grace_ms)
        self._owner_key = owner_key or _crc32_of_id

    def owner(self, split: SplitT, parallelism: int) -> int:
        return self._owner_key(split) % parallelism


def _crc32_of_id(split: Any) -> int:
    return zlib.crc32(str(split.split_id).encode())


class RoundRobinAssigner(_OwnerAssigner[SplitT]):
    """The n-th split ever seen belongs to subtask ``n % parallelism``."""

    name = "round_robin"

    def __init__(self, grace_ms: int = DEFAULT_GRACE_MS) -> None:
        super().__init__(grace_ms)
        self._turns: dict[str, int] = {}

    def _on_added(self, split: SplitT) -> None:
        self._turns.setdefault(split.split_id, len(self._turns))

    def owner(self, split: SplitT, parallelism: int) -> int:
        return self._turns[split.split_id] % parallelism


class FairShareAssigner(SplitAssigner[SplitT]):
    """Fewest-owned first, each up to ``ceil(outstanding / parallelism)`` splits, in
    the order the splits came; a reader that asks while it owns nothing gets a
    share even beyond that.

    Dividing by the parallelism keeps the first reader to register from taking
    everything. Once a split has waited past the grace delay the share divides by
    the live readers only, so fewer readers than slots still read every split."""

    name = "fair_share"

    def assign(self, round_: AssignmentRound) -> dict[int, list[SplitT]]:
        live = round_.live
        if not self._pending or not live:
            self._wait_rest(round_.now_ms)
            return {}
        overdue = self._any_overdue(round_.now_ms)
        divisor = len(live) if overdue else round_.parallelism
        share = max(1, math.ceil((len(self._pending) + round_.outstanding) / divisor))
        out: dict[int, list[SplitT]] = {}
        order = live.fewest_first() if isinstance(live, ReaderLoads) else iter(sorted(live, key=lambda s: (live[s], s)))
        for subtask in order:
            room = share - live[subtask]
            if subtask == round_.requester and live[subtask] == 0:
                room = max(room, share)
            if room <= 0 or not self._pending:
                break  # fewest-owned first: every later subtask has no room either
            ids = list(itertools.islice(self._pending, room))
            out[subtask] = [self._take(sid) for sid in ids]
        self._wait_rest(round_.now_ms)
        return out


ASSIGNERS: dict[str, Callable[[int], SplitAssigner[Any]]] = {
    StickyHashAssigner.name: StickyHashAssigner,
    RoundRobinAssigner.name: RoundRobinAssigner,
    FairShareAssigner.name: FairShareAssigner,
}


def assigner_from_options(
    options: Mapping[str, str], default: str, owner_key: Callable[[Any], int] | None = None
) -> Callable[[], SplitAssigner[Any]]:
    """A factory for the assigner named by the ``assigner`` option (``grace`` from
    ``assignment_grace_ms``). Bad values raise ConfigError naming the option."""
    name = options.get(ASSIGNER_OPTION, default).strip().lower()
    if name not in ASSIGNERS:
        raise ConfigError(ASSIGNER_OPTION, f"unknown assigner {name!r} (known: {', '.join(sorted(ASSIGNERS))})")
    raw = options.get(GRACE_OPTION, str(DEFAULT_GRACE_MS))
    try:
        grace_ms = int(raw)
    except ValueError:
        raise ConfigError(GRACE_OPTION, f"must be an integer number of ms, got {raw!r}") from None
    if grace_ms < 0:
        raise ConfigError(GRACE_OPTION, f"must be >= 0, got {grace_ms}")
    if name == StickyHashAssigner.name and owner_key is not None:
        key = owner_key
        return lambda: StickyHashAssigner(grace_ms, key)
    make = ASSIGNERS[name]
    return lambda: make(grace_ms)


class SplitDistributor(Generic[SplitT]):
    """Runs an assigner for an enumerator: builds the round from the context, assigns,
    and arms a one-shot ``call_async`` timer when a split waits for a grace delay, so
    the delay ends even when no other event comes. The enumerator calls ``distribute``
    on add_reader, add_splits_back and RequestSplit (no timer is armed while no reader
    is live: the next registration is the event that ends the wait).

    It also ends a bounded source: once ``all_discovered()`` and no split is pending or
    owned by anyone, every live reader is told NoMoreSplits."""

    def __init__(
        self,
        context: SplitEnumeratorContext[SplitT],
        assigner: SplitAssigner[SplitT],
        clock: Callable[[], int] | None = None,
        all_discovered: Callable[[], bool] = lambda: False,
    ) -> None:
        self.context = context
        self.assigner = assigner
        self._clock = clock or context.current_time_ms
        """The coordinator's step time by default, so a replayed step decides the same."""
        self._all_discovered = all_discovered
        """Whether the enumerator will never find another split (bounded and fully discovered)."""
        self._timer_due_ms: int | None = None

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        self.assigner.add_splits(splits)

    def distribute(self, requester: int | None = None) -> int:
        """Assign what can be assigned now, or signal the bounded end; returns how many
        splits went out."""
        readers = self.context.reader_loads()
        if not readers:
            return 0
        if not len(self.assigner):
            if self._all_discovered() and self.context.outstanding_split_count() == 0:
                for subtask in list(readers):
                    self.context.signal_no_more_splits(subtask)
            return 0
        return self._assign_now(requester)

    def _assign_now(self, requester: int | None = None) -> int:
        round_ = AssignmentRound(
            parallelism=self.context.current_parallelism(),
            live=self.context.reader_loads(),
            outstanding=self.context.outstanding_split_count(),
            now_ms=self._clock(),
            requester=requester,
        )
        assignment = self.assigner.assign(round_)
        if assignment:
            self.context.assign_splits(assignment)
        if round_.live:
            # With no live reader nothing can go out before one registers, and add_reader
            # distributes; a timer now would find its deadline past and re-arm every 1 ms.
            self._arm_timer(round_.now_ms)
        return sum(len(v) for v in assignment.values())

    def _arm_timer(self, now_ms: int) -> None:
        deadline = self.assigner.next_deadline_ms()
        if deadline is None or (self._timer_due_ms is not None and self._timer_due_ms <= deadline):
            return
        self._timer_due_ms = deadline
        delay = max(1, deadline - now_ms)
        self.context.call_async(_nothing, self._on_timer, initial_delay_ms=delay)

    def _on_timer(self, _result: None, _error: BaseException | None) -> None:
        self._timer_due_ms = None
        self._assign_now()


def _nothing() -> None:
    return None
