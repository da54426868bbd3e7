"""scale.py's Kafka phases: one large sequence source, its takeover and its audit.

Reuses control_plane.py's harness (the coordinator subprocess with its RSS sampler,
the simulated protocol readers). Two coordinator workers run with the same
arguments, so one is the other's standby, as in takeover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from control_plane import Coordinator, Readers, expected_split_ids, now_ms, sluicegate_executable

from sluicegate.protocol import Heartbeat

TARGET_ASSIGN_S = 20.0
TARGET_RSS_MB = 1024.0
TARGET_TAKEOVER_S = 10.0
TARGET_AUDIT_S = 60.0
GROUP_SETTLE_S = 12.0
"""How long the standby gets to join the coordinators' group (Faust: rebalance up to 10 s)."""


@dataclass
class KafkaFigures:
    splits: int
    readers: int
    serving_s: float = float("nan")
    """Coordinator start -> "is serving" (the first commit of a fresh source)."""
    assign_s: float = float("nan")
    distinct: int = 0
    duplicates: int = 0
    missing: int = 0
    rss_peak_mb: float = float("nan")
    takeover_serving_s: float = float("nan")
    """SIGKILL of the active worker -> its standby logs "is serving"."""
    takeover_record_s: float = float("nan")
    """SIGKILL -> the first committed readers record of the next epoch is fetched."""
    standby_rss_peak_mb: float = float("nan")
    audit_s: float = float("nan")
    audit_exit: int | None = None


class WatermarkReaders(Readers):
    """control_plane's readers, heartbeating with a watermark, so the coordinator
    announces one every interval and a new epoch shows on the readers topic."""

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            for reader in self.readers:
                if reader.attempt is not None:
                    await self._send(reader.subtask, Heartbeat(watermark=now_ms(), idle=False), reader.attempt)


async def _phases(splits: int, readers_n: int, bootstrap: str, workdir: Path, figures: KafkaFigures) -> None:
    source = f"scale-{uuid.uuid4().hex[:10]}"
    cmd = [
        sluicegate_executable(), "coordinator",
        "--source", source,
        "--connector", "sequence",
        "--option", f"splits={splits}",
        "--option", "records_per_split=1000",
        "--max-parallelism", str(readers_n),
        "--bootstrap-servers", bootstrap,
    ]  # fmt: skip
    workers = [Coordinator(cmd, workdir / f"coordinator-{i}.log") for i in (1, 2)]
    active, standby = workers
    readers = WatermarkReaders(bootstrap, source, readers_n, "fast")
    try:
        print(f"source {source}: {splits:,} splits, {readers_n} readers; logs in {workdir}", flush=True)
        started = time.monotonic()
        await active.start()
        await active.wait_serving(timeout_s=300)
        figures.serving_s = time.monotonic() - started
        # The standby joins the Faust group now, before any reader registers: the rebalance
        # it causes may move the source to it, which must not happen during the measurement.
        await standby.start()
        await asyncio.sleep(GROUP_SETTLE_S)
        active, standby = sorted(workers, key=lambda w: not _serves(w))
        if not _serves(active):
            raise RuntimeError("no worker is serving the source after the standby joined")
        await readers.start()
        readers.phase1_target = splits
        readers.phase = 1
        started = time.perf_counter()
        await asyncio.gather(*[await readers.register(r) for r in readers.readers])
        await asyncio.wait_for(readers.phase1_done.wait(), 300)
        assert readers.phase1_applied_at is not None
        figures.assign_s = readers.phase1_applied_at - started
        await asyncio.sleep(1.0)  # duplicates would come after the total
        ids, expected = readers.phase1_ids, expected_split_ids(splits)
        figures.distinct = len(ids)
        figures.duplicates = sum(n - 1 for n in ids.values() if n > 1)
        figures.missing = len(expected - ids.keys())
        figures.rss_peak_mb = active.rss_peak / 2**20
        print(f"  all assigned in {figures.assign_s:.1f} s; RSS peak {figures.rss_peak_mb:.0f} MB", flush=True)
        await asyncio.sleep(5.0)  # the readers heartbeat; the state of the assignment is committed
        epoch = readers.epoch
        assert active.proc is not None
        mark = _log_size(standby)
        killed = time.monotonic()
        active.proc.send_signal(signal.SIGKILL)
        while "is serving" not in _log_since(standby, mark):
            if time.monotonic() - killed > 120:
                raise RuntimeError("the standby did not take over within 120 s of the kill")
            await asyncio.sleep(0.02)
        figures.takeover_serving_s = time.monotonic() - killed
        while readers.epoch <= epoch:
            if time.monotonic() - killed > 120:
                raise RuntimeError("no record of the next epoch within 120 s of the kill")
            await asyncio.sleep(0.01)
        figures.takeover_record_s = time.monotonic() - killed
        figures.standby_rss_peak_mb = standby.rss_peak / 2**20
        print(f"  takeover: serving after {figures.takeover_serving_s:.1f} s", flush=True)
    finally:
        await readers.stop()
        await standby.stop(grace_s=10.0)
        await active.stop(grace_s=1.0)
        for worker in workers:
            await worker.stop(grace_s=1.0)
    started = time.monotonic()
    audit = await asyncio.create_subprocess_exec(
        sluicegate_executable(), "audit", "--source", source, "--bootstrap-servers", bootstrap,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await audit.communicate()
    figures.audit_s = time.monotonic() - started
    figures.audit_exit = audit.returncode
    (workdir / "audit.log").write_bytes(output)


def _serves(worker: Coordinator) -> bool:
    """Whether the worker's log says it serves the source now (its last word on it)."""
    try:
        text = worker.log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    serving, moved = text.rfind("is serving"), text.rfind("moved to another worker")
    return worker.alive() and serving > moved


def _log_size(worker: Coordinator) -> int:
    return worker.log_path.stat().st_size if worker.log_path.exists() else 0


def _log_since(worker: Coordinator, offset: int) -> str:
    with open(worker.log_path, "rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def print_kafka(f: KafkaFigures) -> None:
    print(f"over Kafka ({f.splits:,} splits, {f.readers} readers, sequence source)")
    rows = [
        ("coordinator start -> serving", f"{f.serving_s:.1f} s", ""),
        (
            "registration -> all splits assigned",
            f"{f.assign_s:.1f} s",
            f"<= {TARGET_ASSIGN_S:.0f} s {_verdict(f.assign_s <= TARGET_ASSIGN_S)}",
        ),
        ("every split exactly once", f"{f.distinct:,} distinct, {f.duplicates} dup, {f.missing} missing", ""),
        (
            "coordinator RSS peak",
            f"{f.rss_peak_mb:.0f} MB",
            f"<= {TARGET_RSS_MB:.0f} MB {_verdict(f.rss_peak_mb <= TARGET_RSS_MB)}",
        ),
        (
            "takeover: kill -> successor serving",
            f"{f.takeover_serving_s:.1f} s",
            f"<= {TARGET_TAKEOVER_S:.0f} s {_verdict(f.takeover_serving_s <= TARGET_TAKEOVER_S)}",
        ),
        ("takeover: kill -> first record of the new epoch", f"{f.takeover_record_s:.1f} s", ""),
        ("successor RSS peak", f"{f.standby_rss_peak_mb:.0f} MB", ""),
        (
            "audit of the history",
            f"{f.audit_s:.1f} s (exit {f.audit_exit})",
            f"<= {TARGET_AUDIT_S:.0f} s {_verdict(f.audit_s <= TARGET_AUDIT_S and f.audit_exit == 0)}",
        ),
    ]
    for name, value, target in rows:
        print(f"  {name:<48} {value:>34}  {target}")


def run_kafka(splits: int, readers: int, bootstrap: str | None, keep_logs: bool) -> bool:
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-scale-"))
    bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or None
    broker = None
    figures = KafkaFigures(splits, readers)
    ok = False
    try:
        if bootstrap is None:
            from sluicegate.devtools.broker.local import LocalKafkaBroker

            broker = LocalKafkaBroker(run_dir=workdir / "broker", keep=False, heap="1g")
            bootstrap = broker.start()
        asyncio.run(_phases(splits, readers, bootstrap, workdir, figures))
        ok = figures.missing == 0 and figures.duplicates == 0 and figures.audit_exit == 0
    except Exception as exc:
        print(f"the Kafka phases failed: {exc!r}; logs kept in {workdir}")
        keep_logs = True
    finally:
        if broker is not None:
            with contextlib.suppress(Exception):
                broker.stop()
    print_kafka(figures)
    if not keep_logs:
        shutil.rmtree(workdir, ignore_errors=True)
    return ok
