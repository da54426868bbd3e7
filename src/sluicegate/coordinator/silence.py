"""When a standby may take over a source early: the pure silence watch.

The active coordinator of a source commits at least every ``liveness_interval_ms``
(a heartbeat commit when it has nothing else to commit), and every commit writes
the source's ``meta`` state record, so the end offset of its state topic moves (the
log end offset: records of a transaction still being written count, so a commit of
seconds is not silence). A standby samples that offset; once it has seen it move (someone is
active) and then seen it stand still for ``silence_ms``, the active coordinator is
taken for dead and the standby takes over by starting the source's transactional
producer, which fences the silent one. Safety does not rest on this guess: a
coordinator that was only slow is fenced and steps down (docs/architecture.md).

Never having seen the offset move is not silence for a deployed standby: a source
nobody ran while this worker watched (a cold start, a fresh standby) is left to the
Faust assignment. A coordinator that starts itself where the source is read
(embedded.py) has no Faust assignment to wait for: its watch counts from its first
sample (``from_first_sample``), so a source nobody commits to is taken over too.

A step of the core can take longer than the silence (a million splits: seconds). It runs
off the event loop (step_thread.py), and meanwhile the runner re-commits the state it last
committed every liveness interval (``reaffirm_due``); the commit of what such a step
sends (a hundred megabytes of AddSplits) carries that ``meta`` again every megabyte
(source_runner.py ``with_keepalives``). Either way the offset moves, and standbys wait.

A commit can take longer than the silence too, with nothing to write: a loaded broker
kept a transaction of 21 state records waiting 4 s before it took the first one (64
readers and both coordinators on two cores), and a standby took over from a coordinator
that was only waiting. No transaction can show life while the broker holds it, so the
runner then writes a tombstone of a part nobody writes (``alive``) outside it, every
liveness interval (``mark_due``): the offset moves, no state changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

MIN_SILENCE_MS = 500
MAX_SILENCE_MS = 60_000
LIVENESS_FRACTION = 4
"""The active coordinator commits at least every silence / 4, so that a standby sees
three or four commits missing, not one, before it takes over."""


LONGEST_STEP_S = 120.0
"""A core step that has run this long is taken for a stall (a loop in an enumerator, say):
the active coordinator stops re-affirming its state, and a standby takes over after the
silence. A million splits make steps of seconds, not minutes."""


def liveness_interval_ms(silence_ms: int) -> int:
    """The longest an active coordinator may go without a commit when standbys watch
    with ``silence_ms``."""
    return max(1, silence_ms // LIVENESS_FRACTION)


def reaffirm_due(step_running_s: float, since_commit_s: float, liveness_interval_s: float) -> bool:
    """Whether an active coordinator in the middle of a step re-commits its last committed
    state now, so that standbys see its state topic move while the step keeps it from
    committing: a step is running, no commit for a liveness interval, and the step is not
    yet taken for a stall (LONGEST_STEP_S). SIGSTOP stops the re-affirming with the rest
    of the process, so a frozen coordinator is still taken over after the silence."""
    return 0 < step_running_s <= LONGEST_STEP_S and since_commit_s >= liveness_interval_s


LONGEST_COMMIT_S = 60.0
"""A transaction in flight this long is taken for a stall: the runner stops marking, and a
standby takes over after the silence. It is the transaction timeout (aiokafka's default,
which the coordinator keeps), after which the broker aborts the transaction anyway."""


def mark_due(commit_running_s: float, since_moved_s: float, liveness_interval_s: float) -> bool:
    """Whether an active coordinator whose transaction is still in flight marks itself alive
    now (a tombstone outside the transaction), ``since_moved_s`` after it last moved the
    state topic (a commit or a mark): the transaction has waited a liveness interval (a
    heartbeat commit begins a whole interval after the last one, and one the broker takes
    at once needs no mark), nothing moved for an interval, and the transaction is not yet
    taken for a stall (LONGEST_COMMIT_S). The topic then moves about every two
    intervals, half the silence. Like ``reaffirm_due``, it stops under SIGSTOP."""
    return liveness_interval_s <= commit_running_s <= LONGEST_COMMIT_S and since_moved_s >= liveness_interval_s


def start_mark_due(starting_s: float, since_moved_s: float, liveness_interval_s: float) -> bool:
    """Whether a coordinator that has fenced its predecessor and is still starting (reading
    and restoring the source's state, before its first commit) marks itself alive now: at
    once, and then every liveness interval. Restoring a million splits reads and builds for
    seconds, and a successor silent that long was taken over in turn by the worker it had
    just fenced. A start-up past LONGEST_COMMIT_S is taken for a stall."""
    return starting_s <= LONGEST_COMMIT_S and since_moved_s >= liveness_interval_s


class Verdict(enum.Enum):
    WAIT = "wait"
    """Nothing seen yet, or the active coordinator committed recently."""
    TAKE_OVER = "take-over"


@dataclass
class SilenceWatch:
    """One source's state topic as one standby sees it. Times are monotonic seconds."""

    silence_s: float
    from_first_sample: bool = False
    """Count silence from the first sample, as if the offset had just moved there."""
    last_offset: int | None = None
    last_change_s: float | None = None
    """When the offset was last seen to move (None: never, since the watch began)."""
    last_sample_s: float | None = None
    """When the offset was last sampled. Silence is measured between samples, so a
    standby that cannot reach the broker, or was itself paused, sees no silence."""

    def observe(self, offset: int, now_s: float) -> None:
        """The state topic's end offset, sampled at ``now_s``. After a gap in the
        samples longer than the silence (the broker was down, or this process stood still)
        the silence starts again: an active coordinator cut off from the broker as long was
        silent too, and gets a whole silence to commit again before anyone takes over."""
        moved = self.last_offset is not None and offset != self.last_offset
        first = self.last_offset is None and self.from_first_sample
        away = self.last_sample_s is not None and now_s - self.last_sample_s >= self.silence_s
        if moved or first or (away and self.last_change_s is not None):
            self.last_change_s = now_s
        self.last_offset = offset
        self.last_sample_s = now_s

    def silent_for_s(self) -> float:
        """How long the offset stood still, from the sample that saw it move to the latest."""
        if self.last_change_s is None or self.last_sample_s is None:
            return 0.0
        return self.last_sample_s - self.last_change_s

    def verdict(self) -> Verdict:
        if self.last_change_s is None or self.silent_for_s() < self.silence_s:
            return Verdict.WAIT
        return Verdict.TAKE_OVER

    def restart(self) -> None:
        """Forget what was seen: this worker ran the source itself meanwhile (its own
        commits prove nothing about anyone else), or just took it over."""
        self.last_offset = None
        self.last_change_s = None
        self.last_sample_s = None
