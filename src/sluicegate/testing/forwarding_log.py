"""A coordinator log that hands every call to another one: the base of the test logs
that watch or pace a real log (the memory run's turn gate, the integration tests'
recorder) and override only the calls they watch."""

from __future__ import annotations

from collections.abc import Sequence

from sluicegate.coordinator.log import CoordinatorLog, InboxPosition, InboxRecord, OutgoingRecord, StateRecord


class ForwardingLog(CoordinatorLog):
    def __init__(self, inner: CoordinatorLog) -> None:
        self.inner = inner

    async def fence(self) -> None:
        await self.inner.fence()

    async def restore(self) -> list[tuple[bytes | None, bytes | None]]:
        return await self.inner.restore()

    async def read_from(self, offset: int | None) -> None:
        await self.inner.read_from(offset)

    async def fetch(self, timeout_ms: int, max_records: int) -> list[InboxRecord]:
        return await self.inner.fetch(timeout_ms, max_records)

    async def behind(self) -> InboxPosition:
        return await self.inner.behind()

    async def stable_end(self) -> int:
        return await self.inner.stable_end()

    async def commit(self, records: Sequence[OutgoingRecord], state: Sequence[StateRecord]) -> None:
        await self.inner.commit(records, state)

    async def fence_reader(self, transactional_id: str) -> None:
        await self.inner.fence_reader(transactional_id)

    async def key_written_at(self, offset: int) -> bytes | None:
        return await self.inner.key_written_at(offset)

    async def mark_alive(self, key: bytes) -> None:
        await self.inner.mark_alive(key)

    async def close(self) -> None:
        await self.inner.close()
