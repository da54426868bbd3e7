"""``sluicegate demo`` with Spark as the data plane: the main job end to end.

A local Kafka broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` is set), the control
topics, a coordinator process, and the Spark Structured Streaming job
(spark/job.py) reading a bounded ``sequence`` source through
``format("sluicegate")`` with one Spark partition per reader subtask, counting and
summing each event-time minute into Parquet. It shows progress while the job
runs, prints the window table, checks it against the table the source must give
(exact count and sum per window), runs the audit of the control topics and prints
its result, and tears everything down, also on Ctrl-C, SIGTERM and errors.
Exit code 0 if the table and the audit are right, 1 if not, 130 when interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(highlight=False)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class SparkDemoPlan:
    splits: int = 64
    records_per_split: int = 50_000
    parallelism: int = 4
    max_records_per_trigger: int = 250_000
    event_interval_ms: int = 10
    alignment_max_drift_ms: int = 60_000
    """One window: the job plans no split further ahead and declares this watermark, so
    Spark drops no row and evicts each window once closed (spark/job.py)."""
    namespace: str = "sluicegate"

    @property
    def total(self) -> int:
        return self.splits * self.records_per_split

    def options(self) -> dict[str, str]:
        return {
            "splits": str(self.splits),
            "records_per_split": str(self.records_per_split),
            "event_interval_ms": str(self.event_interval_ms),
        }


@contextlib.contextmanager
def _kafka(workdir: Path) -> Iterator[str]:
    """KAFKA_BOOTSTRAP_SERVERS if set, else a local broker in the work directory."""
    existing = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if existing:
        console.print(f"using Kafka at {existing} (KAFKA_BOOTSTRAP_SERVERS)")
        yield existing
        return
    from sluicegate.devtools.broker.local import LocalKafkaBroker

    broker = LocalKafkaBroker(
        run_dir=workdir / "broker", die_with_parent=True, echo=lambda m: console.print(f"[dim]{m}[/dim]")
    )
    console.print("starting a local Apache Kafka broker (KRaft) ...")
    try:
        bootstrap = broker.start(timeout_s=180)
        console.print(f"Kafka is up at {bootstrap}")
        yield bootstrap
    finally:
        broker.stop()
        console.print("local Kafka broker stopped")


def _start_coordinator(source: str, plan: SparkDemoPlan, bootstrap: str, log: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        "-m",
        "sluicegate",
        "coordinator",
        "--source",
        source,
        "--connector",
        "sequence",
        "--max-parallelism",
        str(plan.parallelism),
        "--namespace",
        plan.namespace,
    ]
    for key, value in plan.options().items():
        args += ["--option", f"{key}={value}"]
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    with log.open("ab") as handle:
        return subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_serving(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and "is serving" in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
    raise RuntimeError(f"the coordinator did not start (log {log}):\n{tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_spark_demo(plan: SparkDemoPlan, keep_workdir: bool = False) -> int:
    from sluicegate.spark.job import JobProgress, JobSettings, expected_sequence_windows, run_job, spark_session

    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-spark-demo-"))
    source = f"demo-spark-{secrets.token_hex(3)}"
    console.rule(
        f"sluicegate demo: source {source}, {plan.splits} splits x {plan.records_per_split:,} values, "
        f"{plan.parallelism} reader subtasks in Spark"
    )
    console.print(
        f"throttled by admission control: at most {plan.max_records_per_trigger:,} rows a micro-batch "
        "(--max-records-per-trigger)"
    )
    previous_handler = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    os.environ.setdefault("SLUICEGATE_SPARK_LOG_LEVEL", "WARNING")
    coordinator: subprocess.Popen[bytes] | None = None
    spark: Any = None
    try:
        with _kafka(workdir) as bootstrap:
            from sluicegate.kafka.topics import apply_topics
            from sluicegate.protocol.topics import topic_specs

            asyncio.run(apply_topics(bootstrap, topic_specs(plan.namespace, source, plan.parallelism)))
            console.print(f"created the control topics of {source} ({plan.parallelism} reader partitions)")
            coordinator_log = workdir / "coordinator.log"
            coordinator = _start_coordinator(source, plan, bootstrap, coordinator_log)
            console.print("starting the coordinator (a Faust worker) ...")
            _wait_serving(coordinator, coordinator_log)
            console.print("coordinator is serving; starting Spark (local[2]) and the streaming query ...")
            spark = spark_session(f"sluicegate-demo-{source}", quiet=True)
            config = JobSettings(
                source=source,
                output_dir=workdir / "windows",
                checkpoint_dir=workdir / "checkpoint",
                bootstrap_servers=bootstrap,
                parallelism=plan.parallelism,
                connector_options=plan.options(),
                namespace=plan.namespace,
                max_records_per_trigger=plan.max_records_per_trigger,
                alignment_max_drift_ms=plan.alignment_max_drift_ms,
            )
            with Progress(
                TextColumn("[bold]reading[/bold]"),
                BarColumn(),
                TextColumn("{task.completed:,.0f} / {task.total:,.0f} rows"),
                TextColumn("batch {task.fields[batch]}"),
                TextColumn("{task.fields[rate]:,.0f} rows/s"),
                TimeElapsedColumn(),
                console=console,
            ) as progress:
                task = progress.add_task("read", total=plan.total, batch="-", rate=0.0)

                began: list[float] = []

                def show(p: JobProgress) -> None:
                    # the mean since the first batch: the last batch's own rate ends at 0 (an
                    # empty batch closes the run)
                    began[:] = began or [time.monotonic()]
                    batch = str(p.batch_id) if p.batch_id >= 0 else "-"
                    elapsed = time.monotonic() - began[0]
                    rate = p.rows / elapsed if elapsed > 0 else p.input_rows_per_second
                    progress.update(task, completed=p.rows, batch=batch, rate=rate)

                table = run_job(config, spark, show)
            expected = expected_sequence_windows(plan.options())
            console.print(_window_table(table, expected))
            count, total = sum(r.count for r in table), sum(r.sum for r in table)
            want_count, want_sum = plan.total, plan.total * (plan.total - 1) // 2
            table_ok = table == expected
            colour = "green" if table_ok else "red"
            console.print(
                f"[{colour}]{len(table)} windows, count {count:,} (expected {want_count:,}), "
                f"sum {total:,} (expected {want_sum:,}): {'exact' if table_ok else 'WRONG'}[/{colour}]"
            )
            from sluicegate.audit.commands import run_audit
            from sluicegate.audit.report import print_report

            result = asyncio.run(run_audit(bootstrap, source, plan.namespace))
            print_report(result, console)
            ok = table_ok and result.ok
            spark.stop()
            spark = None
            _stop(coordinator)
            console.rule("[green]demo passed[/green]" if ok else "[red]demo FAILED[/red]")
            return EXIT_OK if ok else EXIT_FAILED
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: tearing down[/yellow]")
        return EXIT_INTERRUPTED
    except Exception as exc:
        console.print(f"[red]demo failed: {exc}[/red] (logs in {workdir})")
        keep_workdir = True
        return EXIT_FAILED
    finally:
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()
        if coordinator is not None:
            _stop(coordinator)
        signal.signal(signal.SIGTERM, previous_handler)
        if keep_workdir:
            console.print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _window_table(rows: list[Any], expected: list[Any]) -> Table:
    want = {r.start_ms: r for r in expected}
    table = Table(title="per-minute event-time windows")
    for column in ("window start (UTC)", "window end", "count", "sum", "check"):
        table.add_column(column, justify="right")
    for r in rows:
        good = want.get(r.start_ms) == r
        table.add_row(
            _utc(r.start_ms),
            _utc(r.end_ms)[-8:],
            f"{r.count:,}",
            f"{r.sum:,}",
            "[green]ok[/green]" if good else "[red]wrong[/red]",
        )
    missing = [r for r in expected if r.start_ms not in {x.start_ms for x in rows}]
    for r in missing:
        table.add_row(_utc(r.start_ms), _utc(r.end_ms)[-8:], "-", "-", "[red]missing[/red]")
    return table


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
