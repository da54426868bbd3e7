"""The enumerator side of a connector and the context the coordinator gives it."""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from sluicegate.api.split import SplitT

R = TypeVar("R")


@dataclass(frozen=True)
class ReaderInfo(Generic[SplitT]):
    """A live reader attempt as the enumerator sees it."""

    subtask: int
    attempt: int
    location: str
    reported_splits: tuple[SplitT, ...] = ()
    owned_split_count: int = 0
    """Splits the coordinator currently attributes to this subtask (not finished)."""


class ReaderLoads(Mapping[int, int]):
    """Each live subtask and the number of splits it owns, also walkable fewest-owned
    first. This one holds a copy; the coordinator's keeps the order up to date as
    ownership changes, so an assignment round at 10,000 readers does not sort them."""

    def __init__(self, loads: Mapping[int, int]) -> None:
        self._loads = dict(loads)

    def __getitem__(self, subtask: int) -> int:
        return self._loads[subtask]

    def __iter__(self) -> Iterator[int]:
        return iter(self._loads)

    def __len__(self) -> int:
        return len(self._loads)

    def fewest_first(self) -> Iterator[int]:
        """The subtasks in (owned, subtask) order."""
        return iter(sorted(self._loads, key=lambda s: (self._loads[s], s)))

    def touched(self) -> Iterable[int]:
        """The subtasks whose liveness or load may have changed since the last round: an
        assigner that only needs to look at those costs what changed, not what is live.
        This one knows no history: every subtask it holds."""
        return list(self._loads)


@dataclass
class SplitsAssignment(Generic[SplitT]):
    assignment: dict[int, list[SplitT]] = field(default_factory=dict)


class EnumeratorMetrics(ABC):
    """Connector metrics; the coordinator host exports them."""

    @abstractmethod
    def counter(self, name: str, amount: float = 1.0) -> None: ...

    @abstractmethod
    def gauge(self, name: str, value: float) -> None: ...


class AsyncCallHandle:
    """What ``call_async`` returns: a periodic call runs until it is cancelled or the
    enumerator closes; a one-shot call may be cancelled before its handler runs."""

    def __init__(self, on_cancel: Callable[[], None] | None = None) -> None:
        self._on_cancel = on_cancel
        self._cancelled = False

    def cancel(self) -> None:
        """No further runs, and a result still on its way is dropped (the handler is not
        called again). Calling it twice is harmless."""
        if not self._cancelled:
            self._cancelled = True
            if self._on_cancel is not None:
                self._on_cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled


class OwnedSplits(Sequence[SplitT]):
    """The splits one subtask owns, oldest assignment first, decoded only when read.

    A rebalance looks at every reader's count and moves a few splits: with a million
    splits owned, decoding all of them on every change of readers cost seconds a step.
    ``len`` is O(1) and a slice from the front decodes only what it holds. A view of the
    coordinator's own record of ownership: read it within the step that got it.
    """

    def __init__(
        self, by_id: Mapping[str, Any], decode: Callable[[Any], SplitT], excluded: frozenset[str] = frozenset()
    ) -> None:
        self._by_id = by_id
        self._decode = decode
        self._excluded = excluded & by_id.keys()

    @classmethod
    def of(cls, splits: Iterable[SplitT]) -> OwnedSplits[SplitT]:
        """A view of splits already decoded (a context that keeps them so)."""
        return cls({s.split_id: s for s in splits}, lambda split: split)

    def without(self, split_ids: Iterable[str]) -> OwnedSplits[SplitT]:
        """This view less ``split_ids``."""
        return OwnedSplits(self._by_id, self._decode, self._excluded | frozenset(split_ids))

    def only(self, split_ids: Iterable[str]) -> OwnedSplits[SplitT]:
        """A view of those of ``split_ids`` in this one, decoded only when read."""
        by_id = self._by_id
        return OwnedSplits({i: by_id[i] for i in split_ids if i in by_id and i not in self._excluded}, self._decode)

    @classmethod
    def joined(cls, views: Sequence[OwnedSplits[SplitT]]) -> OwnedSplits[SplitT]:
        """One view of several (of one coordinator: one decoding), in their order."""
        if not views:
            return cls({}, lambda split: split)
        by_id: dict[str, Any] = {}
        for view in views:
            by_id.update((k, view._by_id[k]) for k in view.split_ids())
        return cls(by_id, views[0]._decode)

    def split_ids(self) -> list[str]:
        """The ids in this view, oldest first, none decoded."""
        return [k for k in self._by_id if k not in self._excluded] if self._excluded else list(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id) - len(self._excluded)

    def _kept(self) -> Iterator[Any]:
        if not self._excluded:
            return iter(self._by_id.values())
        return (v for k, v in self._by_id.items() if k not in self._excluded)

    def __iter__(self) -> Iterator[SplitT]:
        return map(self._decode, self._kept())

    @overload
    def __getitem__(self, index: int) -> SplitT: ...

    @overload
    def __getitem__(self, index: slice) -> list[SplitT]: ...

    def __getitem__(self, index: int | slice) -> SplitT | list[SplitT]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            return [self._decode(v) for v in itertools.islice(self._kept(), start, stop, step)]
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(index)
        return self._decode(next(itertools.islice(self._kept(), position, None)))


class SplitEnumeratorContext(ABC, Generic[SplitT]):
    """What an enumerator may do. Every call runs on the coordinator's single loop: a
    method called from another thread (a ``call_async`` callable, a thread of the
    connector's own) raises ``RuntimeError`` instead of racing the loop. The callable
    returns its result; the handler, which runs on the loop, acts on it."""

    @abstractmethod
    def current_parallelism(self) -> int:
        """The number of reader subtasks of the source (its max_parallelism)."""

    @abstractmethod
    def registered_readers(self) -> Mapping[int, ReaderInfo[SplitT]]: ...

    def reader_loads(self) -> ReaderLoads:
        """The live subtasks and how many splits each owns (what assigners need of
        ``registered_readers``, without building a ReaderInfo per reader)."""
        return ReaderLoads({s: info.owned_split_count for s, info in self.registered_readers().items()})

    def current_time_ms(self) -> int:
        """The coordinator's time for this step (wall clock ms). Enumerators use it
        instead of reading a clock, so that a replayed step decides the same."""
        return int(time.time() * 1000)

    @abstractmethod
    def outstanding_split_count(self) -> int:
        """Splits currently owned by any subtask, live or awaiting its next attempt
        (assigned, neither finished nor returned). Bounded enumerators use it to
        decide when NoMoreSplits is final."""

    @abstractmethod
    def assign_splits(self, assignment: SplitsAssignment[SplitT] | Mapping[int, Sequence[SplitT]]) -> None:
        """Assign splits. Raises NoLiveReaderError, assigning nothing, if any
        named subtask has no live attempt."""

    def assign_split(self, split: SplitT, subtask: int) -> None:
        self.assign_splits({subtask: [split]})

    @abstractmethod
    def signal_no_more_splits(self, subtask: int) -> None: ...

    def request_split_release(self, subtask: int, split_ids: Sequence[str]) -> None:
        """Cooperative rebalancing (protocol v3): ask the live reader of ``subtask`` to give
        these splits back. It keeps reading the others; it stops these at its next
        checkpoint and returns them with their positions, and only then do they come back
        through ``add_splits_back`` (they stay owned by ``subtask`` until then, so they
        cannot be assigned elsewhere). Splits it does not own, or was asked for already,
        are skipped. If its attempt fails first, the request is dropped and the failure
        rules apply. Raises NoLiveReaderError if the subtask has no live attempt."""
        raise NotImplementedError("this coordinator does not support cooperative rebalancing")

    def owned_splits(self, subtask: int) -> list[SplitT]:
        """The splits the coordinator attributes to ``subtask`` (at their last known
        positions), oldest assignment first; releasing ones included."""
        raise NotImplementedError("this coordinator does not report owned splits")

    def owned_split_view(self, subtask: int) -> OwnedSplits[SplitT]:
        """``owned_splits`` as a view that decodes only what is read (the coordinator's
        does): what a rebalance of a million splits reads."""
        return OwnedSplits.of(self.owned_splits(subtask))

    def releasing_split_ids(self, subtask: int) -> frozenset[str]:
        """Splits of ``subtask`` asked back by ``request_split_release`` and not returned yet."""
        return frozenset()

    @abstractmethod
    def send_event_to_source_reader(self, subtask: int, event: Any, attempt: int | None = None) -> None:
        """Send a connector event. Dropped and counted if the subtask has no live attempt."""

    @abstractmethod
    def call_async(
        self,
        callable_: Callable[[], R],
        handler: Callable[[R | None, BaseException | None], None],
        initial_delay_ms: int = 0,
        period_ms: int = 0,
    ) -> AsyncCallHandle:
        """Run ``callable_`` off the coordinator loop (a worker thread) and then
        ``handler(result, error)`` on it. With ``period_ms`` > 0 it repeats until the
        returned handle is cancelled or the enumerator closes. ``callable_`` must not
        touch the context (see the class docstring)."""

    @property
    @abstractmethod
    def metrics(self) -> EnumeratorMetrics: ...


class SplitEnumerator(ABC, Generic[SplitT]):
    """Discovers splits and decides which reader gets which (FLIP-27).

    Failure contract: each call of a method (and of a ``call_async`` handler) is one
    step of the coordinator, and a step is all or nothing. If a method raises, nothing
    the step did is kept (no split it assigned, no message, no state), the coordinator
    of this source is restarted from its last commit, after 1, 2, 4 ... 60 s while it
    keeps failing, and the input is offered again; other sources are not disturbed.
    So a method may raise at any point without losing splits, but one that raises on
    every try stops its source until it is fixed."""

    def start(self) -> None:
        """Called once before any other method."""

    @abstractmethod
    def handle_split_request(self, subtask: int, hostname: str | None) -> None: ...

    @abstractmethod
    def add_splits_back(self, splits: list[SplitT], subtask: int) -> None:
        """Splits return from a subtask (failure, departure, recovery, leaving, or given
        back after ``request_split_release``)."""

    @abstractmethod
    def add_reader(self, subtask: int) -> None: ...

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> Any:
        """JSON-compatible state from which ``Source.restore_enumerator`` rebuilds it."""

    def handle_source_event(self, subtask: int, event: Any) -> None:
        """A connector event from a reader."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The coordinator state up to ``checkpoint_id`` is durable."""

    def close(self) -> None:
        """Release resources."""
