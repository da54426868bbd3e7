"""The reader side's link to a source's control topics, under every reader host.

A ``ControlChannel`` serves one or more reader subtasks of one source (the
standalone host: one; the Spark driver: all of the query's). It owns what both
hosts need in the same way:

- opening: wait for the control topics (readers never create them) and start the
  clients; the partition counts come back so the host can check its subtasks;
- registration at the captured end offset: ``capture(subtask)`` seeks the
  subtask's partition of ``NS.S.readers`` to its read_committed end *before* the
  host sends ``ReaderRegistration``, so nothing addressed to the new attempt is
  missed and nothing older is seen;
- intake: ``poll`` decodes records in partition order; a record that does not
  decode is dead-lettered (logged, counted, copied to ``NS.S.dead-letter``) and
  skipped; ``reject`` dead-letters one the host could not apply; ``dead_letter_once``
  copies bad input a planner found unless the topic has it already (a restarted planner
  finds it again);
- sends with contact tracking: ``send`` returns whether the coordinator's inbox
  has the envelope, and ``last_contact_s`` is when that was last true, from which
  a host decides it lost contact and fences itself.

Two implementations: ``KafkaControlChannel`` (sluicegate.reader.kafka_channel,
aiokafka) and ``MemoryControlChannel`` (reader/memory_channel.py, for tests). One
contract suite (tests/contract/) runs against both. Transactions (a standalone
reader's checkpoint commits, producer fencing) are Kafka only and stay in the
host.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sluicegate.protocol.codec import DecodeError, decode, encode, encode_key
from sluicegate.protocol.dead_letter import DeadLetter, LetterIdentity
from sluicegate.protocol.messages import Direction, Envelope
from sluicegate.protocol.topics import ControlTopics

log = logging.getLogger("sluicegate.reader")


@dataclass(frozen=True)
class RawRecord:
    """A record as the readers topic holds it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Inbound:
    """A decoded coordinator record for ``subtask`` (its partition of the readers topic)."""

    subtask: int
    env: Envelope
    raw: RawRecord


class ControlChannel(ABC):
    def __init__(self, topics: ControlTopics) -> None:
        self.topics = topics
        self.last_contact_s = time.monotonic()
        """When the coordinator's inbox last surely got something from us (monotonic s)."""
        self.dead_letters = 0
        self._lettered: set[LetterIdentity] | None = None
        """The identities of the letters in the dead-letter topic (read on the first
        ``dead_letter_once``), and of those sent since."""

    # -- what a host calls ---------------------------------------------------------

    @abstractmethod
    async def open(self, subtasks: Sequence[int], extra_topics: Sequence[str] = ()) -> dict[str, int]:
        """Wait for the control topics (and ``extra_topics``), start the clients and
        listen to the subtasks' partitions of the readers topic. Returns each topic's
        partition count."""

    @abstractmethod
    async def capture(self, subtasks: Iterable[int]) -> None:
        """Move each subtask's read position to the current end of its partition (one
        request for all of them: a claim captures every partition)."""

    async def send(self, env: Envelope, wait: bool = True) -> bool:
        """Send ``env`` to the coordinator's inbox (keyed by its subtask). With ``wait``,
        True once the inbox has it; without, True once it is on its way (contact is
        then noted on delivery). False (logged) when it could not be sent."""
        try:
            delivered = await self._send(self.topics.coordinator, encode_key(env.subtask), encode(env), wait)
        except Exception as exc:
            log.warning("could not send %s: %s", env.type, exc)
            return False
        if delivered:
            self.contact()
        return True

    async def poll(self, timeout_ms: int, subtask: int | None = None) -> list[Inbound]:
        """Decoded records for the subtasks (or one), in partition order; records that
        do not decode are dead-lettered and left out."""
        out: list[Inbound] = []
        for subtask_of, raw in await self._fetch(timeout_ms, subtask):
            try:
                env = decode(raw.value or b"", Direction.TO_READER)
            except DecodeError as exc:
                await self.reject(raw, exc.kind.value, exc.detail)
                continue
            out.append(Inbound(subtask_of, env, raw))
        return out

    async def reject(self, raw: RawRecord, kind: str, reason: str) -> None:
        """Dead-letter a record: logged where it came from, counted, copied."""
        letter = DeadLetter(
            topic=raw.topic,
            partition=raw.partition,
            offset=raw.offset,
            key=raw.key,
            value=raw.value,
            kind=kind,
            reason=reason,
        )
        await self.dead_letter(letter)

    async def dead_letter(self, letter: DeadLetter) -> None:
        """Count, log and copy a dead letter (a bad control record, or bad input a
        connector reader skipped)."""
        letter.log()
        self.dead_letters += 1
        try:
            await self._send(self.topics.dead_letter, letter.key, letter.value or b"", False, letter.headers())
        except Exception as exc:
            log.warning("could not copy the record to %s: %s", self.topics.dead_letter, exc)

    async def dead_letter_once(self, letter: DeadLetter) -> None:
        """``dead_letter``, unless the topic holds a letter about the same input already.

        For bad input found while planning, outside any transaction: a planner that
        restarts from an older checkpoint finds the same bad file again, and its letter
        must not be copied twice. The topic is read once per channel, on the first call,
        so a source without bad input never reads it."""
        if self._lettered is None:
            try:
                self._lettered = {DeadLetter.identity_in(h) for h in await self._letters_in_topic()}
            except Exception as exc:  # a letter twice is better than none, or a planner that stops
                log.warning("could not read %s (a letter may be copied twice): %s", self.topics.dead_letter, exc)
                self._lettered = set()
        if letter.identity() in self._lettered:
            log.info("already dead-lettered: %s (%s) at %d", letter.topic, letter.kind, letter.offset)
            return
        self._lettered.add(letter.identity())
        await self.dead_letter(letter)

    def contact(self) -> None:
        self.last_contact_s = time.monotonic()

    def silent_for_s(self) -> float:
        return time.monotonic() - self.last_contact_s

    @abstractmethod
    async def close(self) -> None: ...

    # -- what an implementation provides -----------------------------------------

    @abstractmethod
    async def _letters_in_topic(self) -> list[dict[str, bytes]]:
        """The headers of every committed record of the dead-letter topic."""

    @abstractmethod
    async def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        wait: bool,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> bool:
        """Produce one record; returns True when it is known to be delivered (``wait``)."""

    @abstractmethod
    async def _fetch(self, timeout_ms: int, subtask: int | None) -> list[tuple[int, RawRecord]]:
        """Raw records of the listened-to readers partitions (or of one), in order."""
