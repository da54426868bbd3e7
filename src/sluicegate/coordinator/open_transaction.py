"""A transaction held open on the coordinator's inbox, and how the coordinator ends it.

An open transaction holds the inbox at its first record (the last stable offset): every
record after it waits with it, the other readers' heartbeats, acks, registrations and
split requests included, and the tick gate holds time back meanwhile (tick_gate.py). A
reader killed or paused between sending its checkpoint's ack and committing leaves one
open until the broker aborts it at the reader's transaction timeout (60 s, plus the
broker's cleanup interval of up to 10 s): that long, nothing of the source is coordinated.

So once the inbox has stood blocked at the same stable offset for a session timeout, the
coordinator ends the transaction itself: the record at the stable offset is the
transaction's first, its key names the subtask, and fencing that subtask's transactional
id (``CoordinatorLog.fence_reader``, as for a silent reader) makes the broker abort it. A
live reader would have committed long before; if it was only slow, its commit fails and it
restores its last checkpoint, which is always safe. The core is told of the fence
(``CoordinatorCore.open_transaction_ended``: a registration of the subtask soon after is
told to renew its producer) but fails nobody for it: it reads on and decides about the
reader from what it finds, as for any reader (the reader's own heartbeats, if it is alive,
were behind the transaction too).

The hold is timed from the broker's answers, not from the inbox consumer's figures: those
are the last fetch's, and they stand still while the broker is away, when the holder cannot
commit either (a reader keeps its transaction through an outage, docs/deploy.md). So while
the figures say blocked, the coordinator asks the broker for the stable offset once a
second (``stable_end``); the hold counts from the first answer at that offset, and an
unanswered question starts it over. After an outage the holder has a session timeout to
commit.

A record at the stable offset whose key is not a subtask's (something else writes to the
inbox in transactions) is left alone, and the tick gate's longer deferral applies.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sluicegate.coordinator.log import CoordinatorLog, ReaderFenceRefusedError
from sluicegate.protocol.codec import decode_key
from sluicegate.protocol.names import reader_transactional_id

log = logging.getLogger("sluicegate.coordinator")


CHECK_INTERVAL_S = 1.0
"""How often the broker is asked for the stable offset while the inbox looks blocked."""


@dataclass
class OpenTransactionWatch:
    """When to end the transaction holding the inbox. Pure: the runner gives it the time,
    what the inbox consumer's figures say (``wants_check``) and the broker's answers
    (``checked``)."""

    hold_limit_s: float
    _held_at: int | None = None
    _held_since_s: float = 0.0
    _last_check_s: float | None = None
    _last_end_s: float | None = None

    def wants_check(self, blocked_at: int | None, now_s: float) -> bool:
        """Whether to ask the broker now: the figures say blocked at ``blocked_at`` (None:
        not blocked, and the hold is over) and the last question is a second old."""
        if blocked_at is None:
            self._held_at = None
            return False
        if self._last_check_s is not None and now_s - self._last_check_s < CHECK_INTERVAL_S:
            return False
        self._last_check_s = now_s
        return True

    def held_for_s(self, now_s: float) -> float:
        """How long the broker has answered the same stable offset (0: not held)."""
        return 0.0 if self._held_at is None else now_s - self._held_since_s

    def checked(self, stable: int | None, now_s: float) -> int | None:
        """The broker's stable offset (None: it did not answer); returns the offset whose
        transaction to end now, once it has held the inbox for ``hold_limit_s`` (then again
        each ``hold_limit_s`` while it still does: the fence failed, or nothing ends it)."""
        if stable is None or stable != self._held_at:
            self._held_at, self._held_since_s = stable, now_s
            return None
        if now_s - self._held_since_s < self.hold_limit_s:
            return None
        if self._last_end_s is not None and now_s - self._last_end_s < self.hold_limit_s:
            return None
        self._last_end_s = now_s
        return stable


async def end_open_transaction(
    coordinator_log: CoordinatorLog, namespace: str, source: str, stable: int, held_s: float
) -> int | None:
    """Fence the transactional id of the reader whose transaction holds the inbox at
    ``stable``; the subtask fenced, or None. Never raises: what went wrong is logged, and the
    watch tries again later."""
    try:
        key = await coordinator_log.key_written_at(stable)
    except Exception as exc:
        log.warning("source %s: could not read the record holding the inbox at offset %d (%r)", source, stable, exc)
        return None
    subtask = decode_key(key)
    if subtask is None:
        log.warning(
            "source %s: the inbox has been held at offset %d for %.0f s by a transaction that is not a reader's "
            "(key %r): waiting for the broker to abort it",
            source,
            stable,
            held_s,
            key,
        )
        return None
    transactional_id = reader_transactional_id(namespace, source, subtask)
    log.warning(
        "source %s: the inbox has been held at offset %d for %.0f s by an open transaction of subtask %d's "
        "reader: fencing %s to end it",
        source,
        stable,
        held_s,
        subtask,
        transactional_id,
    )
    try:
        await coordinator_log.fence_reader(transactional_id)
    except ReaderFenceRefusedError as exc:
        log.error(
            "source %s: could not end the transaction holding the inbox (%s): nothing of the source is "
            "coordinated until the broker aborts it. Allow the coordinator's principal WRITE on transactional "
            "ids prefixed %s.%s.reader- (sluicegate acls)",
            source,
            exc,
            namespace,
            source,
        )
        return None
    except Exception as exc:
        log.warning("source %s: fencing %s failed (%r); trying again later", source, transactional_id, exc)
        return None
    log.info("source %s: ended the transaction that held the inbox at offset %d", source, stable)
    return subtask
