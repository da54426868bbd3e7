"""When the coordinator may let time pass in its core: a pure rule over what the inbox
consumer knows (its position, the last stable offset, the high watermark).

A tick times out readers whose heartbeats the core has not seen. The heartbeats are in the
inbox, so a tick is held back while the inbox has records the core has not read:

- *unread*: records before the last stable offset not read yet (a slow step: 1,000,000
  splits handed out took 15 s and timed out every reader);
- *blocked*: nothing readable, but records past the last stable offset: an open
  transaction holds the partition, and every heartbeat behind it waits with it. A reader
  SIGKILLed between sending its checkpoint's ack and committing leaves its transaction
  open until the broker aborts it (the transaction timeout, 60 s, plus the broker's
  cleanup interval): ticking meanwhile failed every other reader.

A coordinator held back for ``max_deferral_s`` ticks anyway, so a dead reader is not kept
for ever; one blocked for a session timeout ends the transaction itself first
(open_transaction.py). Brief transactions of live readers (a checkpoint's ack and commit)
hold a tick back by one tick interval at most.
"""

from __future__ import annotations

MAX_TICK_DEFERRAL_S = 60.0


class TickGate:
    def __init__(self, max_deferral_s: float = MAX_TICK_DEFERRAL_S) -> None:
        self.max_deferral_s = max_deferral_s
        self._held_since: float | None = None

    def may_tick(self, position: int, stable: int | None, high: int | None, now_s: float) -> bool:
        unread = stable is not None and position < stable
        blocked = blocked_at(position, stable, high) is not None
        if not (unread or blocked):
            self._held_since = None
            return True
        if self._held_since is None:
            self._held_since = now_s
        return now_s - self._held_since >= self.max_deferral_s


def blocked_at(position: int, stable: int | None, high: int | None) -> int | None:
    """The last stable offset, where everything up to it is read and records lie past it:
    an open transaction begins there and holds the rest back. None: the inbox is not blocked."""
    if stable is not None and high is not None and position >= stable and high > stable:
        return stable
    return None
