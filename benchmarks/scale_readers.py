"""A million splits read by real reader processes that really checkpoint (issue 21, item 2).

    .venv/bin/python benchmarks/scale_readers.py [--splits 1000000] [--readers 64]
                                                 [--records-per-split 1] [--bootstrap-servers HOST:PORT]

One bounded ``sequence`` source of N splits, two coordinator workers (active and standby,
as deployed), and R ``sluicegate reader`` processes, each reading about N / R splits into a
jsonl file and checkpointing every 3 s. Each reader holds far more splits than one control
record can name (15,600 at the defaults), so its state record, its registrations and an
ack naming them all go in pieces (protocol v6); after an attempt's first, its acks name only
the splits that moved (v7).

In the middle of the reading: one reader is SIGKILLed and started again (it restores its
checkpoint and registers again), then the active coordinator is SIGKILLed (the standby takes
over). Then every reader reads to the end and exits.

Printed: how long the readers took to register and the splits to be assigned, the
coordinators' RSS peaks, the largest record on each control topic, how many splits were
acknowledged (and at a position past their start), how many splits whole acks and acks of
changes named, the takeovers, the audit's verdict
(every split finished exactly once) and what the outputs hold (every value at least once;
duplicates only from the killed reader's last unfinished checkpoint). Exit code 1 when a
check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from control_plane import Coordinator, sluicegate_executable

from sluicegate.kafka.compacted import read_all
from sluicegate.protocol import Direction, decode
from sluicegate.protocol.messages import CheckpointAck, SplitsFinished
from sluicegate.protocol.pieces import Assembly
from sluicegate.protocol.topics import ControlTopics

TARGET_ASSIGN_S = 10.0
TARGET_RSS_MB = 1024.0
BROKER_LIMIT = 1_000_000
SESSION_TIMEOUT_MS = "60000"
"""Longer than the default 10 s: 64 reader processes on 2 cores, niced, cannot all heartbeat
within 10 s (a run timed out 67 attempts, each releasing its splits to be assigned again)."""
READER_ARGS = (
    *("--coordinator", "external"),  # the deployed workers coordinate; no reader restores 1M splits to stand by
    *("--checkpoint-interval-ms", "3000", "--heartbeat-interval-ms", "2000"),
    *("--session-timeout-ms", SESSION_TIMEOUT_MS),
)
READER_NICENESS = "19"
"""Readers run niced: on one machine, R reader processes would otherwise starve the
coordinator and the broker of CPU (a first run on 2 cores had load 36 and a 135 s step),
which is not what a deployment with readers on their own hosts sees."""


@dataclass
class Figures:
    splits: int
    readers: int
    registered_s: float = float("nan")
    """First reader process started -> every reader registered (their logs)."""
    assigned_s: float = float("nan")
    """First ReaderRegistered -> every split assigned (the records' timestamps). Readers that
    register later get theirs by cooperative rebalancing."""
    rss_peak_mb: dict[str, float] = field(default_factory=dict)
    largest: dict[str, int] = field(default_factory=dict)
    in_acks: int = 0
    """Splits named by some CheckpointAck."""
    acked_moved: int = 0
    """... of them at a position past the first acknowledged."""
    checkpointed: int = 0
    """Splits in some CheckpointAck or finished by a checkpoint (its SplitsFinished commit with it)."""
    named_by_whole_acks: list[int] = field(default_factory=list)
    """Splits named by each whole ack (an attempt's first)."""
    named_by_acks_of_changes: list[int] = field(default_factory=list)
    """Splits named by each ack of changes (v7: those that moved since the attempt's last)."""
    epochs: list[int] = field(default_factory=list)
    takeovers: int = 0
    audit_exit: int | None = None
    audit_finished: int = 0
    audit_s: float = float("nan")
    values: int = 0
    duplicates: int = 0
    missing: int = 0
    wall_s: float = float("nan")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Reader:
    def __init__(self, cmd: list[str], subtask: int, workdir: Path) -> None:
        self.cmd = cmd
        self.subtask = subtask
        self.log_path = workdir / f"reader-{subtask}.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.cmd, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT
            )

    def logged(self, text: str) -> bool:
        return text in self.log_path.read_text(errors="replace") if self.log_path.exists() else False

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()


async def _wait_for(what: str, condition: Any, timeout_s: float, poll_s: float = 0.5) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(poll_s)
    return time.monotonic() - started


async def _phases(args: argparse.Namespace, bootstrap: str, workdir: Path, f: Figures) -> str:
    source = f"scale-readers-{uuid.uuid4().hex[:8]}"
    options = [
        *("--option", f"splits={args.splits}"),
        *("--option", f"records_per_split={args.records_per_split}"),
        *("--option", f"rate={args.rate}"),
    ]
    coordinator_cmd = [
        sluicegate_executable(), "coordinator", "--source", source, "--connector", "sequence", *options,
        "--max-parallelism", str(args.readers), "--bootstrap-servers", bootstrap,
        "--session-timeout-ms", SESSION_TIMEOUT_MS,
    ]  # fmt: skip
    workers = [Coordinator(coordinator_cmd, workdir / f"coordinator-{i}.log") for i in (1, 2)]
    readers = [
        Reader(
            [
                *("nice", "-n", READER_NICENESS),
                sluicegate_executable(),
                "reader",
                "--source",
                source,
                "--subtask",
                str(k),
                "--connector",
                "sequence",
                *options,
                "--bootstrap-servers",
                bootstrap,
                "--output",
                f"jsonl:{workdir / f'out-{k}.jsonl'}",
                *READER_ARGS,
            ],
            k,
            workdir,
        )
        for k in range(args.readers)
    ]
    log(f"source {source}: {args.splits:,} splits of {args.records_per_split} records, {args.readers} readers")
    try:
        await workers[0].start()
        await workers[0].wait_serving(timeout_s=300)
        await workers[1].start()
        await asyncio.sleep(12.0)  # the standby joins the coordinators' group before readers come
        active, standby = sorted(workers, key=lambda w: "is serving" not in w.tail(10_000))
        started = time.monotonic()
        for reader in readers:
            await reader.start()
        f.registered_s = await _wait_for(
            "every reader to register", lambda: all(r.logged("registered as attempt") for r in readers), 600
        )
        log(f"{args.readers} readers registered {f.registered_s:.1f} s after the first started")
        await _wait_for(
            "three checkpoints of every reader", lambda: all(r.logged("checkpoint 3:") for r in readers), 600
        )
        victim = readers[args.readers // 2]
        victim.kill()
        await victim.wait()
        log(f"SIGKILL reader {victim.subtask}; starting it again")
        await victim.start()
        await _wait_for("the killed reader to restore", lambda: victim.logged("restored checkpoint"), 120)
        await _wait_for("the killed reader to register again", lambda: victim.logged("registered as attempt 2"), 120)
        assert active.proc is not None
        active.proc.send_signal(signal.SIGKILL)
        log("SIGKILL of the active coordinator")
        takeover_s = await _wait_for(
            "the standby to take over", lambda: "is serving" in standby.tail(10_000), 120, 0.05
        )
        log(f"the standby serves {takeover_s:.1f} s after the kill")
        codes = await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readers)), 1800)
        f.wall_s = time.monotonic() - started
        if any(codes):
            raise RuntimeError(f"readers exited with {Counter(codes)}; logs in {workdir}")
        log(f"every reader read to the end and exited 0, {f.wall_s:.0f} s after the first started")
        f.rss_peak_mb = {"active": active.rss_peak / 2**20, "standby (after takeover)": standby.rss_peak / 2**20}
    finally:
        for reader in readers:
            if reader.proc is not None and reader.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    reader.proc.kill()
        for worker in workers:
            await worker.stop(grace_s=5.0)
    return source


async def _read_topic(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    return await read_all(bootstrap, topic, max_record_bytes=2 * BROKER_LIMIT)


async def _control_topics(bootstrap: str, source: str, f: Figures) -> None:
    topics = ControlTopics.for_source(source)
    for topic in (topics.coordinator, topics.readers, topics.reader_state):
        records = await _read_topic(bootstrap, topic)
        f.largest[topic] = max((len(value or b"") for _, value in records), default=0)
        if topic != topics.coordinator:
            continue
        assemblies: dict[int, Assembly] = {}
        starts: dict[str, int] = {}
        acked: set[str] = set()
        moved: set[str] = set()
        finished: set[str] = set()
        for _, value in records:
            env = decode(value, Direction.TO_COORDINATOR)
            whole = assemblies.setdefault(env.subtask, Assembly()).take(env)
            if whole is None:
                continue
            if isinstance(whole.body, CheckpointAck):
                named = f.named_by_whole_acks if whole.body.base_checkpoint_id is None else f.named_by_acks_of_changes
                named.append(len(whole.body.splits))
                for split in whole.body.splits:
                    acked.add(split["split_id"])
                    first = starts.setdefault(split["split_id"], split["position"])
                    if split["position"] > first:
                        moved.add(split["split_id"])
            elif isinstance(whole.body, SplitsFinished):
                finished.update(whole.body.split_ids)
        f.in_acks, f.acked_moved, f.checkpointed = len(acked), len(moved), len(acked | finished)


def _assignment_time(f: Figures, readers_topic: list[tuple[bytes | None, bytes | None]]) -> None:
    registered_ts = 0
    seen: set[str] = set()
    complete_ts = 0
    for env in sorted((orjson.loads(value or b"{}") for _, value in readers_topic), key=lambda e: e.get("cseq", 0)):
        if env.get("type") == "ReaderRegistered" and not registered_ts:
            registered_ts = env["ts"]
        elif env.get("type") == "AddSplits" and len(seen) < f.splits:
            seen.update(s["split_id"] for s in env["body"]["splits"])
            if len(seen) >= f.splits:
                complete_ts = env["ts"]
    f.assigned_s = max(0, complete_ts - registered_ts) / 1000 if complete_ts else float("nan")


def _outputs(workdir: Path, f: Figures, args: argparse.Namespace) -> None:
    counts: Counter[tuple[str, int]] = Counter()
    for path in workdir.glob("out-*.jsonl"):
        for line in path.read_bytes().splitlines():
            row = orjson.loads(line)
            counts[(row["split_id"], row["value"])] += 1
    f.values = len(counts)
    f.duplicates = sum(n - 1 for n in counts.values())
    f.missing = args.splits * args.records_per_split - len(counts)


def _epochs(workdir: Path, f: Figures) -> None:
    """The epochs that served, from the workers' logs (a successor that had nothing left to
    send leaves no record of its epoch on the readers topic)."""
    served = set()
    for path in workdir.glob("coordinator-*.log"):
        served.update(int(e) for e in re.findall(r"epoch (\d+)\) is serving", path.read_text(errors="replace")))
    f.epochs = sorted(served)
    f.takeovers = len(served) - 1


async def _audit(bootstrap: str, source: str, workdir: Path, f: Figures) -> None:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sluicegate_executable(), "audit", "--source", source, "--bootstrap-servers", bootstrap, "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    f.audit_s = time.monotonic() - started
    f.audit_exit = proc.returncode
    (workdir / "audit.json").write_bytes(out + err)
    with contextlib.suppress(Exception):
        summary = orjson.loads(out)["summary"]
        f.audit_finished = summary["splits_finished"]


def _spread(named: list[int]) -> str:
    """How many acks, and the median and largest number of splits one named."""
    if not named:
        return "none"
    ordered = sorted(named)
    return f"{len(ordered):,}, naming {ordered[len(ordered) // 2]:,} splits at the median, {ordered[-1]:,} at most"


def _print(f: Figures, args: argparse.Namespace) -> bool:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    checks = {
        "assigned": f.assigned_s <= TARGET_ASSIGN_S,
        "rss": all(v <= TARGET_RSS_MB for v in f.rss_peak_mb.values()),
        "records": all(v <= BROKER_LIMIT for v in f.largest.values()),
        "acked": f.checkpointed == f.splits,
        "audit": f.audit_exit == 0 and f.audit_finished == f.splits and f.takeovers == 1,
        "outputs": f.missing == 0,
    }
    cores = os.cpu_count()
    print(f"\n{f.splits:,} splits read by {f.readers} reader processes that checkpoint, {cores} cores")
    print(f"  readers registered in          {f.registered_s:.1f} s (processes starting on {cores} cores)")
    print(
        f"  every split assigned           {f.assigned_s:.1f} s after the first registration  "
        f"[target <= {TARGET_ASSIGN_S:.0f} s: {mark(checks['assigned'])}]"
    )
    for name, mb in f.rss_peak_mb.items():
        print(f"  coordinator RSS peak, {name:<25} {mb:,.0f} MB  [target <= {TARGET_RSS_MB:.0f} MB]")
    for topic, size in f.largest.items():
        name = topic.rsplit(".", 1)[-1]
        print(f"  largest record on {name:<13} {size:,} bytes  [<= 1 MB: {mark(size <= BROKER_LIMIT)}]")
    print(
        f"  splits checkpointed            {f.checkpointed:,} of {f.splits:,}: {f.in_acks:,} in acks "
        f"({f.acked_moved:,} of them acked again further on), the rest finished by a checkpoint  "
        f"[{mark(checks['acked'])}]"
    )
    for kind, named in (("whole", f.named_by_whole_acks), ("of changes", f.named_by_acks_of_changes)):
        print(f"  acks {kind:<25} {_spread(named)}")
    print(
        f"  audit                          exit {f.audit_exit}, {f.audit_finished:,} splits finished, "
        f"epochs served {f.epochs} ({f.takeovers} takeover), {f.audit_s:.0f} s  [{mark(checks['audit'])}]"
    )
    print(
        f"  outputs                        {f.values:,} distinct values, {f.missing:,} missing, {f.duplicates:,} "
        f"written again (the killed reader's unfinished checkpoint)  [{mark(checks['outputs'])}]"
    )
    print(f"  wall time                      {f.wall_s:.0f} s from the first reader start to the last exit")
    return all(v for k, v in checks.items() if k in ("records", "acked", "audit", "outputs"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--splits", type=int, default=1_000_000)
    parser.add_argument("--readers", type=int, default=64)
    parser.add_argument("--records-per-split", type=int, default=1)
    parser.add_argument("--rate", type=float, default=300.0, help="records/s per reader (the sequence option)")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or None)
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the processes started are stopped
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-scale-readers-"))
    figures = Figures(args.splits, args.readers)
    broker = None
    ok = False
    try:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from sluicegate.devtools.broker.local import LocalKafkaBroker

            broker = LocalKafkaBroker(run_dir=workdir / "broker", keep=False, heap="1g")
            bootstrap = broker.start()
        source = asyncio.run(_phases(args, bootstrap, workdir, figures))
        log("reading the control topics, the outputs; auditing")
        asyncio.run(_control_topics(bootstrap, source, figures))
        _assignment_time(figures, asyncio.run(_read_topic(bootstrap, ControlTopics.for_source(source).readers)))
        _outputs(workdir, figures, args)
        asyncio.run(_audit(bootstrap, source, workdir, figures))
        _epochs(workdir, figures)
        ok = _print(figures, args)
    except Exception as exc:
        print(f"the run failed: {exc!r}; logs kept in {workdir}", file=sys.stderr)
        args.keep_logs = True
    finally:
        if broker is not None:
            with contextlib.suppress(Exception):
                broker.stop()
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"logs in {workdir}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
