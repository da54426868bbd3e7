"""``ChannelContract``: what every ``ControlChannel`` must do, written once.

A subclass provides ``harness``: the channel under test plus a stand-in for the
coordinator (it writes to the readers topic and reads the inbox and the
dead-letter topic), on its own transport. test_memory_channel.py runs the suite
on the in-memory broker (milliseconds), test_kafka_channel.py on real Kafka.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

from core_harness import body

from sluicegate.protocol.codec import decode, encode, encode_key
from sluicegate.protocol.dead_letter import DeadLetter
from sluicegate.protocol.messages import (
    AddSplits,
    Direction,
    Heartbeat,
    ReaderRegistered,
    envelope,
)
from sluicegate.protocol.topics import ControlTopics
from sluicegate.reader.channel import ControlChannel, Inbound
from sluicegate.reader.protocol import Fenced, ReaderProtocol, Registered, SplitsAdded

SUBTASKS = 3


class ChannelHarness(ABC):
    """The transport under test, seen from both ends."""

    topics: ControlTopics

    @abstractmethod
    def channel(self) -> ControlChannel: ...

    @abstractmethod
    async def to_reader(self, subtask: int, value: bytes) -> None:
        """The coordinator writes a record to ``subtask``'s partition of the readers topic."""

    @abstractmethod
    async def inbox(self) -> list[tuple[bytes | None, bytes | None]]:
        """Everything in the coordinator's inbox (key, value), in order."""

    @abstractmethod
    async def dead_letters(self) -> list[tuple[dict[str, bytes], bytes | None]]:
        """Everything in the dead-letter topic (headers, value)."""

    @abstractmethod
    async def break_sends(self, channel: ControlChannel) -> None:
        """Make every later send of ``channel`` fail (the broker cannot be reached)."""


def to_reader_env(
    topics: ControlTopics, subtask: int, body: object, attempt: int | None = None, epoch: int = 1
) -> bytes:
    source = topics.coordinator.split(".")[1]
    return encode(envelope(body, source=source, subtask=subtask, attempt=attempt, epoch=epoch, ts=1))  # type: ignore[arg-type]


async def letters_until(harness: ChannelHarness, count: int) -> list[tuple[dict[str, bytes], bytes | None]]:
    """The dead-letter topic once it holds ``count`` letters (sends may still be on their way)."""
    letters: list[tuple[dict[str, bytes], bytes | None]] = []
    for _ in range(100):
        letters = await harness.dead_letters()
        if len(letters) >= count:
            return letters
        await asyncio.sleep(0.1)
    raise AssertionError(f"{len(letters)} dead letters, not {count}")


async def poll_until(channel: ControlChannel, count: int, subtask: int | None = None) -> list[Inbound]:
    got: list[Inbound] = []
    for _ in range(100):
        got += await channel.poll(timeout_ms=100, subtask=subtask)
        if len(got) >= count:
            break
    return got


def split(k: int) -> dict[str, object]:
    return {"split_id": f"s-{k}", "start": 0, "end": 10, "position": 0}


class ChannelContract:
    """Mix in with a ``harness`` fixture (an async generator fixture yielding a ChannelHarness)."""

    async def test_a_registration_sees_only_what_comes_after_the_capture(self, harness: ChannelHarness) -> None:
        channel = harness.channel()
        await channel.open(range(SUBTASKS))
        await harness.to_reader(1, to_reader_env(harness.topics, 1, AddSplits(seq=1, splits=[split(0)]), attempt=1))
        await channel.capture([1])
        await harness.to_reader(1, to_reader_env(harness.topics, 1, AddSplits(seq=2, splits=[split(1)]), attempt=1))
        got = await poll_until(channel, 1, subtask=1)
        assert [body(r.env, AddSplits).seq for r in got] == [2]
        assert got[0].subtask == 1
        await channel.close()

    async def test_records_arrive_in_order_and_for_their_subtask(self, harness: ChannelHarness) -> None:
        channel = harness.channel()
        await channel.open(range(SUBTASKS))
        await channel.capture(range(SUBTASKS))
        for seq in range(1, 6):
            for s in range(SUBTASKS):
                add = AddSplits(seq=seq, splits=[split(seq * 10 + s)])
                await harness.to_reader(s, to_reader_env(harness.topics, s, add, attempt=1))
        got = await poll_until(channel, 5 * SUBTASKS)
        for s in range(SUBTASKS):
            mine = [r for r in got if r.subtask == s]
            assert [body(r.env, AddSplits).seq for r in mine] == [1, 2, 3, 4, 5]
            assert all(r.env.subtask == s and r.raw.partition == s for r in mine)
        await channel.close()

    async def test_a_malformed_record_is_dead_lettered_and_skipped(self, harness: ChannelHarness) -> None:
        channel = harness.channel()
        await channel.open([0])
        await channel.capture([0])
        await harness.to_reader(0, b"{not json")
        await harness.to_reader(0, to_reader_env(harness.topics, 0, AddSplits(seq=1, splits=[split(0)]), attempt=1))
        got = await poll_until(channel, 1, subtask=0)
        assert [r.env.type for r in got] == ["AddSplits"]
        assert channel.dead_letters == 1
        headers, value = (await letters_until(harness, 1))[0]
        assert value == b"{not json"
        assert headers["sluicegate.origin.topic"] == harness.topics.readers.encode()
        assert headers["sluicegate.origin.partition"] == b"0"
        assert headers["sluicegate.error.kind"] == b"malformed"
        await channel.close()

    async def test_bad_input_found_again_by_a_restarted_planner_is_dead_lettered_once(
        self, harness: ChannelHarness
    ) -> None:
        def bad_file(path: str, position: int = 0) -> DeadLetter:
            return DeadLetter(path, -1, position, path.encode(), b"torn", "bad-file", "torn")

        first = harness.channel()
        await first.open([0])
        await first.dead_letter_once(bad_file("/in/a.parquet"))
        await first.dead_letter_once(bad_file("/in/a.parquet"))  # the same planner again
        await letters_until(harness, 1)
        await first.close()
        restarted = harness.channel()
        await restarted.open([0])
        await restarted.dead_letter_once(bad_file("/in/a.parquet"))
        await restarted.dead_letter_once(bad_file("/in/a.parquet", position=7))  # other input
        await restarted.dead_letter_once(bad_file("/in/b.parquet"))
        letters = await letters_until(harness, 3)
        origins = [(h["sluicegate.origin.topic"], h["sluicegate.origin.offset"]) for h, _ in letters]
        assert origins == [(b"/in/a.parquet", b"0"), (b"/in/a.parquet", b"7"), (b"/in/b.parquet", b"0")]
        assert (first.dead_letters, restarted.dead_letters) == (1, 2)
        await restarted.close()

    async def test_a_send_reaches_the_inbox_keyed_by_subtask_and_counts_as_contact(
        self, harness: ChannelHarness
    ) -> None:
        channel = harness.channel()
        await channel.open([2])
        before = channel.last_contact_s
        await asyncio.sleep(0.01)
        env = envelope(Heartbeat(watermark=5, idle=False), source=_source(harness), subtask=2, attempt=1, epoch=1, ts=1)
        assert await channel.send(env)
        assert channel.last_contact_s > before
        inbox = await harness.inbox()
        assert inbox[-1][0] == encode_key(2)
        assert decode(inbox[-1][1] or b"", Direction.TO_COORDINATOR).body == Heartbeat(watermark=5, idle=False)
        await channel.close()

    async def test_a_failed_send_says_so_and_is_no_contact(self, harness: ChannelHarness) -> None:
        channel = harness.channel()
        await channel.open([0])
        await harness.break_sends(channel)
        before = channel.last_contact_s
        env = envelope(
            Heartbeat(watermark=None, idle=True), source=_source(harness), subtask=0, attempt=1, epoch=1, ts=1
        )
        assert not await channel.send(env)
        assert channel.last_contact_s == before
        await asyncio.sleep(0.05)
        assert channel.silent_for_s() >= 0.05
        await channel.close()

    async def test_a_protocol_over_the_channel_registers_and_is_fenced(self, harness: ChannelHarness) -> None:
        """The reader protocol on top: register at the captured end, get splits, then be
        fenced by another incarnation's registration, all through this transport."""
        channel = harness.channel()
        await channel.open([0])
        protocol = ReaderProtocol(_source(harness), 0, location="test:1", reassign_on_recovery=True)
        await channel.capture([0])
        registration = protocol.begin_registration()
        assert await channel.send(protocol.envelope(registration, 1))
        bodies = [
            ReaderRegistered(incarnation=registration.incarnation, attempt=1, dropped_split_ids=[]),
            AddSplits(seq=1, splits=[split(0), split(1)]),
            ReaderRegistered(incarnation="someone-else", attempt=2, dropped_split_ids=[]),
        ]
        for message in bodies:
            await harness.to_reader(
                0,
                to_reader_env(harness.topics, 0, message, attempt=None if isinstance(message, ReaderRegistered) else 1),
            )
        outcomes = [protocol.on_message(r.env) for r in await poll_until(channel, 3, subtask=0)]
        assert isinstance(outcomes[0], Registered) and outcomes[0].attempt == 1
        assert isinstance(outcomes[1], SplitsAdded) and [s["split_id"] for s in outcomes[1].splits] == ["s-0", "s-1"]
        assert isinstance(outcomes[2], Fenced) and "someone-else" in outcomes[2].reason
        assert not protocol.owned
        inbox = [decode(v or b"", Direction.TO_COORDINATOR) for _, v in await harness.inbox()]
        assert [e.type for e in inbox] == ["ReaderRegistration"]
        await channel.close()


def _source(harness: ChannelHarness) -> str:
    return harness.topics.coordinator.split(".")[1]


__all__ = ["ChannelContract", "ChannelHarness"]
