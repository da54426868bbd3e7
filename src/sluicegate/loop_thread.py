"""An asyncio event loop on a thread of its own, for hosts whose own thread is not
asyncio's (Spark calls a data source from its threads; a reader's coordinator must not
share the reader's loop).

``start(prepare)`` runs ``prepare()`` on the new loop and returns once it is done, raising
what it raised (the loop is then closed); afterwards the loop runs until ``stop(cleanup)``,
which runs ``cleanup()`` on it first. ``call`` hands a coroutine to the loop from any
other thread and waits for its result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

STOP_TIMEOUT_S = 20.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        """The running loop (None before ``start`` and after a failed one)."""
        self._thread: threading.Thread | None = None
        self._stopping = False

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        return self._stopping

    def start(
        self,
        prepare: Callable[[], Coroutine[Any, Any, T]],
        on_failure: Callable[[], Coroutine[Any, Any, None]] | None = None,
        timeout_s: float | None = None,
    ) -> T:
        """Run ``prepare()`` on a new loop on a new thread; return its result once done.
        If it raises, ``on_failure()`` runs on the loop, the loop is closed and the error is
        raised here."""
        ready: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(prepare, on_failure, ready), name=self.name, daemon=True
        )
        self._thread.start()
        return ready.result(timeout=timeout_s)

    def call(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout_s: float) -> T:
        """Run a coroutine on the loop from another thread and wait for its result."""
        loop = self.loop
        if loop is None or self._stopping:
            raise RuntimeError(f"{self.name} is not running")
        return asyncio.run_coroutine_threadsafe(factory(), loop).result(timeout=timeout_s)

    def submit(self, factory: Callable[[], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        """Hand a coroutine to the loop from another thread without waiting for it."""
        loop = self.loop
        if loop is None or self._stopping:
            raise RuntimeError(f"{self.name} is not running")
        return asyncio.run_coroutine_threadsafe(factory(), loop)

    def stop(self, cleanup: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        """Run ``cleanup()`` on the loop (errors ignored), stop the loop and join the thread.
        Calling it twice, or before a successful start, does nothing."""
        loop, thread = self.loop, self._thread
        if loop is None or thread is None or self._stopping:
            return
        self._stopping = True
        if cleanup is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(cleanup(), loop).result(timeout=STOP_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

    def _run(
        self,
        prepare: Callable[[], Coroutine[Any, Any, T]],
        on_failure: Callable[[], Coroutine[Any, Any, None]] | None,
        ready: concurrent.futures.Future[T],
    ) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self.loop = loop
        try:
            result = loop.run_until_complete(prepare())
        except BaseException as exc:
            self.loop = None  # nothing runs here: stop() has nothing to stop
            if on_failure is not None:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(on_failure())
            loop.close()
            ready.set_exception(exc)
            return
        ready.set_result(result)
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
