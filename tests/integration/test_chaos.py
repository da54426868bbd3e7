"""The chaos test: one bounded source read by 8 reader processes while its splits
are released over time, the active coordinator is SIGKILLed at 10 random instants
and reader processes at 12 random instants, all in one run, over real Kafka.

- Two coordinator workers share the source; a killed worker is started again at
  once, so there is always a standby to take over.
- A killed reader is started again after a random short delay with the same
  subtask; it restores its checkpoint and registers as a new attempt.
- Randomness is seeded: ``SLUICEGATE_CHAOS_SEED`` or a random seed, printed at the
  start, replays the same schedule (the instants and victims; the machine's timing
  still varies).

At the end: the audit of both control topics is clean (every split finished and
owned by nobody, no seq gap or reuse per subtask, epochs never go back), every
value of every split is in the readers' outputs at least once, and a value is
there twice only if a killed reader wrote it after its last checkpoint of that
split (the jsonl output is at-least-once). Sizes: 20,000 splits of 10 records,
released 125 every 500 ms while a coordinator is active; about 3-4 minutes on 2
cores.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from acks import acknowledged_splits
from local_http import free_port, wait_until
from processes import Proc, ProcessGroup
from test_takeover import (
    audit,
    audit_failure,
    check_epochs_and_seqs,
    coordinator_args,
    expected_values,
    health,
    readers_topic,
    registrations,
    serving_epochs,
)

from sluicegate.audit.kafka_source import read_control_topics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]

READERS = 8
SPLITS = 20_000  # the number, not scaled down
RECORDS_PER_SPLIT = 10
COORDINATOR_KILLS = 10
READER_KILLS = 12
OPTIONS = {
    "splits": str(SPLITS),
    "records_per_split": str(RECORDS_PER_SPLIT),
    # per reader: 8 x 300 records/s = 240 splits/s, a little below the release rate, so the
    # readers always have splits in progress (also while no coordinator is active) and a
    # killed reader has usually written records after its last checkpoint
    "rate": "300",
    "release_interval_ms": "500",
    "splits_per_release": "125",  # 250 splits/s while a coordinator is active: ~80 s of releases
}
READER_ARGS = ("--checkpoint-interval-ms", "1000")
SEED_ENV = "SLUICEGATE_CHAOS_SEED"


@dataclass
class Worker:
    proc: Proc
    port: int
    killed: bool = False


@dataclass
class ReaderRun:
    """One reader process (an incarnation of a subtask) and the file it wrote."""

    subtask: int
    proc: Proc
    output: Path
    killed: bool = False
    attempts: list[int] = field(default_factory=list)


class Chaos:
    def __init__(self, group: ProcessGroup, source: str, tmp_path: Path) -> None:
        self.group = group
        self.source = source
        self.tmp_path = tmp_path
        self.workers: list[Worker] = []
        self.runs: list[ReaderRun] = []
        self.current: dict[int, ReaderRun | None] = {}
        self.started = time.monotonic()
        self.timeline: list[str] = []

    def note(self, text: str) -> None:
        line = f"{time.monotonic() - self.started:7.1f} s  {text}"
        self.timeline.append(line)
        print(line, flush=True)

    # -- coordinators ----------------------------------------------------------------------

    def start_worker(self) -> Worker:
        port = free_port()
        name = f"worker-{len(self.workers)}"
        proc = self.group.start(name, coordinator_args(self.source, READERS, OPTIONS, "--web-port", str(port)))
        worker = Worker(proc, port)
        self.workers.append(worker)
        return worker

    def live_workers(self) -> list[Worker]:
        return [w for w in self.workers if not w.killed]

    def active_worker(self) -> Worker | None:
        for worker in self.live_workers():
            answer = health(worker.port)
            if answer is not None and self.source in answer["active_sources"]:
                return worker
        return None

    def kill_coordinator(self, wait_s: float = 40.0) -> None:
        deadline = time.monotonic() + wait_s
        worker = self.active_worker()
        while worker is None:
            self.check_processes()
            if time.monotonic() > deadline:
                logs = "\n\n".join(f"{w.proc.name}:\n{w.proc.tail(15)}" for w in self.live_workers())
                raise AssertionError(f"no active coordinator for {wait_s} s:\n{logs}")
            time.sleep(0.2)
            worker = self.active_worker()
        served = serving_epochs(worker.proc, self.source)
        worker.proc.kill()
        worker.killed = True
        replacement = self.start_worker()
        # A worker the group just gave the source may still be starting (fencing, restoring):
        # killed then, it leaves no epoch of its own, and that is part of the chaos too.
        at = f"serving epoch {served[-1]}" if served else "still starting (no epoch served yet)"
        self.note(f"SIGKILL coordinator {worker.proc.name}, {at}; started {replacement.proc.name}")

    # -- readers --------------------------------------------------------------------------

    def start_reader(self, subtask: int) -> ReaderRun:
        output = self.tmp_path / f"out-{subtask}-{len(self.group.procs)}.jsonl"  # as the process's log
        proc = self.group.reader(self.source, subtask, OPTIONS, output, *READER_ARGS)
        run = ReaderRun(subtask, proc, output)
        self.runs.append(run)
        self.current[subtask] = run
        return run

    def kill_reader(self, victim: int) -> int | None:
        """Kill subtask ``victim``'s process, or if it is down (waiting to restart) the next running one."""
        running = [k for k, run in self.current.items() if run is not None and run.proc.popen.poll() is None]
        if not running:
            return None
        subtask = min(running, key=lambda k: (k - victim) % READERS)
        run = self.current[subtask]
        assert run is not None
        run.proc.kill()
        run.killed = True
        self.current[subtask] = None
        self.note(f"SIGKILL reader {run.proc.name} (subtask {subtask})")
        return subtask

    # -- watching -----------------------------------------------------------------------

    def check_processes(self) -> None:
        """Fail at once if a process that nobody killed died (a reader may exit 0: it finished)."""
        for worker in self.live_workers():
            code = worker.proc.popen.poll()
            if code is not None:
                raise AssertionError(f"{worker.proc.name} exited with {code}:\n{worker.proc.tail()}")
        for run in self.current.values():
            if run is not None:
                code = run.proc.popen.poll()
                if code not in (None, 0):
                    raise AssertionError(f"{run.proc.name} exited with {code}:\n{run.proc.tail()}")

    def finished_readers(self) -> int:
        return sum(1 for run in self.current.values() if run is not None and run.proc.popen.poll() == 0)


def schedule(rng: random.Random) -> list[tuple[float, str, int, int]]:
    """(seconds after the readers registered, what, reader subtask, its restart delay in ms).

    Everything happens within 80 s: the readers cannot finish sooner (20,000 splits at 240
    splits/s are 83 s of reading, and the releases, 80 s of them, stop while no coordinator
    is active: each kill adds its takeover). The schedule used to reach 115 s, and a run
    whose readers kept up finished first (seed 129231577: the last restart was still pending
    when the readers were done). Kills stay at least 6.5 s apart, as before: 5.5 s left a
    successor killed before it sent anything, and its epoch was in no log."""
    events: list[tuple[float, str, int, int]] = []
    t = rng.uniform(2.0, 4.0)
    for _ in range(COORDINATOR_KILLS):
        events.append((t, "coordinator", 0, 0))
        t += 6.5 + rng.uniform(0.0, 1.5)  # about the takeover time, and a random part
    span = events[-1][0]
    for _ in range(READER_KILLS):
        events.append((rng.uniform(2.0, span), "reader", rng.randrange(READERS), int(rng.uniform(500, 3000))))
    return sorted(events)


def last_acks(inbox: list[tuple[int, bytes | None]]) -> dict[tuple[int, int], dict[str, int]]:
    """(subtask, attempt) -> {split_id: position} as that attempt's CheckpointAcks left them."""
    records: dict[tuple[int, int], list[tuple[str, Any]]] = defaultdict(list)
    for _, value in inbox:
        if value is None:
            continue
        env = orjson.loads(value)
        if env.get("attempt") is not None:
            records[(env["subtask"], env["attempt"])].append((env.get("type"), env.get("body") or {}))
    return {
        key: {sid: split["position"] for sid, split in acknowledged_splits(attempt).items()}
        for key, attempt in records.items()
    }


def test_chaos(kafka_bootstrap: str, unique_source: str, tmp_path: Path) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.randrange(2**32))
    print(f"chaos seed: {seed}")
    rng = random.Random(seed)
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    chaos = Chaos(group, source, tmp_path)
    try:
        chaos.start_worker()
        chaos.start_worker()
        wait_until(lambda: any(serving_epochs(w.proc, source) for w in chaos.workers), 90, "a worker to serve")
        for k in range(READERS):
            chaos.start_reader(k)
        for run in chaos.runs:
            run.proc.wait_for_log("registered as attempt", timeout_s=90)
        chaos.note("8 readers registered; chaos starts")

        events = schedule(rng)
        restarts: list[tuple[float, int]] = []  # (when, subtask)
        zero = time.monotonic()
        kills = {"coordinator": 0, "reader": 0}
        while events or restarts:
            chaos.check_processes()
            if chaos.finished_readers():
                raise AssertionError(
                    f"a reader finished before the chaos ended ({kills}): the source is too small for the schedule"
                )
            now = time.monotonic() - zero
            if restarts and restarts[0][0] <= now:
                _, subtask = restarts.pop(0)
                run = chaos.start_reader(subtask)
                chaos.note(f"started {run.proc.name} (subtask {subtask})")
                continue
            if events and events[0][0] <= now:
                _, what, victim, delay_ms = events.pop(0)
                if what == "coordinator":
                    chaos.kill_coordinator()
                    kills["coordinator"] += 1
                else:
                    killed = chaos.kill_reader(victim)
                    if killed is not None:
                        kills["reader"] += 1
                        restarts.append((time.monotonic() - zero + delay_ms / 1000, killed))
                        restarts.sort()
                continue
            time.sleep(0.05)
        chaos.note(f"chaos over: {kills}; waiting for the readers to finish")
        assert kills == {"coordinator": COORDINATOR_KILLS, "reader": READER_KILLS}

        deadline = time.monotonic() + 240
        while chaos.finished_readers() < READERS:
            chaos.check_processes()
            assert time.monotonic() < deadline, (
                "the readers did not finish within 240 s after the chaos:\n"
                + "\n".join(f"{r.proc.name}: {r.proc.tail(5)}" for r in chaos.current.values() if r is not None)
            )
            time.sleep(0.5)
        chaos.note("every reader finished")
        active = chaos.active_worker()
        if active is not None:
            served = serving_epochs(active.proc, source)
            chaos.note(f"active coordinator at the end: {active.proc.name}, epochs served {served}")
        verify(chaos, kafka_bootstrap, source)
        chaos.note("verified")
    finally:
        group.stop_all()
        (tmp_path / "timeline.txt").write_text("\n".join(chaos.timeline) + "\n")


def serving_starts(proc: Proc, source: str) -> list[tuple[int, int]]:
    """(epoch, the inbox offset it served from; -1: the beginning) of each time ``proc``
    started serving ``source``, from its log."""
    pattern = re.compile(
        rf"coordinator for source {re.escape(source)} \(.*epoch (\d+)\) is serving \S+ "
        r"from (?:offset (\d+)|its beginning)"
    )
    return [(int(m.group(1)), int(m.group(2)) if m.group(2) else -1) for m in pattern.finditer(proc.log())]


def verify(chaos: Chaos, bootstrap: str, source: str) -> None:
    # -- the audit: splits, seqs, epochs, attempts
    result = audit(bootstrap, source)
    assert result.ok, audit_failure(result)
    summary = result.summary
    assert summary.splits_assigned == SPLITS, summary.splits_assigned
    assert summary.splits_finished == SPLITS and summary.splits_owned == 0
    # Every epoch a worker said it served is in the control log, and every worker killed
    # after it served had a successor at a higher epoch (one killed while still starting
    # served none: no epoch of its own). An epoch whose successor served from the same
    # inbox offset committed no progress: killed as it began (CI seeds hit it within ms of
    # its "is serving" line), it may have sent the readers nothing, so the log need not
    # hold it.
    starts = {epoch: offset for w in chaos.workers for epoch, offset in serving_starts(w.proc, source)}
    stillborn = {epoch for epoch, offset in starts.items() if starts.get(epoch + 1) == offset}
    served = [e for w in chaos.workers for e in serving_epochs(w.proc, source) if e not in stillborn]
    killed_serving = sum(1 for w in chaos.workers if w.killed and set(serving_epochs(w.proc, source)) - stillborn)
    assert set(served) <= set(summary.epochs), (
        f"epochs served {sorted(served)} (and {sorted(stillborn)} that made no progress), in the log {summary.epochs}"
    )
    assert len(summary.epochs) >= killed_serving + 1, f"epochs {summary.epochs}, {killed_serving} killed serving"
    assert killed_serving >= COORDINATOR_KILLS // 2, f"only {killed_serving} of the kills hit a serving coordinator"
    records = readers_topic(bootstrap, source)
    epochs = check_epochs_and_seqs(records)
    chaos.note(
        f"audit ok: {summary.readers_records} coordinator records, {summary.inbox_records} reader records, "
        f"epochs {epochs[0]}..{epochs[-1]} ({len(epochs)}), released {dict(summary.released_by_reason)}, "
        f"{summary.fenced_messages} fenced messages"
    )

    # -- which attempt each reader process was, and what each attempt was given
    for run in chaos.runs:
        run.attempts = registrations(run.proc)
    by_attempt = {(run.subtask, a): run for run in chaos.runs for a in run.attempts}
    fenced_alive = [run.proc.name for run in chaos.runs if not run.killed and len(run.attempts) > 1]
    given: dict[tuple[int, int], set[str]] = defaultdict(set)
    for env in records:
        if env["type"] == "AddSplits":
            given[(env["subtask"], env["attempt"])].update(s["split_id"] for s in env["body"]["splits"])
    inbox, _ = asyncio.run(read_control_topics(bootstrap, source))
    acks = last_acks(inbox)

    # -- the outputs: every value at least once; a second copy only from a killed reader
    # that wrote it after its last checkpoint of that split
    expected = expected_values(SPLITS, RECORDS_PER_SPLIT)
    copies: dict[tuple[str, int], list[ReaderRun]] = defaultdict(list)
    for run in chaos.runs:
        if not run.output.exists():
            continue
        for line in run.output.read_bytes().splitlines():
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                assert run.killed, f"{run.proc.name} (not killed) wrote a broken line: {line!r}"
                continue
            copies[(row["split_id"], row["value"])].append(run)
    missing = expected - copies.keys()
    assert not missing, f"{len(missing)} values never read, e.g. {sorted(missing)[:5]}"
    assert copies.keys() == expected, f"foreign values, e.g. {sorted(copies.keys() - expected)[:5]}"

    killed_attempts = {key: run for key, run in by_attempt.items() if run.killed}
    killed_splits = {split for key in killed_attempts for split in given[key]}
    duplicated = {key: runs for key, runs in copies.items() if len(runs) > 1}
    unexplained = []
    for (split, value), runs in duplicated.items():
        if split not in killed_splits:
            unexplained.append((split, value, "no killed reader was ever given the split"))
            continue
        after_checkpoint = False
        for run in runs:
            if not run.killed:
                continue
            for attempt in run.attempts:
                if split in given[(run.subtask, attempt)]:
                    position = acks.get((run.subtask, attempt), {}).get(split)
                    after_checkpoint |= position is None or value >= position
        if not after_checkpoint:
            unexplained.append((split, value, f"copies from {[r.proc.name for r in runs]}"))
    survivors = [r for r in chaos.runs if not r.killed]
    for (split, value), runs in duplicated.items():
        alive_copies = sum(1 for r in runs if r in survivors)
        if alive_copies > 1 and not fenced_alive:
            unexplained.append((split, value, "written twice by readers that were never killed"))
    chaos.note(
        f"outputs: {len(expected)} values, {len(duplicated)} duplicated (in {len({s for s, _ in duplicated})} "
        f"splits) of {len(killed_splits)} splits given to the {len(killed_attempts)} killed attempts"
        + (f"; processes fenced while alive: {fenced_alive}" if fenced_alive else "")
    )
    assert not unexplained, f"{len(unexplained)} duplicates not explained by a kill, e.g. {unexplained[:5]}"

    # every killed reader was replaced by an incarnation of the same subtask that restored a checkpoint
    for i, run in enumerate(chaos.runs):
        if run.killed:
            assert any(r.subtask == run.subtask for r in chaos.runs[i + 1 :]), f"{run.proc.name} was never replaced"
    restored = sum(1 for r in chaos.runs if re.search(r"restored checkpoint \d+", r.proc.log()))
    chaos.note(f"{restored} reader processes restored a checkpoint")
    assert restored >= 1
