#!/usr/bin/env python
"""Takeover benchmark: how long a source has no coordinator after its active worker is SIGKILLed.

    python benchmarks/takeover.py [--repetitions 5] [--readers 3] [--modes off,on]
                                  [--silence-ms 2000] [--bootstrap-servers HOST:PORT] [--keep-logs]

Each mode runs the repetitions below on a fresh source, one mode after the other on the
same broker: ``off`` = ``--takeover-silence-ms 0`` (the standby waits for the Faust
group to rebalance: the behaviour before fast takeover), ``on`` = ``--takeover-silence-ms
S`` (the standby takes over after S ms without a commit). It prints each mode's table,
then p50/p90 of both and their ratio.

What runs:

- a Kafka broker: the one at --bootstrap-servers / $KAFKA_BOOTSTRAP_SERVERS, or else a
  ``sluicegate.devtools.broker.local.LocalKafkaBroker`` in a temporary directory, stopped at the end;
- two coordinator workers for one fresh source (``sluicegate coordinator --source S
  --connector sequence ... --web-port P``, the same arguments, so they share the Faust app);
- R real reader processes (``sluicegate reader``) on an unbounded, rate-limited sequence
  source: they heartbeat every second and checkpoint every two, so the coordinator always
  has traffic and announces watermarks;
- in this process, one consumer assigned to every partition of NS.S.readers,
  ``read_committed``, from the end.

One repetition: wait until the consumer group of the workers is Stable with both members
and one worker is active (/health) with all R readers live (/sources/S); note the epoch E;
SIGKILL the active worker; the takeover time runs from the kill to the moment the consumer
fetches the first committed NS.S.readers record with an epoch above E (the successor's).
The killed worker is then started again, as the new standby.

Components, from the successor's log (wall-clock, ms; same machine as the kill):

- detect: kill -> the successor learns of the death. Off: the rebalance ("Heartbeat
  failed ... rebalancing"), the group session timeout (``broker_session_timeout``)
  counted from the dead worker's last heartbeat, plus up to one heartbeat interval of
  the successor. On: "no commit seen for ...; taking over", the silence counted from
  the last commit the successor saw, plus up to one sample interval;
- rebalance: -> "is now the active coordinator" (off: Faust assigns the leadership
  partition; on: about 0, the runner starts at once);
- restore: -> the runner fenced the old producer, read the state and committed the new
  epoch ("epoch N) is serving");
- first record: -> the first committed record with the new epoch was fetched (the next
  step with output: a watermark announcement, an assignment ...).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from rich.console import Console
from rich.table import Table

from sluicegate.kafka.clients import security_settings

console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
NAMESPACE = "sluicegate"
TARGET_S = 10.0
"""Every takeover, either mode (issue 11)."""
TARGET_P50_ON_S = 3.0
"""Median takeover with fast takeover on and default broker settings (issue 13, item 4)."""
DETECTED = r"rebalanc|no commit seen for"


def log(message: str) -> None:
    console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_json(port: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as response:
            return orjson.loads(response.read())
    except (urllib.error.URLError, OSError, orjson.JSONDecodeError):
        return None


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass
class Proc:
    name: str
    args: list[str]
    log_path: Path
    port: int | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self, bootstrap: str) -> None:
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1", COLUMNS="200")
        with self.log_path.open("ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "sluicegate", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.popen is not None
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def stop(self, grace_s: float = 15.0) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


FAUST_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[\d+\] \[\w+\] (.*)$", re.MULTILINE)


def log_events(proc: Proc) -> list[tuple[float, str]]:
    """(wall-clock s, message) of every Faust-formatted line of the worker's log."""
    out = []
    for match in FAUST_LINE.finditer(proc.log()):
        stamp = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append((stamp, match.group(2)))
    return out


def first_after(events: list[tuple[float, str]], after: float, pattern: str) -> float | None:
    regex = re.compile(pattern)
    for stamp, message in events:
        if stamp >= after and regex.search(message):
            return stamp
    return None


@dataclass
class Sample:
    repetition: int
    old_epoch: int
    new_epoch: int
    total_s: float
    detect_s: float
    rebalance_s: float
    restore_s: float
    first_record_s: float
    first_type: str
    successor: str


@dataclass
class EpochWatch:
    """The first committed NS.S.readers record of each epoch, as this consumer fetches it."""

    first_seen: dict[int, tuple[float, str]] = field(default_factory=dict)
    records: int = 0


async def watch_readers_topic(bootstrap: str, topic: str, partitions: int, watch: EpochWatch) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **security_settings(),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=20,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        while True:
            batches = await consumer.getmany(timeout_ms=100)
            seen_at = time.time()
            for records in batches.values():
                for record in records:
                    watch.records += 1
                    env = orjson.loads(record.value)
                    epoch = env["epoch"]
                    if epoch not in watch.first_seen:
                        watch.first_seen[epoch] = (seen_at, env["type"])
    finally:
        await consumer.stop()


async def group_members(admin: AIOKafkaAdminClient, group_id: str) -> tuple[str, int]:
    """(state, member count) of a consumer group."""
    responses = await admin.describe_consumer_groups([group_id])
    for response in responses:
        for group in response.groups:
            # (error_code, group_id, state, protocol_type, protocol, members[, authorized_operations])
            if group[1] == group_id:
                return str(group[2]), len(group[5])
    return "Unknown", 0


class Bench:
    def __init__(self, args: argparse.Namespace, bootstrap: str, workdir: Path, silence_ms: int) -> None:
        self.args = args
        self.silence_ms = silence_ms
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.source = f"tko-{uuid.uuid4().hex[:10]}"
        self.group_id = f"{NAMESPACE}.{self.source}.coordinator"
        self.workers: list[Proc] = []
        self.readers: list[Proc] = []
        self.options = {"splits": str(2 * args.readers), "records_per_split": "unbounded", "rate": "50"}

    def coordinator_args(self, port: int) -> list[str]:
        args = ["coordinator", "--source", self.source, "--connector", "sequence"]
        args += ["--max-parallelism", str(self.args.readers), "--web-port", str(port)]
        args += ["--takeover-silence-ms", str(self.silence_ms)]
        for key, value in self.options.items():
            args += ["--option", f"{key}={value}"]
        return args

    def start_worker(self) -> Proc:
        port = free_port()
        name = f"worker-{len(self.workers)}"
        proc = Proc(name, self.coordinator_args(port), self.workdir / f"{name}.log", port)
        proc.start(self.bootstrap)
        self.workers.append(proc)
        return proc

    def start_reader(self, subtask: int) -> Proc:
        args = ["reader", "--source", self.source, "--subtask", str(subtask), "--connector", "sequence"]
        args += ["--output", f"jsonl:{self.workdir / f'out-{subtask}.jsonl'}"]
        for key, value in self.options.items():
            args += ["--option", f"{key}={value}"]
        proc = Proc(f"reader-{subtask}", args, self.workdir / f"reader-{subtask}.log")
        proc.start(self.bootstrap)
        self.readers.append(proc)
        return proc

    def live(self) -> list[Proc]:
        return [w for w in self.workers if w.alive()]

    def active(self) -> tuple[Proc, dict[str, Any]] | None:
        """The worker serving the source with every reader live, and its /sources/S snapshot."""
        found = []
        for worker in self.live():
            assert worker.port is not None
            health = http_json(worker.port, "/health")
            if health is None:
                return None  # a worker that does not answer yet: not settled
            if self.source in health["active_sources"]:
                found.append(worker)
        if len(found) != 1:
            return None
        assert found[0].port is not None
        snapshot = http_json(found[0].port, f"/sources/{self.source}")
        if snapshot is None or snapshot.get("state") != "active":
            return None
        if [s["state"] for s in snapshot["subtasks"]] != ["live"] * self.args.readers:
            return None
        return found[0], snapshot

    async def settled(self, admin: AIOKafkaAdminClient, timeout_s: float = 120.0) -> tuple[Proc, dict[str, Any]]:
        """Both workers in a Stable group, one of them active with every reader live, for 2 s."""
        deadline = time.monotonic() + timeout_s
        stable_since: float | None = None
        while time.monotonic() < deadline:
            for proc in self.readers:
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
            state, members = await group_members(admin, self.group_id)
            active = self.active()
            if state == "Stable" and members == 2 and active is not None:
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since >= 2.0:
                    return active
            else:
                stable_since = None
            await asyncio.sleep(0.25)
        raise RuntimeError(
            f"the workers did not settle within {timeout_s} s:\n"
            + "\n\n".join(f"{w.name}:\n{w.tail(10)}" for w in self.live())
        )

    async def run(self) -> list[Sample]:
        log(f"source [bold]{self.source}[/bold], {self.args.readers} readers, logs in {self.workdir}")
        self.start_worker()
        first = self.workers[0]
        deadline = time.monotonic() + 120
        while "is serving" not in first.log():
            if not first.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the first worker did not serve:\n{first.tail()}")
            await asyncio.sleep(0.2)
        self.start_worker()
        for k in range(self.args.readers):
            self.start_reader(k)
        watch = EpochWatch()
        topic = f"{NAMESPACE}.{self.source}.readers"
        watcher = asyncio.create_task(watch_readers_topic(self.bootstrap, topic, self.args.readers, watch))
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, **security_settings())
        await admin.start()
        samples: list[Sample] = []
        try:
            for rep in range(1, self.args.repetitions + 1):
                victim, snapshot = await self.settled(admin)
                old_epoch = snapshot["epoch"]
                await asyncio.sleep(self.args.pause)
                killed_at = time.time()
                victim.kill()
                log(f"repetition {rep}: SIGKILL {victim.name} (epoch {old_epoch})")
                deadline = time.monotonic() + 90
                while not any(e > old_epoch for e in watch.first_seen):
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            "no record of a new epoch within 90 s:\n"
                            + "\n\n".join(f"{w.name}:\n{w.tail(10)}" for w in self.live())
                        )
                    await asyncio.sleep(0.02)
                new_epoch = min(e for e in watch.first_seen if e > old_epoch)
                seen_at, first_type = watch.first_seen[new_epoch]
                successor = next(w for w in self.live() if f"epoch {new_epoch}) is serving" in w.log())
                events = log_events(successor)
                detected = first_after(events, killed_at, DETECTED)
                assigned = first_after(events, killed_at, r"is now the active coordinator")
                serving = first_after(events, killed_at, rf"epoch {new_epoch}\) is serving")
                if assigned is None or serving is None:
                    raise RuntimeError(f"{successor.name} did not log its takeover:\n{successor.tail()}")
                detected = detected if detected is not None and detected <= assigned else assigned
                sample = Sample(
                    repetition=rep,
                    old_epoch=old_epoch,
                    new_epoch=new_epoch,
                    total_s=seen_at - killed_at,
                    detect_s=detected - killed_at,
                    rebalance_s=assigned - detected,
                    restore_s=serving - assigned,
                    first_record_s=seen_at - serving,
                    first_type=first_type,
                    successor=successor.name,
                )
                samples.append(sample)
                log(
                    f"repetition {rep}: takeover {sample.total_s:.2f} s (detect {sample.detect_s:.2f}, "
                    f"rebalance {sample.rebalance_s:.2f}, restore {sample.restore_s:.2f}, "
                    f"first record {sample.first_record_s:.2f} [{first_type}]) by {successor.name}"
                )
                self.start_worker()  # the new standby
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            await admin.close()
        return samples

    def stop_all(self) -> None:
        for proc in [*self.readers, *self.workers]:
            proc.stop()


def report(samples: list[Sample], title: str) -> None:
    table = Table(title=f"{title}: takeover after SIGKILL of the active worker ({len(samples)} repetitions)")
    table.add_column("rep", justify="right")
    table.add_column("epoch", justify="right")
    for name in ("total s", "detect s", "rebalance s", "restore s", "first record s"):
        table.add_column(name, justify="right")
    table.add_column("first record")
    for s in samples:
        table.add_row(
            str(s.repetition),
            f"{s.old_epoch}->{s.new_epoch}",
            f"{s.total_s:.2f}",
            f"{s.detect_s:.2f}",
            f"{s.rebalance_s:.2f}",
            f"{s.restore_s:.2f}",
            f"{s.first_record_s:.2f}",
            s.first_type,
        )
    columns = {
        "total": [s.total_s for s in samples],
        "detect": [s.detect_s for s in samples],
        "rebalance": [s.rebalance_s for s in samples],
        "restore": [s.restore_s for s in samples],
        "first record": [s.first_record_s for s in samples],
    }
    for label, pick in (
        ("p50", lambda v: percentile(v, 0.5)),
        ("p90", lambda v: percentile(v, 0.9)),
        ("max", max),
    ):
        table.add_row(label, "", *(f"{pick(v):.2f}" if v else "-" for v in columns.values()), "", style="bold")
    console.print(table)


def compare(results: dict[str, list[Sample]], silence_ms: int) -> None:
    """Both modes side by side, the ratio, and the targets."""
    table = Table(title="takeover s, SIGKILL -> first record of the new epoch")
    for name in ("mode", "runs", "p50", "p90", "max"):
        table.add_column(name, justify="right" if name != "mode" else "left")
    totals = {mode: [s.total_s for s in samples] for mode, samples in results.items() if samples}
    for mode, values in totals.items():
        label = "off (group rebalance)" if mode == "off" else f"on (silence {silence_ms} ms)"
        table.add_row(
            label,
            str(len(values)),
            f"{percentile(values, 0.5):.2f}",
            f"{percentile(values, 0.9):.2f}",
            f"{max(values):.2f}",
        )
    console.print(table)
    if "off" in totals and "on" in totals:
        off50, on50 = percentile(totals["off"], 0.5), percentile(totals["on"], 0.5)
        off90, on90 = percentile(totals["off"], 0.9), percentile(totals["on"], 0.9)
        console.print(f"ratio off/on: p50 {off50 / on50:.1f}x, p90 {off90 / on90:.1f}x")
    worst = max(v for values in totals.values() for v in values)
    console.print(
        f"target: every takeover <= {TARGET_S:.0f} s: {'met' if worst <= TARGET_S else 'NOT met'} (max {worst:.2f} s)"
    )
    if "on" in totals:
        on50 = percentile(totals["on"], 0.5)
        verdict = "met" if on50 <= TARGET_P50_ON_S else "NOT met"
        console.print(
            f"target: takeover p50 <= {TARGET_P50_ON_S:.0f} s with fast takeover on: {verdict} ({on50:.2f} s)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--readers", type=int, default=3, help="reader processes = the source's max parallelism")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between settling and the kill")
    parser.add_argument(
        "--bootstrap-servers", default=None, help="default: $KAFKA_BOOTSTRAP_SERVERS, else a local broker"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary directory (worker logs)")
    parser.add_argument(
        "--modes", default="off,on", help="off (no fast takeover), on (fast takeover), or both, in this order"
    )
    parser.add_argument("--silence-ms", type=int, default=2000, help="--takeover-silence-ms of the workers in mode on")
    args = parser.parse_args(argv)
    if args.repetitions < 1 or args.readers < 1:
        parser.error("--repetitions and --readers must be >= 1")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("off", "on") for m in modes):
        parser.error("--modes: a comma-separated list of off and on")

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # so the finally below stops every process it started

    signal.signal(signal.SIGTERM, on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-takeover-"))
    bootstrap = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or None
    broker = None
    bench: Bench | None = None
    results: dict[str, list[Sample]] = {}
    failed: BaseException | None = None
    try:
        if bootstrap is None:
            from sluicegate.devtools.broker.local import LocalKafkaBroker

            broker = LocalKafkaBroker(run_dir=workdir / "broker", keep=False)
            log(f"starting a local Kafka broker in {broker.run_dir}")
            bootstrap = broker.start()
        log(f"broker at {bootstrap}")
        for mode in modes:
            log(f"[bold]mode {mode}[/bold]: --takeover-silence-ms {args.silence_ms if mode == 'on' else 0}")
            (workdir / mode).mkdir()
            bench = Bench(args, bootstrap, workdir / mode, args.silence_ms if mode == "on" else 0)
            results[mode] = asyncio.run(bench.run())
            bench.stop_all()
            bench = None
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        failed = exc
        log("[red]interrupted[/red]")
    except Exception as exc:
        failed = exc
        log(f"[red]benchmark failed:[/red] {exc}")
    finally:
        if bench is not None:
            bench.stop_all()
        if broker is not None:
            broker.stop()
    for mode, samples in results.items():
        report(samples, f"fast takeover {mode}")
    if any(results.values()):
        compare(results, args.silence_ms)
    if failed is None and not args.keep_logs:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        console.print(f"logs kept in {workdir}")
    return 1 if failed is not None else 0


if __name__ == "__main__":
    sys.exit(main())
