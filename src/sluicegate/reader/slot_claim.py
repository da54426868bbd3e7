"""Getting a subtask from the coordinator, as a consumer group hands out member ids
(``sluicegate reader --subtask auto``, protocol v3 "Slots and duplicates").

A reader with no subtask listens to every partition of ``NS.S.readers`` from its
current end, sends ``SlotRequest`` (envelope subtask -1) and waits for the answer
that names its incarnation: ``SlotGranted`` on the granted subtask's partition, or
``RegistrationRefused``. The slot is then held for it for the coordinator's
session timeout, in which the host fences zombies of the subtask (its
transactional id), restores the subtask's checkpoint and registers as any reader
of that subtask does. ``name`` (like Kafka's ``group.instance.id``) brings a
restarted process back to the slot it had.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from sluicegate.protocol.messages import SOURCE_WIDE, RegistrationRefused, SlotGranted, SlotRequest, envelope
from sluicegate.reader.channel import ControlChannel

log = logging.getLogger("sluicegate.reader")

MAX_SUBTASKS = 100_000
"""The coordinator's upper bound on max_parallelism; the channel keeps the partitions that exist."""
RESEND_INTERVAL_S = 10.0


class NoFreeSlot(RuntimeError):
    """The coordinator refused the SlotRequest: every slot of the source is taken."""


@dataclass(frozen=True)
class SlotClaim:
    subtask: int
    incarnation: str
    waited_s: float


async def claim_slot(
    channel: ControlChannel,
    source: str,
    *,
    location: str,
    name: str | None = None,
    resend_interval_s: float = RESEND_INTERVAL_S,
) -> SlotClaim:
    """Ask the coordinator of ``source`` for a subtask over ``channel`` (opened here, on
    every partition of the readers topic; the caller closes it). Raises NoFreeSlot."""
    partitions = await channel.open(range(MAX_SUBTASKS))
    await channel.capture(range(partitions[channel.topics.readers]))
    incarnation = str(uuid.uuid4())
    request = envelope(
        SlotRequest(incarnation=incarnation, location=location, name=name),
        source=source,
        subtask=SOURCE_WIDE,
        attempt=None,
        epoch=0,
        ts=int(time.time() * 1000),
    )
    started = time.monotonic()
    sent_at: float | None = None
    while True:
        if sent_at is None or time.monotonic() - sent_at >= resend_interval_s:
            if sent_at is not None:
                log.info("no answer to the slot request of %s after %.0f s; asking again", source, resend_interval_s)
            if await channel.send(request, wait=True):
                sent_at = time.monotonic()
        for record in await channel.poll(200):
            body = record.env.body
            if isinstance(body, SlotGranted) and body.incarnation == incarnation:
                return SlotClaim(record.subtask, incarnation, time.monotonic() - started)
            if isinstance(body, RegistrationRefused) and body.incarnation == incarnation:
                raise NoFreeSlot(f"no slot of {source} for this reader: {body.reason}")
