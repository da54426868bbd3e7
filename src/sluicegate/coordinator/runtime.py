"""Glue between Kafka records and the I/O-free core: decode, dead-letter, feed the
core, carry out its effects in order. Knows nothing of Faust; the Faust app
(faust_app.py) owns one runtime per source and gives it a way to send records."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sluicegate.coordinator.core import AsyncCall, CoordinatorCore, Effects
from sluicegate.protocol.codec import DecodeError, decode, encode, encode_key
from sluicegate.protocol.dead_letter import DeadLetter
from sluicegate.protocol.messages import Direction

log = logging.getLogger("sluicegate.coordinator")


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


Sender = Callable[[list[OutgoingRecord]], Awaitable[None]]


def now_ms() -> int:
    return int(time.time() * 1000)


class CoordinatorRuntime:
    """Runs one source's core on the host's event loop. Every step (a record, a tick,
    an async result) takes the step lock, so the core's output reaches Kafka in the
    order the core produced it (cseq order)."""

    def __init__(
        self,
        core: CoordinatorCore[Any],
        readers_topic: str,
        dead_letter_topic: str,
        send: Sender,
    ) -> None:
        self.core = core
        self.readers_topic = readers_topic
        self.dead_letter_topic = dead_letter_topic
        self._send = send
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.dead_letters = 0
        self.records_in = 0
        self.records_out = 0

    async def start(self) -> None:
        async with self._lock:
            await self._carry_out(self.core.start(now_ms()))

    async def on_record(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.records_in += 1
        try:
            env = decode(value, Direction.TO_COORDINATOR)
        except DecodeError as exc:
            await self._dead_letter(DeadLetter(topic, partition, offset, key, value, exc.kind.value, exc.detail))
            return
        async with self._lock:
            try:
                effects = self.core.on_message(env, offset, now_ms())
            except Exception as exc:  # a bug must cost one record, not the coordinator
                log.exception("internal error on %s[%d]@%d", topic, partition, offset)
                self.core.metrics.counter("internal_errors")
                await self._dead_letter(DeadLetter(topic, partition, offset, key, value, "internal-error", repr(exc)))
                return
            if effects.rejection is not None:
                await self._dead_letter(DeadLetter(topic, partition, offset, key, value, "rejected", effects.rejection))
            await self._carry_out(effects)

    async def on_tick(self) -> None:
        async with self._lock:
            await self._carry_out(self.core.tick(now_ms()))

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        self.core.enumerator.close()

    async def _dead_letter(self, letter: DeadLetter) -> None:
        letter.log()
        self.dead_letters += 1
        self.core.metrics.counter("dead_letters")
        await self._send(
            [OutgoingRecord(self.dead_letter_topic, 0, letter.key, letter.value, letter.headers())]
        )

    async def _carry_out(self, effects: Effects) -> None:
        if effects.messages:
            records = [
                OutgoingRecord(self.readers_topic, env.subtask, encode_key(env.subtask), encode(env))
                for env in effects.messages
            ]
            self.records_out += len(records)
            await self._send(records)
        for call in effects.async_calls:
            self._spawn(call)

    def _spawn(self, call: AsyncCall) -> None:
        task = asyncio.get_running_loop().create_task(self._run_async_call(call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_async_call(self, call: AsyncCall) -> None:
        """call_async: the callable runs in a worker thread, its handler on the core's loop."""
        delay_ms = call.initial_delay_ms
        while not self._closed:
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
            result: Any = None
            error: BaseException | None = None
            try:
                result = await asyncio.get_running_loop().run_in_executor(None, call.fn)
            except Exception as exc:  # handed to the enumerator's handler, as in Flink
                error = exc
            async with self._lock:
                await self._carry_out(self.core.on_async_result(call.call_id, result, error, now_ms()))
            if call.period_ms <= 0:
                self.core.forget_async_call(call.call_id)
                return
            delay_ms = call.period_ms
