"""The protocol's timing defaults, written once: the coordinator and every reader host
(standalone, Spark) import them, so they agree by construction, not because two literals
happen to match.

- ``SESSION_TIMEOUT_MS``: a reader attempt the coordinator has not heard from for this
  long has failed (docs/protocol.md, semantics 3); a reader that could send nothing for
  as long fences itself;
- ``HEARTBEAT_INTERVAL_MS``: how often a reader says it is alive; well below the session
  timeout, so that a few lost heartbeats fail nobody.
"""

from __future__ import annotations

SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 1_000
