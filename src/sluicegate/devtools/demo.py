"""`sluicegate demo --readers processes`: the control plane end to end on embedded defaults.

A local Kafka broker (unless KAFKA_BOOTSTRAP_SERVERS is set: then with the
SLUICEGATE_KAFKA_* / --kafka-* security settings, as one principal), the topics, a
coordinator and three standalone reader processes on a bounded `sequence`
source; progress while they read; then a check of the outputs (every value
exactly once), the audit, and a teardown of everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
from rich.console import Console
from rich.live import Live
from rich.table import Table

from sluicegate.audit.commands import run_audit
from sluicegate.audit.report import print_report
from sluicegate.devtools.broker.local import LocalKafkaBroker
from sluicegate.kafka.security import ENV_PREFIX, KafkaSecurity, use_security

console = Console(highlight=False)


@dataclass(frozen=True)
class DemoPlan:
    readers: int = 3
    splits: int = 24
    records_per_split: int = 5_000
    rate: int = 4_000
    """Records per second per reader, so the run lasts long enough to watch."""

    @property
    def total_records(self) -> int:
        return self.splits * self.records_per_split

    def options(self) -> list[str]:
        pairs = {"splits": self.splits, "records_per_split": self.records_per_split, "rate": self.rate}
        return [arg for key, value in pairs.items() for arg in ("--option", f"{key}={value}")]


@contextlib.contextmanager
def kafka_for_demo(workdir: Path) -> Iterator[str]:
    """KAFKA_BOOTSTRAP_SERVERS if set, else a local broker for the demo's lifetime."""
    existing = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if existing:
        console.print(f"using Kafka at {existing} (KAFKA_BOOTSTRAP_SERVERS)")
        yield existing
        return
    # The demo's own broker is PLAINTEXT: SLUICEGATE_KAFKA_* settings are for a given cluster.
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        del os.environ[name]
    use_security(KafkaSecurity())
    broker = LocalKafkaBroker(
        run_dir=workdir / "broker", die_with_parent=True, echo=lambda m: console.print(f"[dim]{m}[/dim]")
    )
    console.print("starting a local Apache Kafka broker (KRaft) from its Maven Central jars ...")
    bootstrap = broker.start()
    console.print(f"Kafka is up at {bootstrap}")
    try:
        yield bootstrap
    finally:
        broker.stop()
        console.print("local Kafka broker stopped")


def _spawn(args: list[str], log: Path, bootstrap: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    with log.open("ab") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "sluicegate", *args], stdout=handle, stderr=subprocess.STDOUT, env=env
        )


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
    raise RuntimeError(f"the coordinator did not start (see {log}):\n{tail}")


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_process_demo(plan: DemoPlan, keep_workdir: bool = False) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-demo-"))
    source = f"demo-{secrets.token_hex(3)}"
    console.rule(f"sluicegate demo: source {source}, {plan.readers} readers, {plan.splits} splits")
    console.print(
        f"throttled to {plan.rate:,} records/s per reader (the sequence source's rate option), "
        f"so {plan.total_records:,} records take about {plan.total_records / (plan.rate * plan.readers):.0f} s to watch"
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with kafka_for_demo(workdir) as bootstrap:
            coordinator_log = workdir / "coordinator.log"
            coordinator = _spawn(
                [
                    "coordinator",
                    "--source",
                    source,
                    "--connector",
                    "sequence",
                    "--max-parallelism",
                    str(plan.readers),
                    *plan.options(),
                ],
                coordinator_log,
                bootstrap,
            )
            procs.append(coordinator)
            console.print("starting the coordinator (a Faust worker) ...")
            _wait_for_line(coordinator_log, "is serving", coordinator, timeout_s=120)
            console.print("coordinator is serving; starting the readers")
            outputs = [workdir / f"reader-{k}.jsonl" for k in range(plan.readers)]
            readers = [
                _spawn(
                    [
                        "reader",
                        "--source",
                        source,
                        "--subtask",
                        str(k),
                        "--connector",
                        "sequence",
                        *plan.options(),
                        "--output",
                        f"jsonl:{outputs[k]}",
                        "--checkpoint-interval-ms",
                        "1000",
                    ],
                    workdir / f"reader-{k}.log",
                    bootstrap,
                )
                for k in range(plan.readers)
            ]
            procs.extend(readers)
            _show_progress(plan, readers, outputs)
            codes = [r.wait() for r in readers]
            ok = _check_outputs(plan, outputs) and all(c == 0 for c in codes)
            if any(codes):
                console.print(f"[red]reader exit codes: {codes} (logs in {workdir})[/red]")
            result = asyncio.run(run_audit(bootstrap, source, "sluicegate"))
            print_report(result, console)
            ok = ok and result.ok
            _stop(coordinator)
            console.rule("[green]demo passed[/green]" if ok else "[red]demo FAILED[/red]")
            return 0 if ok else 1
    finally:
        for proc in procs:
            _stop(proc)
        if not keep_workdir:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        else:
            console.print(f"work directory kept: {workdir}")


def _show_progress(plan: DemoPlan, readers: list[subprocess.Popen[bytes]], outputs: list[Path]) -> None:
    started = time.monotonic()

    def table() -> Table:
        t = Table(title=f"reading {plan.total_records:,} records")
        for column in ("subtask", "records written", "state"):
            t.add_column(column, justify="right")
        for k, (proc, out) in enumerate(zip(readers, outputs, strict=True)):
            state = "running" if proc.poll() is None else f"exited {proc.returncode}"
            t.add_row(str(k), f"{_count_lines(out):,}", state)
        total = sum(_count_lines(o) for o in outputs)
        t.caption = f"{total:,} / {plan.total_records:,} records, {time.monotonic() - started:.0f} s"
        return t

    with Live(table(), console=console, refresh_per_second=2) as live:
        while any(r.poll() is None for r in readers):
            time.sleep(0.5)
            live.update(table())
        live.update(table())


def _check_outputs(plan: DemoPlan, outputs: list[Path]) -> bool:
    seen: dict[int, int] = {}
    for path in outputs:
        if not path.exists():
            continue
        with path.open("rb") as handle:
            for line in handle:
                value = orjson.loads(line)["value"]
                seen[value] = seen.get(value, 0) + 1
    missing = plan.total_records - sum(1 for v in range(plan.total_records) if v in seen)
    repeated = sum(1 for count in seen.values() if count > 1)
    console.print(
        f"outputs: {sum(seen.values()):,} records, {len(seen):,} distinct values, "
        f"{missing:,} missing, {repeated:,} repeated"
    )
    return missing == 0 and repeated == 0
