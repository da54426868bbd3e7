"""The coordinator of one source as a deterministic state machine, free of I/O.

The host feeds it events (decoded inbox records, clock ticks, results of
``call_async``) and carries out what each call returns: records to send to
readers and callables to run off the loop. Everything the coordinator knows is
here: attempts and fencing (``SubtaskSlot``), split ownership
(``SplitAssignmentTracker``), ``seq`` counters, the epoch, the low watermark,
and the connector's enumerator, which it calls synchronously.

docs/protocol.md ("Semantics the coordinator guarantees") is the contract; the
numbers in comments below refer to its items.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sortedcontainers import SortedList

from sluicegate.api.enumerator import (
    AsyncCallHandle,
    EnumeratorMetrics,
    OwnedSplits,
    ReaderInfo,
    ReaderLoads,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitsAssignment,
)
from sluicegate.api.errors import NoLiveReaderError
from sluicegate.api.source import Source, SupportsSplitReassignmentOnRecovery
from sluicegate.api.split import SplitT, WireSplit
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.slots import SlotState, SubtaskSlot, slot_for_request
from sluicegate.coordinator.tracker import SplitAssignmentTracker
from sluicegate.coordinator.watermarks import WatermarkAggregator
from sluicegate.protocol.definition import SourceDefinition, mismatch_message
from sluicegate.protocol.messages import (
    SOURCE_WIDE,
    AddSplits,
    Body,
    CheckpointAck,
    CoordinatorSourceEvent,
    Envelope,
    Heartbeat,
    MaxParallelismRaised,
    NoMoreSplits,
    ReaderLeaving,
    ReaderRegistered,
    ReaderRegistration,
    ReaderSourceEvent,
    RegistrationRefused,
    ReleaseReason,
    ReleaseRequest,
    RequestSplit,
    SlotGranted,
    SlotRequest,
    SourceRedefined,
    SplitsFinished,
    SplitsReleased,
    WatermarkAnnouncement,
)
from sluicegate.protocol.pieces import body_in_pieces, in_pieces, may_be_a_piece

log = logging.getLogger("sluicegate.coordinator")

_Item = TypeVar("_Item")
_SPLITS_SHOWN = 5
"""How many split ids a warning about odd splits names."""


@dataclass(frozen=True)
class AsyncCall:
    """Run ``fn`` off the loop after ``initial_delay_ms`` (then every ``period_ms`` if > 0)
    and report its outcome with ``CoordinatorCore.on_async_result(call_id, ...)``."""

    call_id: int
    fn: Callable[[], Any]
    initial_delay_ms: int
    period_ms: int


@dataclass(frozen=True)
class ReaderFence:
    """Fence the transactional id of ``subtask``'s readers, then read the inbox up to its
    stable end, then report with ``CoordinatorCore.reader_fenced(subtask, attempt, ...)``.
    Asked for an attempt silent past the session timeout, before its splits go to anyone:
    a checkpoint it committed before the fence is then applied, and it can commit none
    after it (docs/protocol.md, "A reader paused past its session timeout")."""

    subtask: int
    attempt: int


@dataclass
class Effects:
    """What one step asks the host to do, in order."""

    messages: list[Envelope] = field(default_factory=list)
    async_calls: list[AsyncCall] = field(default_factory=list)
    cancelled_calls: list[int] = field(default_factory=list)
    """Ids of earlier AsyncCalls to stop (their handles were cancelled)."""
    fences: list[ReaderFence] = field(default_factory=list)
    rejection: str | None = None
    """Set when the input record is semantically invalid: the host dead-letters it."""

    def __bool__(self) -> bool:
        return bool(self.messages or self.async_calls or self.cancelled_calls or self.fences or self.rejection)

    def extend(self, other: Effects) -> None:
        """``other``'s effects after these (a rejection is one record's: it is not merged)."""
        self.messages += other.messages
        self.async_calls += other.async_calls
        self.cancelled_calls += other.cancelled_calls
        self.fences += other.fences


class StepFailedError(RuntimeError):
    """A step raised (in the enumerator, as a rule) part-way through. What it changed in
    the core and the enumerator cannot be undone in memory, so this core is done: its
    host discards the step's effects and everything not yet committed, and restarts the
    source from its last commit, which offers the same input again."""

    def __init__(self, source: str, during: str, cause: BaseException) -> None:
        self.source = source
        self.during = during
        self.detail = f"{type(cause).__name__}: {cause} {_where(cause)}while handling {during}"
        super().__init__(f"source {source}: {self.detail}")


def _where(exc: BaseException) -> str:
    """``at enumerator.py:42 in add_reader `` — the innermost frame, for the operator."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    return f"at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name} "


class CoreMetrics(EnumeratorMetrics):
    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.gauges: dict[str, float] = {}

    def counter(self, name: str, amount: float = 1.0) -> None:
        self.counters[name] += int(amount)

    def gauge(self, name: str, value: float) -> None:
        self.gauges[name] = value


class CoordinatorCore(Generic[SplitT]):
    def __init__(
        self,
        source: Source[SplitT],
        config: CoordinatorConfig,
        epoch: int = 1,
        snapshot: Mapping[str, Any] | None = None,
    ) -> None:
        """A fresh coordinator, or (with ``snapshot``) the successor of one at a higher ``epoch``."""
        self.source = source
        self.config = config
        self.epoch = epoch
        self.metrics = CoreMetrics()
        self._foreign_incarnations: set[str] = set()
        """Incarnations whose messages were dropped for naming another incarnation's attempt (logged once)."""
        self.enumerator_metrics = CoreMetrics()
        """The enumerator's own group (context.metrics), exported apart from the coordinator's."""
        self._codec = source.split_codec
        self._reassign_on_recovery = isinstance(source, SupportsSplitReassignmentOnRecovery)
        self._effects = Effects()
        self._async_handlers: dict[int, Callable[[Any, BaseException | None], None]] = {}
        self._failed: StepFailedError | None = None
        self._loop_thread = threading.get_ident()
        self._next_call_id = 1
        self._last_announce_ms: int | None = None
        self._fencing: dict[int, int] = {}
        """subtask -> the silent attempt whose ``ReaderFence`` the host is carrying out. Not
        persisted: a successor gives live attempts a fresh session window and fences again."""
        self._fenced_at_ms: dict[int, int] = {}
        """subtask -> when its last fence was done: a registration within a session timeout
        after it is told to renew its producer (it may have started it before the fence)."""
        self._context = _CoreContext(self)
        self._now_ms = 0
        # What changed since the host last persisted state (state_parts(only_changed=True)).
        self._dirty_slots: set[int] = set()
        self._enumerator_dirty = True
        self._loads = _LiveLoads(self)
        self.definition = config.definition
        """The source's committed definition (protocol/definition.py)."""
        self._definition_dirty = config.definition is not None
        if snapshot is None:
            self.slots = [SubtaskSlot(s) for s in range(config.max_parallelism)]
            self.tracker = SplitAssignmentTracker()
            self.watermarks = WatermarkAggregator(config.max_watermark_drift_ms)
            self.cseq = 0
            self.inbox_offset: int | None = None
            self.enumerator: SplitEnumerator[SplitT] = source.create_enumerator(self._context)
        else:
            self._restore(snapshot)

    # -- events ---------------------------------------------------------------

    def start(self, now_ms: int) -> Effects:
        """Start the enumerator. Restored live attempts get a fresh session window."""
        self._loads.stale.update(range(len(self.slots)))
        for slot in self.slots:
            if slot.live:
                slot.last_seen_ms = now_ms
            elif slot.state is SlotState.FAILED and slot.failed_at_ms is not None:
                slot.failed_at_ms = now_ms
                self._touch(slot.subtask)
        self._enumerator_dirty = True

        def start_enumerator() -> None:
            self.enumerator.start()
            # A predecessor's fence may have been under way: none is now, so the
            # registrations it held back are answered (told to renew their producers).
            for slot in self.slots:
                self._answer_deferred_registrations(slot, now_ms)

        return self._step(now_ms, start_enumerator, "the enumerator's start")

    def on_message(self, env: Envelope, offset: int, now_ms: int) -> Effects:
        """One decoded record of the inbox topic, at ``offset``."""
        self.inbox_offset = offset
        if env.source != self.config.source:
            return self._reject(f"record is for source {env.source!r}, this coordinator serves {self.config.source!r}")
        if env.subtask == SOURCE_WIDE:
            return self._on_source_wide(env.body, now_ms, _describe(env, offset))
        if not 0 <= env.subtask < self.config.max_parallelism:
            return self._reject(
                f"subtask {env.subtask} is outside 0..{self.config.max_parallelism - 1} (max_parallelism)"
            )
        slot = self.slots[env.subtask]
        whole = self._assembled(slot, env)
        if whole is None:
            return Effects()
        env = whole
        body = env.body
        if isinstance(body, ReaderRegistration):
            return self._step(now_ms, lambda: self._register(slot, body, now_ms), _describe(env, offset))
        if not slot.live or env.attempt != slot.attempt:
            self.metrics.counter("fenced_messages")
            log.debug(
                "fenced %s from subtask %d attempt %s (current %s)",
                env.type,
                env.subtask,
                env.attempt,
                slot.attempt if slot.live else None,
            )
            return Effects()
        if env.incarnation is not None and slot.incarnation and env.incarnation != slot.incarnation:
            return self._drop_foreign_incarnation(env, slot.incarnation)
        slot.last_seen_ms = now_ms
        if type(body) is Heartbeat:
            return self._heartbeat(slot.subtask, body)
        return self._step(now_ms, lambda: self._dispatch(slot, body, now_ms), lambda: _describe(env, offset))

    def _heartbeat(self, subtask: int, body: Heartbeat) -> Effects:
        """The most frequent record, outside ``_step``: it only records the reader's watermark
        (announced on the next tick, Semantics 5; one advance announced per heartbeat made a
        round quadratic in the readers), so it sends nothing, calls no enumerator and cannot
        leave a step half done. At 100,000 readers the step's bookkeeping was a fifth of a
        watermark round (benchmarks/scale.py)."""
        if self._failed is not None:
            raise StepFailedError(self.config.source, "a step after a failed one", self._failed)
        idle = body.idle or self.tracker.owned_count(subtask) == 0
        self.watermarks.update(subtask, body.watermark, idle)
        return Effects()

    def _assembled(self, slot: SubtaskSlot, env: Envelope) -> Envelope | None:
        """The record whole, or None while its pieces arrive (v6). What is held is part of
        the slot's state, so it is committed with the step."""
        if not may_be_a_piece(env):
            return env  # a heartbeat, as a rule: it passes, and what is held stays as it was
        held_before = bool(slot.pieces)
        whole = slot.pieces.take(env, on_dropped=lambda _: self.metrics.counter("incomplete_records_dropped"))
        if held_before or slot.pieces:
            self._dirty_slots.add(slot.subtask)
        return whole

    def _drop_foreign_incarnation(self, env: Envelope, live: str) -> Effects:
        """A v4 message naming the live attempt's number but another incarnation: a reader
        configured with another subtask's number, most likely. Dropped, counted, and logged
        once per sender (it repeats with every heartbeat)."""
        self.metrics.counter("foreign_incarnation_messages")
        if env.incarnation not in self._foreign_incarnations:
            self._foreign_incarnations.add(str(env.incarnation))
            log.warning(
                "dropped %s for subtask %d attempt %s from incarnation %s: the attempt is incarnation %s's "
                "(is a reader configured with the wrong --subtask?)",
                env.type,
                env.subtask,
                env.attempt,
                env.incarnation,
                live,
            )
        return Effects()

    def tick(self, now_ms: int) -> Effects:
        """Time passes: session timeouts (3), departures (3), watermark announcements (5)."""
        return self._step(now_ms, lambda: self._on_tick(now_ms), "a clock tick")

    def reader_fenced(self, subtask: int, attempt: int, now_ms: int, refused: bool = False) -> Effects:
        """The host did what a ``ReaderFence`` asked: the subtask's transactional id is
        fenced and every inbox record committed before the fence is applied (``refused``:
        the broker refused the fence, and the attempt fails unfenced). The attempt, if
        still the subtask's live one, fails (semantics 3)."""

        def after_fence() -> None:
            if refused:
                self.metrics.counter("reader_fences_refused")
            self._after_fence(subtask, attempt, now_ms)

        return self._step(now_ms, after_fence, f"the fence of subtask {subtask}")

    def open_transaction_ended(self, subtask: int, now_ms: int) -> Effects:
        """The host fenced the subtask's transactional id to end a transaction that held the
        inbox (open_transaction.py). Nothing fails here: the attempt's fate is decided by what
        the inbox holds, as for any attempt. A registration of the subtask within a session
        timeout is told to renew its producer (the fence may have come after it started it)."""

        def after_fence() -> None:
            self.metrics.counter("open_transactions_ended")
            if 0 <= subtask < len(self.slots):
                self._fenced_at_ms[subtask] = now_ms

        return self._step(now_ms, after_fence, f"the end of subtask {subtask}'s open transaction")

    def on_async_result(self, call_id: int, result: Any, error: BaseException | None, now_ms: int) -> Effects:
        handler = self._async_handlers.get(call_id)
        if handler is None:  # cancelled, or the enumerator closed
            return Effects()
        self._enumerator_dirty = True
        return self._step(now_ms, lambda: handler(result, error), f"the result of call_async #{call_id}")

    def forget_async_call(self, call_id: int) -> None:
        self._async_handlers.pop(call_id, None)

    def close(self) -> list[int]:
        """Close the enumerator (its errors are logged: the source is going away anyway).
        Returns the ids of the async calls still running, which the host stops; results
        that still arrive are dropped."""
        self._loop_thread = threading.get_ident()
        try:
            self.enumerator.close()
        except Exception:
            log.exception("the enumerator of source %s raised on close", self.config.source)
        outstanding = sorted(self._async_handlers)
        self._async_handlers.clear()
        return outstanding

    # -- queries --------------------------------------------------------------

    def reader_info(self, subtask: int) -> ReaderInfo[SplitT]:
        slot = self.slots[subtask]
        return ReaderInfo(
            subtask=subtask,
            attempt=slot.attempt,
            location=slot.location,
            reported_splits=tuple(self._codec.from_wire(s) for s in slot.reported_splits),
            owned_split_count=self.tracker.owned_count(subtask),
        )

    def live_subtasks(self) -> list[int]:
        return [slot.subtask for slot in self.slots if slot.live]

    def is_finished(self) -> bool:
        """Bounded sources: every subtask was told NoMoreSplits and owns nothing."""
        return all(slot.no_more_splits for slot in self.slots) and self.tracker.total_owned() == 0

    def snapshot(self) -> dict[str, Any]:
        """Everything a successor needs (semantics 4), as JSON-compatible parts keyed
        ``meta``, ``enumerator`` and ``slot/<subtask>``."""
        return self.state_parts(only_changed=False)

    def state_parts(self, only_changed: bool = True) -> dict[str, Any]:
        """The state parts changed since the last call (all of them if not ``only_changed``).
        ``meta`` is always included: it holds the counters every step moves."""
        slots = sorted(self._dirty_slots) if only_changed else range(len(self.slots))
        parts: dict[str, Any] = {
            "meta": {
                "source": self.config.source,
                "max_parallelism": self.config.max_parallelism,
                "epoch": self.epoch,
                "cseq": self.cseq,
                "inbox_offset": self.inbox_offset,
                "watermarks": self.watermarks.snapshot(),
            }
        }
        for s in slots:
            parts[f"slot/{s}"] = {"slot": self.slots[s].to_json(), "owned": self.tracker.snapshot_subtask(s)}
        if self._enumerator_dirty or not only_changed:
            state = self.enumerator.snapshot_state(self.cseq)
            parts["enumerator"] = self.source.enumerator_state_codec.to_json(state)
        if self.definition is not None and (self._definition_dirty or not only_changed):
            parts["definition"] = self.definition.to_json()
        if only_changed:
            self._dirty_slots.clear()
            self._enumerator_dirty = False
            self._definition_dirty = False
        return parts

    def _restore(self, parts: Mapping[str, Any]) -> None:
        meta = parts["meta"]
        if meta["epoch"] >= self.epoch:
            raise ValueError(f"a successor needs an epoch above {meta['epoch']}, got {self.epoch}")
        if meta["max_parallelism"] > self.config.max_parallelism:
            # Raised while running (MaxParallelismRaised): the state, not the flag, is right.
            log.info(
                "source %s serves %d subtasks (raised by sluicegate topics scale), not %d as configured",
                self.config.source,
                meta["max_parallelism"],
                self.config.max_parallelism,
            )
            self.config = dataclasses.replace(self.config, max_parallelism=meta["max_parallelism"])
        self.slots = [SubtaskSlot(s) for s in range(self.config.max_parallelism)]
        self.tracker = SplitAssignmentTracker()
        for s in range(self.config.max_parallelism):
            part = parts.get(f"slot/{s}")
            if part is not None:
                self.slots[s] = SubtaskSlot.from_json(s, part["slot"])
                self.tracker.restore_subtask(s, part["owned"])
        self.watermarks = WatermarkAggregator(self.config.max_watermark_drift_ms, meta["watermarks"]["low_watermark"])
        self.cseq = meta["cseq"]
        self.inbox_offset = meta["inbox_offset"]
        state = self.source.enumerator_state_codec.from_json(parts["enumerator"])
        self.enumerator = self.source.restore_enumerator(self._context, state)
        stored = parts.get("definition")
        if stored is not None:
            self.definition = SourceDefinition.from_json(stored)
            self._definition_dirty = False
        elif self.definition is not None:
            log.info("source %s: recording its definition (%s)", self.config.source, self.definition.describe())

    @property
    def has_state_changes(self) -> bool:
        """Whether state_parts(only_changed=True) holds more than ``meta``."""
        return bool(self._dirty_slots) or self._enumerator_dirty or self._definition_dirty

    def _touch(self, subtask: int) -> None:
        """Every change of a slot (liveness, ownership) passes here, for the state and
        for the live-load order the assigners walk."""
        self._dirty_slots.add(subtask)
        self._loads.stale.add(subtask)

    # -- step machinery -------------------------------------------------------

    def _step(self, now_ms: int, action: Callable[[], None], during: str | Callable[[], str]) -> Effects:
        """One step, all or nothing: it returns all its effects, or raises StepFailedError
        and this core takes no further step (the host restarts from the last commit).
        ``during`` says what the step handled, for that error (a callable: worded only then)."""
        if self._failed is not None:
            raise StepFailedError(self.config.source, "a step after a failed one", self._failed)
        self._now_ms = now_ms
        self._effects = Effects()
        self._loop_thread = threading.get_ident()
        try:
            action()
        except Exception as exc:
            self.metrics.counter("enumerator_errors")
            what = during() if callable(during) else during
            self._failed = StepFailedError(self.config.source, what, exc)
            raise self._failed from exc
        if self._loads.stale:
            self._loads.settle()
        return self._effects  # the next step starts a new one

    def _on_loop(self, method: str) -> None:
        if threading.get_ident() != self._loop_thread:
            raise RuntimeError(
                f"SplitEnumeratorContext.{method} was called from a thread other than the coordinator's loop "
                "(a call_async callable?): return the result from the callable and act on it in the handler"
            )

    def _reject(self, reason: str) -> Effects:
        self.metrics.counter("rejected_messages")
        return Effects(rejection=reason)

    def _send(self, subtask: int, attempt: int | None, body: Body) -> None:
        self._send_to_each(((subtask, attempt),), body)

    def _send_to_each(self, readers: Iterable[tuple[int, int | None]], body: Body) -> None:
        """``body`` to each (subtask, attempt), in order: one loop with its names local, since
        a watermark announcement goes to every live reader (100,000 records a tick at
        100,000 readers)."""
        messages, source, epoch, ts, inbox, kind = (
            self._effects.messages,
            self.config.source,
            self.epoch,
            self._now_ms,
            self.inbox_offset,
            body.TYPE,
        )
        cseq = self.cseq
        for subtask, attempt in readers:
            cseq += 1
            messages.append(
                Envelope(
                    type=kind,
                    source=source,
                    subtask=subtask,
                    attempt=attempt,
                    epoch=epoch,
                    ts=ts,
                    body=body,
                    inbox_offset=inbox,
                    cseq=cseq,
                )
            )
        self.cseq = cseq

    # -- records about the source as a whole ----------------------------------------

    def _on_source_wide(self, body: Body, now_ms: int, during: str) -> Effects:
        if isinstance(body, SlotRequest):
            return self._step(now_ms, lambda: self._grant_slot(body, now_ms), during)
        if isinstance(body, MaxParallelismRaised):
            return self._step(now_ms, lambda: self._raise_max_parallelism(body.max_parallelism), during)
        if isinstance(body, SourceRedefined):
            return self._step(now_ms, lambda: self._redefine(body), during)
        return self._reject(
            f"{body.TYPE} must name a subtask (only SlotRequest, MaxParallelismRaised and SourceRedefined may not)"
        )

    def _redefine(self, body: SourceRedefined) -> None:
        """``sluicegate source redefine`` rewrote the committed definition and fenced the
        coordinator that served the old one; this one was started with the new one (its
        host checked it against the state), so this only records it."""
        new = SourceDefinition.from_json(body.definition)
        if self.definition is not None and new.fingerprint == self.definition.fingerprint:
            log.info("source %s: redefined as %s", self.config.source, new.describe())
            return
        changes = "; ".join(self.definition.differences(new)) if self.definition else new.describe()
        log.warning("source %s: redefined from the control log: %s", self.config.source, changes)
        self.definition = new
        self._definition_dirty = True

    def _grant_slot(self, body: SlotRequest, now_ms: int) -> None:
        """Hand out a slot as a consumer group hands out member ids. The slot is held for the
        requester for a session timeout; the requester then registers on it like any reader."""
        slot = slot_for_request(
            self.slots,
            body.incarnation,
            body.name,
            now_ms,
            departed=lambda slot: self._departed(slot, now_ms),
        )
        if slot is None:
            self.metrics.counter("slot_requests_refused")
            reason = (
                f"all {len(self.slots)} slots of source {self.config.source} are taken; "
                "stop a reader or grow the source (sluicegate topics scale)"
            )
            log.warning("refused a slot to %s (%s): %s", body.location or "?", body.incarnation, reason)
            self._send(0, None, RegistrationRefused(incarnation=body.incarnation, reason=reason, cause="slots"))
            return
        slot.name = body.name
        slot.reserved_for = body.incarnation
        slot.reserved_until_ms = now_ms + self.config.session_timeout_ms
        self._touch(slot.subtask)
        self.metrics.counter("slots_granted")
        log.info(
            "granted subtask %d to %s%s", slot.subtask, body.location or "?", f" ({body.name})" if body.name else ""
        )
        self._send(slot.subtask, None, SlotGranted(incarnation=body.incarnation, name=body.name))

    def _departed(self, slot: SubtaskSlot, now_ms: int) -> bool:
        """Its reader failed longer ago than the departure timeout and its splits went back."""
        return (
            slot.state is SlotState.FAILED
            and self.tracker.owned_count(slot.subtask) == 0
            and slot.failed_at_ms is not None
            and now_ms - slot.failed_at_ms > self.config.reader_departure_timeout_ms
        )

    def _raise_max_parallelism(self, max_parallelism: int) -> None:
        """The per-subtask topics grew (``sluicegate topics scale``): serve the new slots."""
        current = len(self.slots)
        if max_parallelism <= current:
            log.info("max_parallelism stays %d (asked for %d: it only grows)", current, max_parallelism)
            return
        self.slots.extend(SubtaskSlot(s) for s in range(current, max_parallelism))
        self.config = dataclasses.replace(self.config, max_parallelism=max_parallelism)
        self._dirty_slots.update(range(current, max_parallelism))
        self._enumerator_dirty = True
        log.info(
            "max_parallelism raised from %d to %d: subtasks %d..%d may register",
            current,
            max_parallelism,
            current,
            max_parallelism - 1,
        )

    # -- reader messages ------------------------------------------------------

    def _dispatch(self, slot: SubtaskSlot, body: Body, now_ms: int) -> None:
        s = slot.subtask  # (a Heartbeat never gets here: _heartbeat)
        self._touch(s)
        if isinstance(body, RequestSplit | ReaderSourceEvent):  # the calls into the enumerator
            self._enumerator_dirty = True
        if isinstance(body, CheckpointAck):
            self._on_checkpoint(slot, body)
        elif isinstance(body, SplitsFinished):
            not_owned = self.tracker.finish(s, body.split_ids)
            if not_owned:
                self.metrics.counter("finished_splits_not_owned", len(not_owned))
                log.warning("subtask %d finished splits it does not own: %s", s, not_owned[:10])
        elif isinstance(body, RequestSplit):
            self.enumerator.handle_split_request(s, body.hostname)
        elif isinstance(body, ReaderSourceEvent):
            self.enumerator.handle_source_event(s, body.payload)
        elif isinstance(body, ReaderLeaving):
            self._on_leaving(slot, body)

    def _register(self, slot: SubtaskSlot, body: ReaderRegistration, now_ms: int, renew_producer: bool = False) -> None:
        """Semantics 1: next attempt, fence the previous one, ReaderRegistered, then add_reader.
        While the subtask's transactional id is being fenced, the registration waits for the
        fence: the process registering may have started its producer just before it."""
        s = slot.subtask
        if s in self._fencing:
            slot.deferred_registrations.append(body.to_json())
            self._touch(s)
            log.info("subtask %d: a registration from %s waits for the fence under way", s, body.location or "?")
            return
        fenced_at = self._fenced_at_ms.get(s)
        renew_producer = renew_producer or (
            fenced_at is not None and now_ms - fenced_at <= self.config.session_timeout_ms
        )
        if body.definition is not None and self.definition is not None:
            given = SourceDefinition.from_json(body.definition)
            if given.fingerprint != self.definition.fingerprint:
                self._refuse_definition(slot, body, given)
                return
        if body.exclusive and slot.live and slot.incarnation != body.incarnation and not self._restarts(slot, body):
            self._refuse_registration(slot, body)
            return
        self._touch(s)
        self._enumerator_dirty = True
        if slot.live:
            self._fail_attempt(slot, ReleaseReason.FENCED, now_ms, successor=body)
        slot.reserved_for = None
        slot.state = SlotState.LIVE
        slot.attempt += 1
        slot.incarnation = body.incarnation
        slot.location = body.location
        slot.last_seen_ms = now_ms
        slot.failed_at_ms = None
        slot.no_more_splits = False
        slot.reported_splits = list(body.reported_splits)
        kept = self._reported_splits_kept(slot, body)
        dropped = [split["split_id"] for split in body.reported_splits if split["split_id"] not in kept]
        registered = ReaderRegistered(
            incarnation=body.incarnation, attempt=slot.attempt, dropped_split_ids=dropped, renew_producer=renew_producer
        )
        for piece in body_in_pieces(registered, self.config.max_message_bytes):
            self._send(s, slot.attempt, piece)
        log.info("subtask %d registered as attempt %d from %s", s, slot.attempt, body.location or "?")
        self._reconcile_reported_splits(slot, body, kept)
        self.enumerator.add_reader(s)

    @staticmethod
    def _restarts(slot: SubtaskSlot, body: ReaderRegistration) -> bool:
        """Whether an exclusive registration is the live attempt's own query, restarted: it
        restores the checkpoint that attempt wrote, no older than the last one acknowledged
        (attempts are numbered once per subtask, so no other query holds such a checkpoint)."""
        return (
            body.restored_attempt is not None
            and body.restored_attempt == slot.attempt
            and body.restored_checkpoint_id is not None
            and (slot.checkpoint_id is None or body.restored_checkpoint_id >= slot.checkpoint_id)
        )

    def _refuse_registration(self, slot: SubtaskSlot, body: ReaderRegistration) -> None:
        """An exclusive registration (a Spark query) does not fence a live attempt of another
        incarnation: a second query on the same source must fail, not disturb the first."""
        self.metrics.counter("registrations_refused")
        log.warning(
            "refused an exclusive registration of subtask %d from %s: attempt %d from %s holds it",
            slot.subtask,
            body.location or "?",
            slot.attempt,
            slot.location or "?",
        )
        refusal = RegistrationRefused(
            incarnation=body.incarnation,
            reason=f"subtask {slot.subtask} is held by a live reader",
            holder_incarnation=slot.incarnation,
            holder_location=slot.location,
            cause="held",
        )
        self._send(slot.subtask, None, refusal)

    def _refuse_definition(self, slot: SubtaskSlot, body: ReaderRegistration, given: SourceDefinition) -> None:
        """A reader that reads something else under this source's name would mix two
        sources' data in one output and one audit: refused for good."""
        assert self.definition is not None
        self.metrics.counter("registrations_refused_definition")
        who = f"the reader of subtask {slot.subtask} at {body.location or '?'}"
        reason = mismatch_message(self.config.source, who, self.definition, given)
        log.warning("refused a registration: %s", reason)
        self._send(
            slot.subtask, None, RegistrationRefused(incarnation=body.incarnation, reason=reason, cause="definition")
        )

    def _reported_splits_kept(self, slot: SubtaskSlot, body: ReaderRegistration) -> set[str]:
        """Which reported splits the new attempt keeps reading (semantics 1, FLIP-537)."""
        if self._reassign_on_recovery:
            return set()
        owned = self.tracker.owned_ids(slot.subtask)
        kept = {split["split_id"] for split in body.reported_splits if split["split_id"] in owned}
        conflicts = len(body.reported_splits) - len(kept)
        if conflicts:
            self.metrics.counter("reported_split_conflicts", conflicts)
            log.warning(
                "subtask %d restored %d splits the coordinator does not attribute to it; "
                "ReaderRegistered tells it to drop them",
                slot.subtask,
                conflicts,
            )
        return kept

    def _reconcile_reported_splits(self, slot: SubtaskSlot, body: ReaderRegistration, kept: set[str]) -> None:
        """With reassignment on recovery, everything the subtask held goes to the
        enumerator; otherwise the subtask keeps what its reader kept, and whatever the
        coordinator attributed to it but the reader did not restore goes back."""
        s = slot.subtask
        if self._reassign_on_recovery:
            reported = {split["split_id"]: split for split in body.reported_splits}
            reported_is_current = body.restored_checkpoint_id is not None and (
                slot.checkpoint_id is None or body.restored_checkpoint_id >= slot.checkpoint_id
            )
            released = self.tracker.take_all(s, reported if reported_is_current else None)
            self._release(slot, ReleaseReason.RECOVERY, None, released)
            return
        not_restored = sorted(self.tracker.owned_ids(s) - kept)
        self._release(slot, ReleaseReason.RECOVERY, None, self.tracker.take(s, not_restored))

    def _on_checkpoint(self, slot: SubtaskSlot, body: CheckpointAck) -> None:
        if body.applied_seq > slot.seq:
            self.metrics.counter("invalid_checkpoint_acks")
            log.warning(
                "subtask %d acknowledged seq %d but only %d were sent; ignored",
                slot.subtask,
                body.applied_seq,
                slot.seq,
            )
            return
        self._check_base(slot, body)
        returned = self._take_returned(slot, body) if body.returned else []
        complete = body.base_checkpoint_id is None
        outcome = self.tracker.on_checkpoint(slot.subtask, body.applied_seq, body.splits, complete=complete)
        refused = self.tracker.refused_releases(slot.subtask, body.applied_seq)
        slot.checkpoint_id = body.checkpoint_id
        if outcome.unknown:
            self.metrics.counter("checkpointed_splits_not_owned", len(outcome.unknown))
        if outcome.missing:
            # Keep them: a split leaves ownership only through SplitsFinished or a release.
            self.metrics.counter("splits_missing_from_checkpoint", len(outcome.missing))
        self._odd_splits(
            "releases_refused", "subtask %d kept %d splits it was asked to give back", slot.subtask, refused
        )
        # Only now, with the checkpoint recorded: the enumerator may give them to another reader.
        self._release(slot, ReleaseReason.RETURNED, None, returned)

    def _check_base(self, slot: SubtaskSlot, body: CheckpointAck) -> None:
        """An ack of changes (v7) is relative to a checkpoint this coordinator must have
        recorded already. Its base may be older than the last one recorded (a reader that did
        not learn that its last commit went through diffs against the one before: a superset
        of the changes, still right); a base never recorded means the splits it leaves out
        keep older positions. Applied anyway (they only move forward), counted and logged."""
        base = body.base_checkpoint_id
        if base is None or (slot.checkpoint_id is not None and base <= slot.checkpoint_id):
            return
        self.metrics.counter("checkpoint_acks_on_unknown_base")
        log.warning(
            "subtask %d acknowledged checkpoint %d as changes since checkpoint %d, but the last one recorded is %s",
            slot.subtask,
            body.checkpoint_id,
            base,
            slot.checkpoint_id,
        )

    def _odd_splits(self, counter: str, message: str, subtask: int, split_ids: Sequence[str]) -> None:
        """Splits a reader or an enumerator named that the protocol did not expect there:
        counted and logged with a few of them, never fatal. ``message`` takes the subtask
        and the number of splits."""
        if not split_ids:
            return
        self.metrics.counter(counter, len(split_ids))
        log.warning(message + ", e.g. %s", subtask, len(split_ids), list(split_ids[:_SPLITS_SHOWN]))

    def _take_returned(self, slot: SubtaskSlot, body: CheckpointAck) -> list[WireSplit]:
        """Cooperative rebalancing: the splits the ack gives back leave the subtask at the
        positions of that checkpoint. Anything odd is counted, never fatal."""
        outcome = self.tracker.take_returned(slot.subtask, body.returned)
        self._odd_splits(
            "returned_splits_not_requested",
            "subtask %d returned %d splits nobody asked for (taken back anyway)",
            slot.subtask,
            outcome.unrequested,
        )
        self._odd_splits(
            "returned_splits_not_owned",
            "subtask %d returned %d splits it does not own (ignored)",
            slot.subtask,
            outcome.not_owned,
        )
        if outcome.taken:
            self.metrics.counter("splits_returned", len(outcome.taken))
            log.info("subtask %d gave %d splits back", slot.subtask, len(outcome.taken))
        return outcome.taken

    def _on_leaving(self, slot: SubtaskSlot, body: ReaderLeaving) -> None:
        positions = {split["split_id"]: split for split in body.splits}
        released = self.tracker.take_all(slot.subtask, positions)
        self._drop_releases(slot)
        attempt = slot.attempt
        slot.state = SlotState.LEFT
        self.watermarks.remove(slot.subtask)  # semantics 5: an advance is announced on the next tick
        log.info("subtask %d attempt %d left; %d splits return to the enumerator", slot.subtask, attempt, len(released))
        self._release(slot, ReleaseReason.LEFT, None, released, always=True)

    # -- failures and time ------------------------------------------------------

    def _fail_attempt(
        self, slot: SubtaskSlot, reason: ReleaseReason, now_ms: int, successor: ReaderRegistration | None = None
    ) -> None:
        """Semantics 3: splits assigned after the last CheckpointAck go back to the enumerator.
        ``successor``: the registration that fenced the attempt, named in the release so that
        a reader still running learns that another process took its subtask."""
        failed = slot.attempt
        self._touch(slot.subtask)
        slot.state = SlotState.FAILED
        slot.failed_at_ms = now_ms
        self.metrics.counter(f"attempts_failed_{reason.value}")
        released = self.tracker.take_uncheckpointed(slot.subtask)
        self._drop_releases(slot)
        log.warning(
            "subtask %d attempt %d failed (%s): %d uncheckpointed splits return to the enumerator, "
            "%d stay for its next attempt",
            slot.subtask,
            failed,
            reason.value,
            len(released),
            self.tracker.owned_count(slot.subtask),
        )
        self.watermarks.remove(slot.subtask)  # semantics 5: an advance is announced on the next tick
        self._release(slot, reason, failed, released, always=True, successor=successor)

    def _fence_silent(self, slot: SubtaskSlot, now_ms: int) -> None:
        """Semantics 3 for a silent attempt, in two steps: first the host fences its
        transactional id and reads the inbox to its stable end (``ReaderFence``); then
        ``reader_fenced`` fails it. Failing it at once gave its uncheckpointed splits to
        another reader while a starved process could still commit a checkpoint of them."""
        if self._fencing.get(slot.subtask) == slot.attempt:
            return  # asked already; the host reports once it is done
        self._fencing[slot.subtask] = slot.attempt
        self.metrics.counter("readers_fenced")
        log.warning(
            "subtask %d attempt %d silent for %d ms (session timeout %d ms): fencing it before its splits move",
            slot.subtask,
            slot.attempt,
            now_ms - slot.last_seen_ms,
            self.config.session_timeout_ms,
        )
        self._effects.fences.append(ReaderFence(slot.subtask, slot.attempt))

    def _after_fence(self, subtask: int, attempt: int, now_ms: int) -> None:
        if self._fencing.get(subtask) == attempt:
            del self._fencing[subtask]
        if not 0 <= subtask < len(self.slots):
            return
        self._fenced_at_ms[subtask] = now_ms
        slot = self.slots[subtask]
        if slot.live and slot.attempt == attempt:
            # Failed even if it spoke meanwhile (a process that got the CPU back): its
            # producer is fenced, so nothing it read since its last checkpoint can commit.
            self._fail_attempt(slot, ReleaseReason.SESSION_TIMEOUT, now_ms)
        self._answer_deferred_registrations(slot, now_ms)

    def _answer_deferred_registrations(self, slot: SubtaskSlot, now_ms: int) -> None:
        """The registrations held back while the fence ran, in the order read. Each reader
        is told to renew its producer: the fence may have come after it started it."""
        deferred, slot.deferred_registrations = slot.deferred_registrations, []
        if deferred:
            self._touch(slot.subtask)
        for body in deferred:
            self._register(slot, ReaderRegistration(**body), now_ms, renew_producer=True)

    def _drop_releases(self, slot: SubtaskSlot) -> None:
        """The attempt that was asked to give splits back is over: the requests die with it
        (semantics 3 decides what happens to its splits)."""
        dropped = self.tracker.drop_releases(slot.subtask)
        if dropped:
            self.metrics.counter("release_requests_dropped", len(dropped))
            log.info("subtask %d: %d outstanding release requests dropped with its attempt", slot.subtask, len(dropped))

    def _release(
        self,
        slot: SubtaskSlot,
        reason: ReleaseReason,
        failed_attempt: int | None,
        released: Sequence[WireSplit],
        always: bool = False,
        successor: ReaderRegistration | None = None,
    ) -> None:
        """Tell the topics (for the audit and the reader) and then the enumerator."""
        if not released and not always:
            return
        parts = self._chunks([s["split_id"] for s in released])
        for i, split_ids in enumerate(parts):
            body = SplitsReleased(
                reason=reason.value,
                failed_attempt=failed_attempt,
                split_ids=split_ids,
                successor_incarnation=successor.incarnation if successor else None,
                successor_location=successor.location if successor else None,
                more=i < len(parts) - 1,
            )
            self._send(slot.subtask, slot.attempt, body)
        self._touch(slot.subtask)
        if released:
            self._enumerator_dirty = True
            self.enumerator.add_splits_back([self._codec.from_wire(s) for s in released], slot.subtask)

    def _on_tick(self, now_ms: int) -> None:
        live = SlotState.LIVE
        for slot in self.slots:
            if slot.state is live and now_ms - slot.last_seen_ms > self.config.session_timeout_ms:
                self._fence_silent(slot, now_ms)
            elif (
                slot.state is SlotState.FAILED
                and slot.failed_at_ms is not None
                and now_ms - slot.failed_at_ms > self.config.reader_departure_timeout_ms
                and self.tracker.owned_count(slot.subtask) > 0
            ):
                released = self.tracker.take_all(slot.subtask)
                log.warning(
                    "subtask %d departed: no attempt for %d ms; its %d checkpointed splits return to the enumerator",
                    slot.subtask,
                    self.config.reader_departure_timeout_ms,
                    len(released),
                )
                self._release(slot, ReleaseReason.DEPARTED, None, released)
        if (
            self._last_announce_ms is None
            or now_ms - self._last_announce_ms >= self.config.watermark_announce_interval_ms
        ):
            self._announce_watermark(now_ms)

    def _announce_watermark(self, now_ms: int) -> None:
        """Semantics 5: every live reader, at most once per watermark_announce_interval_ms,
        however often the low watermark advanced in between (coalesced)."""
        state = self.watermarks.state
        if state.low_watermark is None:
            return
        self._last_announce_ms = now_ms
        body = WatermarkAnnouncement(
            low_watermark=state.low_watermark, max_allowed_watermark=state.max_allowed_watermark
        )
        live = SlotState.LIVE  # (not slot.live: the property costs ~1 ms per 10,000 readers)
        self._send_to_each(((slot.subtask, slot.attempt) for slot in self.slots if slot.state is live), body)

    # -- what the enumerator context does ---------------------------------------

    def _assign(self, assignment: Mapping[int, Sequence[SplitT]]) -> None:
        for s in assignment:
            if not (0 <= s < self.config.max_parallelism) or not self.slots[s].live:
                raise NoLiveReaderError(s)
        to_wire = self._codec.to_wire
        records = {
            s: list(enumerate(self._chunks([to_wire(split) for split in splits]), start=self.slots[s].seq + 1))
            for s, splits in assignment.items()
            if splits
        }
        # The tracker refuses the whole assignment before any seq or record is spent.
        self.tracker.record_assignments(records)
        for s, chunks in records.items():
            slot = self.slots[s]
            self._touch(s)
            for seq, chunk in chunks:
                slot.seq = seq
                self._send(s, slot.attempt, AddSplits(seq=seq, splits=chunk))
            self.metrics.counter("splits_assigned", sum(len(chunk) for _, chunk in chunks))

    def _chunks(self, items: list[_Item]) -> list[list[_Item]]:
        """Cut a list (splits of an AddSplits, split ids of a release) into pieces that
        each fit one record of max_message_bytes (protocol/pieces.py)."""
        return in_pieces(items, self.config.max_message_bytes)

    def _signal_no_more_splits(self, subtask: int) -> None:
        slot = self.slots[subtask]
        if not slot.live:
            raise NoLiveReaderError(subtask)
        if slot.no_more_splits:
            return
        slot.no_more_splits = True
        self._touch(subtask)
        slot.seq += 1
        self._send(subtask, slot.attempt, NoMoreSplits(seq=slot.seq))

    def _request_release(self, subtask: int, split_ids: Sequence[str]) -> None:
        """Cooperative rebalancing: ask the live owner for splits back (ReleaseRequest in
        its seq order). The splits stay owned until a CheckpointAck returns them."""
        slot = self.slots[subtask] if 0 <= subtask < len(self.slots) else None
        if slot is None or not slot.live:
            raise NoLiveReaderError(subtask)
        not_owned: list[str] = []
        for part in self._chunks(list(split_ids)):  # one request per part, each its own seq
            outcome = self.tracker.request_release(subtask, slot.seq + 1, part)
            not_owned += outcome.not_owned
            if not outcome.requested:
                continue
            self._touch(subtask)
            slot.seq += 1
            self._send(subtask, slot.attempt, ReleaseRequest(seq=slot.seq, split_ids=outcome.requested))
            self.metrics.counter("splits_release_requested", len(outcome.requested))
        self._odd_splits(
            "release_requests_not_owned",
            "asked subtask %d for %d splits it does not own (skipped)",
            subtask,
            not_owned,
        )

    def _send_event(self, subtask: int, event: Any, attempt: int | None) -> None:
        slot = self.slots[subtask] if 0 <= subtask < len(self.slots) else None
        if slot is None or not slot.live or (attempt is not None and attempt != slot.attempt):
            self.metrics.counter("source_events_dropped")  # semantics 6: loss-tolerant by contract
            return
        self._send(subtask, slot.attempt, CoordinatorSourceEvent(payload=event))

    def _call_async(
        self,
        fn: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        initial_delay_ms: int,
        period_ms: int,
    ) -> AsyncCallHandle:
        call_id = self._next_call_id
        self._next_call_id += 1
        self._async_handlers[call_id] = handler
        self._effects.async_calls.append(AsyncCall(call_id, fn, initial_delay_ms, period_ms))
        return AsyncCallHandle(lambda: self._cancel_async(call_id))

    def _cancel_async(self, call_id: int) -> None:
        self._on_loop("call_async(...).cancel")
        if self._async_handlers.pop(call_id, None) is None:
            return  # done, cancelled before, or closed
        pending = self._effects.async_calls
        if any(call.call_id == call_id for call in pending):  # not handed to the host yet
            self._effects.async_calls = [call for call in pending if call.call_id != call_id]
        else:
            self._effects.cancelled_calls.append(call_id)


def _describe(env: Envelope, offset: int) -> str:
    who = "the source" if env.subtask == SOURCE_WIDE else f"subtask {env.subtask}"
    return f"{env.type} from {who} (inbox offset {offset})"


class _CoreContext(SplitEnumeratorContext[SplitT]):
    """The enumerator's view of the coordinator; every call lands in the current step's effects,
    and must come from the loop that runs the steps."""

    def __init__(self, core: CoordinatorCore[SplitT]) -> None:
        self._core = core

    def current_parallelism(self) -> int:
        self._core._on_loop("current_parallelism")
        return self._core.config.max_parallelism

    def registered_readers(self) -> Mapping[int, ReaderInfo[SplitT]]:
        self._core._on_loop("registered_readers")
        return _LiveReaders(self._core)

    def reader_loads(self) -> ReaderLoads:
        self._core._on_loop("reader_loads")
        return self._core._loads

    def current_time_ms(self) -> int:
        self._core._on_loop("current_time_ms")
        return self._core._now_ms

    def outstanding_split_count(self) -> int:
        self._core._on_loop("outstanding_split_count")
        return self._core.tracker.total_owned()

    def assign_splits(self, assignment: SplitsAssignment[SplitT] | Mapping[int, Sequence[SplitT]]) -> None:
        self._core._on_loop("assign_splits")
        mapping = assignment.assignment if isinstance(assignment, SplitsAssignment) else assignment
        self._core._assign(mapping)

    def signal_no_more_splits(self, subtask: int) -> None:
        self._core._on_loop("signal_no_more_splits")
        self._core._signal_no_more_splits(subtask)

    def request_split_release(self, subtask: int, split_ids: Sequence[str]) -> None:
        self._core._on_loop("request_split_release")
        self._core._request_release(subtask, split_ids)

    def owned_splits(self, subtask: int) -> list[SplitT]:
        self._core._on_loop("owned_splits")
        codec = self._core._codec
        return [codec.from_wire(s) for s in self._core.tracker.owned(subtask)]

    def owned_split_view(self, subtask: int) -> OwnedSplits[SplitT]:
        self._core._on_loop("owned_split_view")
        return OwnedSplits(self._core.tracker.owned_by_id(subtask), self._core._codec.from_wire)

    def releasing_split_ids(self, subtask: int) -> frozenset[str]:
        self._core._on_loop("releasing_split_ids")
        return frozenset(self._core.tracker.releasing_ids(subtask))

    def send_event_to_source_reader(self, subtask: int, event: Any, attempt: int | None = None) -> None:
        self._core._on_loop("send_event_to_source_reader")
        self._core._send_event(subtask, event, attempt)

    def call_async(
        self,
        callable_: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        initial_delay_ms: int = 0,
        period_ms: int = 0,
    ) -> AsyncCallHandle:
        self._core._on_loop("call_async")
        return self._core._call_async(callable_, handler, initial_delay_ms, period_ms)

    @property
    def metrics(self) -> EnumeratorMetrics:
        self._core._on_loop("metrics")
        return self._core.enumerator_metrics


class _LiveLoads(ReaderLoads):
    """The live subtasks and their owned-split counts, kept in (owned, subtask) order.

    The slots the core touched in the current step (``stale``) are re-read at every
    look and once more when the step ends (``settle``): a slot is touched before or
    after it changes, so only the end of the step is sure to see its final state. A
    step that changes k slots costs O(k log readers) per look, not a sort of every reader.
    """

    def __init__(self, core: CoordinatorCore[Any]) -> None:
        super().__init__({})
        self._core = core
        self.stale: set[int] = set()
        self._order = SortedList()

    def _refresh(self) -> None:
        if not self.stale:
            return
        slots, tracker = self._core.slots, self._core.tracker
        for s in self.stale:
            old = self._loads.pop(s, None)
            if old is not None:
                self._order.remove((old, s))
            if slots[s].live:
                count = tracker.owned_count(s)
                self._loads[s] = count
                self._order.add((count, s))

    def settle(self) -> None:
        self._refresh()
        self.stale.clear()

    def __getitem__(self, subtask: int) -> int:
        self._refresh()
        return self._loads[subtask]

    def __contains__(self, subtask: object) -> bool:
        """Whether the subtask is live, read off its slot: no refresh, so a round may ask it
        of every split it places (a refresh costs every slot touched in the step)."""
        slots = self._core.slots
        return isinstance(subtask, int) and 0 <= subtask < len(slots) and slots[subtask].live

    def __iter__(self) -> Iterator[int]:
        self._refresh()
        return iter(sorted(self._loads))  # subtask order, as registered_readers() always gave

    def __len__(self) -> int:
        self._refresh()
        return len(self._loads)

    def fewest_first(self) -> Iterator[int]:
        self._refresh()
        return (s for _, s in self._order)

    def touched(self) -> Iterable[int]:
        """The slots the current step touched: every registration, departure and change
        of ownership touches its slot, and each step that may change them ends in a round."""
        return list(self.stale)


class _LiveReaders(Mapping[int, ReaderInfo[SplitT]]):
    """registered_readers() as a view: a ReaderInfo is built only for the readers asked about."""

    def __init__(self, core: CoordinatorCore[SplitT]) -> None:
        self._core = core

    def __getitem__(self, subtask: int) -> ReaderInfo[SplitT]:
        if subtask not in self._core._loads:
            raise KeyError(subtask)
        return self._core.reader_info(subtask)

    def __contains__(self, subtask: object) -> bool:
        return subtask in self._core._loads  # (Mapping's would build a ReaderInfo, decoding its splits)

    def __iter__(self) -> Iterator[int]:
        return iter(self._core._loads)

    def __len__(self) -> int:
        return len(self._core._loads)
