"""Faults the kit injects into a connector's enumerator, to check that a coordinator
step that raises is all or nothing (docs/connectors.md, "Thread model and failures").

``EnumeratorFault(point)`` wraps a Source so that its enumerator raises once, right
after the named method (or a ``call_async`` handler) has done its work: the step has
assigned splits, sent events and changed the enumerator's state, and then fails. The
coordinator must keep none of it, restart from its last commit and be offered the same
input again, so the run still ends exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluicegate.api.enumerator import AsyncCallHandle, SplitEnumerator, SplitEnumeratorContext
from sluicegate.api.source import Source

CALL_ASYNC_HANDLER = "call_async handler"
FAULT_POINTS = ("start", "add_reader", "handle_split_request", "add_splits_back", CALL_ASYNC_HANDLER)
"""Where a fault can be injected: enumerator methods, and the handlers of call_async."""


class InjectedFault(RuntimeError):
    """The exception the kit raises on purpose."""


class EnumeratorFault:
    def __init__(self, point: str) -> None:
        if point not in FAULT_POINTS:
            raise ValueError(f"no fault point {point!r} (known: {', '.join(FAULT_POINTS)})")
        self.point = point
        self.injected = False

    def install(self, source: Source[Any]) -> Source[Any]:
        """``source``, changed in place so that the enumerators it creates or restores
        (including a restarted coordinator's) carry the fault."""
        create, restore = source.create_enumerator, source.restore_enumerator

        def create_enumerator(context: SplitEnumeratorContext[Any]) -> SplitEnumerator[Any]:
            return self._arm(create(self._context(context)))

        def restore_enumerator(context: SplitEnumeratorContext[Any], checkpoint: Any) -> SplitEnumerator[Any]:
            return self._arm(restore(self._context(context), checkpoint))

        source.create_enumerator = create_enumerator  # type: ignore[method-assign]
        source.restore_enumerator = restore_enumerator  # type: ignore[method-assign]
        return source

    def _raise_once(self) -> None:
        if not self.injected:
            self.injected = True
            raise InjectedFault(f"injected by the kit after {self.point}")

    def _after(self, action: Callable[..., Any]) -> Callable[..., Any]:
        def action_then_fault(*args: Any) -> Any:
            result = action(*args)
            self._raise_once()
            return result

        return action_then_fault

    def _arm(self, enumerator: SplitEnumerator[Any]) -> SplitEnumerator[Any]:
        if self.point != CALL_ASYNC_HANDLER:
            setattr(enumerator, self.point, self._after(getattr(enumerator, self.point)))
        return enumerator

    def _context(self, context: SplitEnumeratorContext[Any]) -> SplitEnumeratorContext[Any]:
        if self.point != CALL_ASYNC_HANDLER:
            return context
        fault = self
        original = context.call_async

        def call_async(
            callable_: Callable[[], Any],
            handler: Callable[[Any, BaseException | None], None],
            initial_delay_ms: int = 0,
            period_ms: int = 0,
        ) -> AsyncCallHandle:
            return original(callable_, fault._after(handler), initial_delay_ms, period_ms)

        context.call_async = call_async  # type: ignore[method-assign]
        return context
