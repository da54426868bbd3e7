"""The dead-letter rule: a bad control record is counted, logged with its
topic/partition/offset, copied to NS.S.dead-letter, and skipped."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger("sluicegate.dead_letter")

LetterIdentity = tuple[str, str, str, str]
"""What a letter is about: kind, origin topic (or file), partition, offset (or position)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record to copy to the dead-letter topic, with why and where it came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    kind: str
    reason: str

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            ("sluicegate.error.kind", self.kind.encode()),
            ("sluicegate.error.reason", self.reason.encode()[:2000]),
            ("sluicegate.origin.topic", self.topic.encode()),
            ("sluicegate.origin.partition", str(self.partition).encode()),
            ("sluicegate.origin.offset", str(self.offset).encode()),
        ]

    def identity(self) -> LetterIdentity:
        return (self.kind, self.topic, str(self.partition), str(self.offset))

    @staticmethod
    def identity_in(headers: Mapping[str, bytes]) -> LetterIdentity:
        """The identity of a letter already in the topic, from its headers."""

        def header(name: str) -> str:
            return headers.get(f"sluicegate.{name}", b"").decode(errors="replace")

        return (header("error.kind"), header("origin.topic"), header("origin.partition"), header("origin.offset"))

    def log(self) -> None:
        log.warning(
            "dead-lettered record %s[%d]@%d (%s): %s", self.topic, self.partition, self.offset, self.kind, self.reason
        )
