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
  nothing gets a share even beyond that;
- ``pull`` (``PullAssigner``): only a reader that asks for work (it ran dry) gets
  splits, its fair share of them, as Flink's FileSource assigns.

Unlike Flink's, sluicegate's readers come and go: a slot may have no live
reader for a long time. No assigner leaves a split waiting for such a slot
longer than ``grace_ms``: after it, the split goes to the live reader that owns
the fewest (the fair-share rule then also counts only the live readers). The
grace delay lets a restarting reader get its own splits back, as Kafka
Connect's scheduled rebalance delay does.

Load follows readers (cooperative rebalancing, protocol v3): once nothing is
pending, each assigner plans which owned splits move where (``rebalance``), by the
rule it assigns with: ``sticky`` and ``round_robin`` move a split to its own slot
when that slot has a live reader (their own slots are balanced by construction);
``fair_share`` moves splits from readers above a balanced count (``ceil``/``floor``
of what the live readers own) to those below it. The distributor asks the owners
for them (``request_split_release``); they come back through ``add_splits_back``
once the owner's checkpoint holds their positions, and go straight to the reader
the plan named (if it is still live; else the assigner decides as for any pending
split). So a split moves once per change of readers: a split asked for is not
asked for again, and a planned receiver counts the splits on their way to it.
A reader that is only briefly away (a restart within the grace delay) moves
nothing: its splits wait for it as pending splits do.

Pure: no I/O and no clock of its own; the caller passes ``now_ms``.
``SplitDistributor`` (distributor.py) connects an assigner to an enumerator's context.
"""

from __future__ import annotations

import heapq
import itertools
import math
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, overload

from sluicegate.api.enumerator import OwnedSplits, ReaderLoads
from sluicegate.api.errors import ConfigError
from sluicegate.api.split import SplitT

DEFAULT_GRACE_MS = 5_000
REBALANCE_BATCH = 1_000
"""At least this many splits may be asked back per round; the next round (their return) asks
for more."""
REBALANCE_SHARE = 10
"""... and up to one tenth of all owned splits: a round trip (request, the owner's checkpoint,
its ack) takes seconds, and at 1,000 a round, 16 readers of a million splits left the 7 that
joined last with nothing for minutes. A tenth bounds what one round stops reading."""


def rebalance_budget(owned_total: int) -> int:
    """How many splits one rebalance round may ask back, with ``owned_total`` owned."""
    return max(REBALANCE_BATCH, owned_total // REBALANCE_SHARE)


REBALANCE_SETTLE_MS = 1_000
"""A rebalance waits until the live readers have not changed for this long (at most the
grace delay): readers started together register within a second or so, and one plan
for all of them moves each split once instead of once per registration."""
ASSIGNER_OPTION = "assigner"
GRACE_OPTION = "assignment_grace_ms"
REBALANCE_OPTION = "assignment_rebalance"
ASSIGNMENT_OPTIONS = (ASSIGNER_OPTION, GRACE_OPTION, REBALANCE_OPTION)
"""They decide who reads a split, not what is read: a connector names them in its
``Source.LOCAL_OPTIONS`` (readers need not repeat them)."""
"""``true`` (default) or ``false``: whether splits move when readers join or leave."""


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


@dataclass(frozen=True)
class RebalanceRound(Generic[SplitT]):
    """What an assigner sees when it is asked which owned splits should move."""

    parallelism: int
    owned: Mapping[int, Sequence[SplitT]]
    """Each live subtask and the splits it owns and was not asked for yet, oldest first."""
    in_flight: Sequence[SplitT] = ()
    """Splits asked back from live subtasks and not returned yet (their receivers may be
    chosen again: they have not landed anywhere)."""
    max_moves: int = REBALANCE_BATCH


@dataclass
class RebalancePlan:
    moves: dict[int, dict[str, int]] = field(default_factory=dict)
    """From which live subtask which split goes to which live subtask (to ask for now)."""
    placed: dict[str, int] = field(default_factory=dict)
    """Which live subtask each split in flight goes to once returned."""

    @property
    def move_count(self) -> int:
        return sum(len(v) for v in self.moves.values())


class SplitAssigner(ABC, Generic[SplitT]):
    """Holds the pending splits and decides who reads them."""

    name: ClassVar[str]
    gives_only_to_requesters: ClassVar[bool] = False
    """Whether splits go only to a reader that asked (RequestSplit): the distributor then
    remembers who asked and got nothing, and serves them when splits arrive."""

    def __init__(self, grace_ms: int = DEFAULT_GRACE_MS) -> None:
        if grace_ms < 0:
            raise ConfigError(GRACE_OPTION, f"must be >= 0, got {grace_ms}")
        self.grace_ms = grace_ms
        self.rebalancing = True
        """Whether the distributor moves owned splits (option ``assignment_rebalance``)."""
        self._pending: dict[str, SplitT] = {}
        self._waiting_since: dict[str, int] = {}
        """Insertion-ordered by time (the step clock only moves on), so the first entry
        is the oldest: the next deadline without a scan of every waiting split."""
        self._not_waiting: list[str] = []
        """Ids added since the last round, which may not have a waiting time yet."""
        self.on_removed: Callable[[Sequence[SplitT]], None] | None = None
        """Called with the splits that leave the pending ones (assigned or removed), so an
        enumerator can keep its own account of them instead of rescanning every pending split."""

    # -- the pending splits --------------------------------------------------------

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        """New or returned splits; they wait here until assigned (a known id is replaced)."""
        ids = [split.split_id for split in splits]
        self._pending.update(zip(ids, splits, strict=True))
        self._not_waiting.extend(ids)
        self._on_added(ids)

    def remove(self, split_ids: Sequence[str]) -> list[SplitT]:
        """Take splits out (e.g. their partition was deleted); unknown ids are ignored."""
        removed = [self._pending.pop(sid) for sid in split_ids if sid in self._pending]
        for split in removed:
            self._waiting_since.pop(split.split_id, None)
        if removed and self.on_removed is not None:
            self.on_removed(removed)
        return removed

    @property
    def pending(self) -> list[SplitT]:
        """The splits not assigned yet, in the order they came."""
        return list(self._pending.values())

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, split_id: object) -> bool:
        """Whether the split with this id is pending."""
        return split_id in self._pending

    # -- deciding -------------------------------------------------------------------

    @abstractmethod
    def assign(self, round_: AssignmentRound) -> dict[int, list[SplitT]]:
        """Take the splits that go to live readers now out of the pending ones; the
        splits that stay start (or keep) waiting."""

    def rebalance(self, round_: RebalanceRound[SplitT]) -> RebalancePlan:
        """Which owned splits move from which live subtask to which. By default balanced
        counts: the live readers with the most keep ``ceil(total / live)``, the rest
        ``floor``; the oldest splits of a reader above its target go to the readers
        below theirs, the fewest-owned first."""
        load = {s: len(splits) for s, splits in round_.owned.items()}
        movable = {s: _SplitIds(splits) for s, splits in round_.owned.items()}
        return balance(load, movable, split_ids_of(round_.in_flight), round_.max_moves)

    def next_deadline_ms(self) -> int | None:
        """When the grace delay of a waiting split runs out (None: nothing waits)."""
        if not self._waiting_since:
            return None
        return next(iter(self._waiting_since.values())) + self.grace_ms

    def _overdue(self, split_id: str, now_ms: int) -> bool:
        since = self._waiting_since.get(split_id)
        return self.grace_ms == 0 or (since is not None and now_ms - since >= self.grace_ms)

    def _take(self, split_ids: Iterable[str]) -> list[SplitT]:
        """Take these pending splits out, in this order, to be assigned. One call for a
        reader's whole share: a re-registration hands thousands back at once."""
        forget_wait = self._waiting_since.pop
        take = self._pending.pop
        taken: list[SplitT] = []
        for split_id in split_ids:
            forget_wait(split_id, None)
            taken.append(take(split_id))
        if taken and self.on_removed is not None:
            self.on_removed(taken)
        return taken

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

    def _on_added(self, split_ids: list[str]) -> None:
        """These splits entered the pending set."""


class _OwnerAssigner(SplitAssigner[SplitT]):
    """Each split has an owner slot; it waits for that slot's reader up to the grace
    delay, then goes to the live reader that owns the fewest.

    A round costs what changed, not what is pending or live: the pending splits are kept
    by owner slot, so a reader that registers takes its own slot's splits (the live
    mapping's ``touched`` names it) and a new split whose owner is live goes there at
    once; only splits past their grace delay, the oldest first, are looked at one by one
    (they are the ones that go out)."""

    def __init__(self, grace_ms: int = DEFAULT_GRACE_MS) -> None:
        super().__init__(grace_ms)
        self._by_owner: dict[int, dict[str, None]] = {}
        """Owner slot -> its pending split ids, in the order they came."""
        self._owner_of: dict[str, int] = {}
        self._unplaced: list[str] = []
        """Ids added since the last round, not yet filed under their owner."""
        self._parallelism: int | None = None
        """The parallelism the owners were computed for."""

    def _on_added(self, split_ids: list[str]) -> None:
        self._unplaced.extend(split_ids)

    def assign(self, round_: AssignmentRound) -> dict[int, list[SplitT]]:
        live = round_.live
        out: dict[int, list[SplitT]] = {}
        touched: Iterable[int] = live.touched() if isinstance(live, ReaderLoads) else list(live)
        if round_.parallelism != self._parallelism:
            self._refile(round_.parallelism)  # every owner changed: every slot is looked at
            touched = list(live)
        going: dict[int, dict[str, None]] = {}  # (an id added twice is listed twice)
        for split_id in self._unplaced:
            if split_id in self._pending:
                owner = self._file(split_id, round_.parallelism)
                if owner in live:  # new, or back: its reader is there
                    going.setdefault(owner, {})[split_id] = None
        self._unplaced.clear()
        for owner, split_ids in going.items():
            out.setdefault(owner, []).extend(self._take(split_ids))
        for subtask in touched:
            if subtask in self._by_owner and subtask in live:
                out.setdefault(subtask, []).extend(self._take(list(self._by_owner[subtask])))
        if live and self._any_overdue(round_.now_ms):
            self._assign_overdue(round_, out)
        self._wait_rest(round_.now_ms)
        return out

    def _assign_overdue(self, round_: AssignmentRound, out: dict[int, list[SplitT]]) -> None:
        """The splits past their grace delay (oldest first), each to its owner if live, else
        to the live reader that owns the fewest, counting what this round gave."""
        live = round_.live
        overdue: list[str]
        if self.grace_ms == 0:
            overdue = list(self._pending)  # no delay: every pending split, just added ones too
        else:  # oldest first: the scan stops at the first split still in its grace delay
            deadline = round_.now_ms - self.grace_ms
            waited = itertools.takewhile(lambda w: w[1] <= deadline, self._waiting_since.items())
            overdue = [split_id for split_id, _ in waited]
        if not overdue:
            return
        heap = [(live[s] + len(out.get(s, ())), s) for s in live]
        heapq.heapify(heap)
        for split_id in overdue:
            owner = self._owner_of[split_id]
            if owner in live:
                out.setdefault(owner, []).extend(self._take((split_id,)))
                continue
            load, subtask = heapq.heappop(heap)
            out.setdefault(subtask, []).extend(self._take((split_id,)))
            heapq.heappush(heap, (load + 1, subtask))

    def _file(self, split_id: str, parallelism: int) -> int:
        """File a pending split under its owner slot; returns the owner."""
        owner = self.owner(self._pending[split_id], parallelism)
        old = self._owner_of.get(split_id)
        if old is not None and old != owner:
            self._by_owner[old].pop(split_id, None)
        self._owner_of[split_id] = owner
        self._by_owner.setdefault(owner, {})[split_id] = None
        return owner

    def _refile(self, parallelism: int) -> None:
        self._parallelism = parallelism
        self._by_owner.clear()
        self._owner_of.clear()
        for split_id in self._pending:
            self._file(split_id, parallelism)

    def _take(self, split_ids: Iterable[str]) -> list[SplitT]:
        split_ids = list(split_ids)
        for split_id in split_ids:
            owner = self._owner_of.pop(split_id, None)
            if owner is not None:
                bucket = self._by_owner[owner]
                del bucket[split_id]
                if not bucket:
                    del self._by_owner[owner]
        return super()._take(split_ids)

    def remove(self, split_ids: Sequence[str]) -> list[SplitT]:
        removed = super().remove(split_ids)
        for split in removed:
            owner = self._owner_of.pop(split.split_id, None)
            if owner is not None:
                bucket = self._by_owner[owner]
                bucket.pop(split.split_id, None)
                if not bucket:
                    del self._by_owner[owner]
        return removed

    @abstractmethod
    def owner(self, split: SplitT, parallelism: int) -> int: ...

    def rebalance(self, round_: RebalanceRound[SplitT]) -> RebalancePlan:
        """A split moves to its own slot once that slot has a live reader (where ``assign``
        would give it too). The *guests*, splits whose slot has no live reader (``assign``
        gave them to the fewest-owned after the grace delay), are then spread to balanced
        counts, as fair share does."""
        live = set(round_.owned)
        plan = RebalancePlan()
        load = dict.fromkeys(live, 0)
        guests: dict[int, list[str]] = {s: [] for s in live}
        budget = round_.max_moves
        for subtask in sorted(live):
            for split in round_.owned[subtask]:
                home = self._known_owner(split, round_.parallelism)
                if home is not None and home != subtask and home in live and budget > 0:
                    plan.moves.setdefault(subtask, {})[split.split_id] = home
                    load[home] += 1
                    budget -= 1
                    continue
                load[subtask] += 1
                if home is None or home not in live:
                    guests[subtask].append(split.split_id)
        flexible: list[str] = []
        for split in round_.in_flight:
            home = self._known_owner(split, round_.parallelism)
            if home is not None and home in live:
                plan.placed[split.split_id] = home
                load[home] += 1
            else:
                flexible.append(split.split_id)
        rest = balance(load, guests, flexible, budget)
        for subtask, moves in rest.moves.items():
            plan.moves.setdefault(subtask, {}).update(moves)
        plan.placed.update(rest.placed)
        return plan

    def _known_owner(self, split: SplitT, parallelism: int) -> int | None:
        return self.owner(split, parallelism)


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

    def _on_added(self, split_ids: list[str]) -> None:
        turns = self._turns
        for split_id in split_ids:
            turns.setdefault(split_id, len(turns))
        super()._on_added(split_ids)

    def owner(self, split: SplitT, parallelism: int) -> int:
        return self._turns[split.split_id] % parallelism

    def _known_owner(self, split: SplitT, parallelism: int) -> int | None:
        # A split assigned before a coordinator restart has no turn here (the state holds
        # the pending ones only): it stays where it is.
        turn = self._turns.get(split.split_id)
        return None if turn is None else turn % parallelism


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
            out[subtask] = self._take(ids)
        self._wait_rest(round_.now_ms)
        return out


class PullAssigner(SplitAssigner[SplitT]):
    """Splits go only to a reader that asks for work (RequestSplit: it ran dry), as
    Flink's FileSource assigns: nothing is pushed on registration, and a discovery serves
    only the readers that asked and got nothing (the distributor keeps them). The
    requester gets its fair share of what is pending and owned, ``ceil((pending +
    outstanding) / live)`` minus what it owns, at least one. Nothing is rebalanced:
    its splits are short-lived and a dry reader asks for more."""

    name = "pull"
    gives_only_to_requesters = True

    def assign(self, round_: AssignmentRound) -> dict[int, list[SplitT]]:
        requester = round_.requester
        if requester is None or requester not in round_.live or not self._pending:
            self._wait_rest(round_.now_ms)
            return {}
        share = math.ceil((len(self._pending) + round_.outstanding) / max(1, len(round_.live)))
        room = max(1, share - round_.live[requester])
        ids = list(itertools.islice(self._pending, room))
        out = {requester: self._take(ids)}
        self._wait_rest(round_.now_ms)
        return out

    def next_deadline_ms(self) -> int | None:
        return None  # no grace delay: a split waits for a request, not for a slot

    def rebalance(self, round_: RebalanceRound[SplitT]) -> RebalancePlan:
        return RebalancePlan()


def split_ids_of(splits: Sequence[Any]) -> list[str]:
    """The splits' ids; a view of owned splits gives them without decoding a split."""
    return splits.split_ids() if isinstance(splits, OwnedSplits) else [split.split_id for split in splits]


class _SplitIds(Sequence[str]):
    """The ids of ``splits``, read as far as they are read: ``balance`` takes the oldest few
    of each reader above its target, and a reader may own a million."""

    def __init__(self, splits: Sequence[Any]) -> None:
        self._splits = splits

    def __len__(self) -> int:
        return len(self._splits)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [split.split_id for split in self._splits[index]]
        return str(self._splits[index].split_id)


def balance(
    load: Mapping[int, int], movable: Mapping[int, Sequence[str]], flexible: Sequence[str], max_moves: int
) -> RebalancePlan:
    """Balanced counts over the live readers (the keys of ``load``, what each will hold
    without the ``flexible`` splits, which are in flight and go wherever they are needed).
    The live readers with the most get ``ceil(total / live)`` as their target, the rest
    ``floor``, so a balanced spread plans nothing; the flexible splits fill the readers
    below their target first, then the oldest ``movable`` splits of the readers above
    theirs move, each to the reader with the most room."""
    if not load:
        return RebalancePlan()
    total = sum(load.values()) + len(flexible)
    floor, extra = divmod(total, len(load))
    ranked = sorted(load, key=lambda s: (-load[s], s))
    target = {s: floor + (1 if rank < extra else 0) for rank, s in enumerate(ranked)}
    room = {s: target[s] - load[s] for s in load if load[s] < target[s]}
    plan = RebalancePlan()
    # The reader with the most room next (then the fewest owned, then the lowest subtask):
    # a heap, so that placing m splits costs O(m log readers), not O(m * readers).
    neediest = [(-r, load[s], s) for s, r in room.items()]
    heapq.heapify(neediest)

    def take_room() -> int:
        minus_room, owned, receiver = heapq.heappop(neediest)
        if minus_room < -1:
            heapq.heappush(neediest, (minus_room + 1, owned, receiver))
        room[receiver] -= 1
        return receiver

    for split_id in flexible:
        plan.placed[split_id] = take_room()
    budget = min(max_moves, sum(room.values()))
    for subtask in ranked:
        excess = min(load[subtask] - target[subtask], len(movable.get(subtask, ())), budget)
        for split_id in movable.get(subtask, ())[: max(0, excess)]:
            plan.moves.setdefault(subtask, {})[split_id] = take_room()
            budget -= 1
    return plan


ASSIGNERS: dict[str, Callable[[int], SplitAssigner[Any]]] = {
    StickyHashAssigner.name: StickyHashAssigner,
    RoundRobinAssigner.name: RoundRobinAssigner,
    FairShareAssigner.name: FairShareAssigner,
    PullAssigner.name: PullAssigner,
}


def assigner_from_options(
    options: Mapping[str, str], default: str, owner_key: Callable[[Any], int] | None = None
) -> Callable[[], SplitAssigner[Any]]:
    """A factory for the assigner named by the ``assigner`` option (``grace`` from
    ``assignment_grace_ms``, rebalancing from ``assignment_rebalance``). Bad values raise
    ConfigError naming the option."""
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
    rebalance = options.get(REBALANCE_OPTION, "true").strip().lower()
    if rebalance not in ("true", "false"):
        raise ConfigError(REBALANCE_OPTION, f"must be true or false, got {rebalance!r}")
    if name == StickyHashAssigner.name and owner_key is not None:
        key = owner_key
        return lambda: _rebalancing(StickyHashAssigner(grace_ms, key), rebalance == "true")
    make = ASSIGNERS[name]
    return lambda: _rebalancing(make(grace_ms), rebalance == "true")


def _rebalancing(assigner: SplitAssigner[Any], on: bool) -> SplitAssigner[Any]:
    assigner.rebalancing = on
    return assigner
