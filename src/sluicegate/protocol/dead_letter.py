"""The dead-letter rule: a bad control record is counted, logged with its
topic/partition/offset, copied to NS.S.dead-letter, and skipped."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("sluicegate.dead_letter")


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

    def log(self) -> None:
        log.warning(
            "dead-lettered record %s[%d]@%d (%s): %s", self.topic, self.partition, self.offset, self.kind, self.reason
        )
