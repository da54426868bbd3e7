#!/usr/bin/env python
"""Scale: many readers on the I/O-free core, and a source of 1,000,000 splits over Kafka.

    .venv/bin/python benchmarks/scale.py      # core: 10,000 readers; Kafka: 1,000,000 splits / 64 readers
    .venv/bin/python benchmarks/scale.py --readers 1000 3000 --skip-kafka --assigners sticky
    .venv/bin/python benchmarks/scale.py --readers 100000 --rounds 3 --skip-kafka   # the 100,000-reader probe
    .venv/bin/python benchmarks/scale.py --skip-core --splits 1000000 --kafka-readers 64 \
        --bootstrap-servers 127.0.0.1:9092

Core phases (``CoordinatorCore`` driven directly: no Kafka, no asyncio, one process):

- **register**: N readers (max_parallelism N, a sequence source of N splits, so every
  reader owns one split) register one after the other; the time of the N steps.
- **watermark rounds**: each round every reader sends one Heartbeat, the reader holding
  the low watermark first, each with a watermark above every other reader's (so every
  heartbeat moves the low watermark: the slowest reader advancing), then the clock moves
  on by ``watermark_announce_interval_ms`` and the core ticks once. Timed per round (the
  N heartbeat steps and the tick), with the WatermarkAnnouncement records the round emits.

Kafka phases (``benchmarks/control_plane.py``'s harness: the real coordinator process and
simulated protocol readers; a local broker unless --bootstrap-servers /
$KAFKA_BOOTSTRAP_SERVERS):

- **assign**: --kafka-readers readers register at once; the time until every one of the
  --splits splits has arrived in an AddSplits, each exactly once; the coordinator's peak RSS.
- **takeover**: the coordinator is SIGKILLed and started again; the time from the kill to
  the first committed record of the next epoch on the readers topic.
- **audit**: ``sluicegate audit`` of the source's history, timed.
"""

from __future__ import annotations

import argparse
import gc
import logging
import time
from dataclasses import dataclass

import psutil

from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.core import CoordinatorCore
from sluicegate.protocol.messages import Envelope, Heartbeat, ReaderRegistration, WatermarkAnnouncement
from sluicegate_connectors.sequence import SequenceSource

SOURCE = "scale"
START_MS = 1_700_000_000_000

TARGETS = {10_000: (2.0, 50.0), 100_000: (20.0, 500.0)}
"""readers -> (registration s, watermark round ms), CPU: issue 11 item 6 and issue 21 item 3."""


@dataclass(frozen=True)
class CoreFigures:
    assigner: str
    readers: int
    register_s: float
    register_cpu_s: float
    round_ms: list[float]
    round_cpu_ms: list[float]
    announcements: list[int]
    memory_mb: float
    """What the process's RSS grew by from before the core was built to after the rounds."""


class CoreDriver:
    """The core of one source with ``readers`` subtasks, fed envelopes directly."""

    def __init__(self, readers: int, assigner: str = "fair_share") -> None:
        source = SequenceSource.from_options(
            {"splits": str(readers), "records_per_split": "1000", "assigner": assigner}
        )
        self.config = CoordinatorConfig(source=SOURCE, max_parallelism=readers)
        self.core: CoordinatorCore[object] = CoordinatorCore(source, self.config, epoch=1)
        self.readers = readers
        self.now_ms = START_MS
        self.offset = 0
        self.core.start(self.now_ms)
        self.attempts: dict[int, int] = {}

    def _feed(self, subtask: int, attempt: int | None, body: ReaderRegistration | Heartbeat) -> list[Envelope]:
        env = Envelope(
            type=body.TYPE, source=SOURCE, subtask=subtask, attempt=attempt, epoch=0, ts=self.now_ms, body=body
        )
        self.offset += 1
        return self.core.on_message(env, self.offset, self.now_ms).messages

    def register_all(self) -> tuple[float, float]:
        """(wall, CPU) seconds: the CPU time of this process holds up better on a shared machine."""
        started, cpu = time.perf_counter(), time.process_time()
        for s in range(self.readers):
            body = ReaderRegistration(
                incarnation=f"inc-{s}", location="bench", reported_splits=[], restored_checkpoint_id=None
            )
            self._feed(s, None, body)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        self.attempts = {s: self.core.slots[s].attempt for s in range(self.readers)}
        return elapsed, cpu

    def watermark_round(self, round_no: int) -> tuple[float, float, int]:
        """One heartbeat per reader, each moving the low watermark, then a tick."""
        base = round_no * self.readers
        inbox = [  # built before the clock starts: the readers' work, not the core's
            Envelope(
                type=Heartbeat.TYPE,
                source=SOURCE,
                subtask=s,
                attempt=self.attempts[s],
                epoch=0,
                ts=self.now_ms,
                body=Heartbeat(watermark=START_MS + base + s, idle=False),
            )
            for s in range(self.readers)
        ]
        core, now_ms = self.core, self.now_ms
        out: list[Envelope] = []
        # the inbox is the readers' work, held here whole only because it was built in
        # advance: keep the collector from rescanning it at every collection of the round
        # (a coordinator decodes a record, steps and drops it). What the core allocates, and
        # what it keeps, is collected as in a coordinator process.
        gc.freeze()
        started, cpu = time.perf_counter(), time.process_time()
        for env in inbox:
            self.offset += 1
            out += core.on_message(env, self.offset, now_ms).messages
        self.now_ms += self.config.watermark_announce_interval_ms
        out += core.tick(self.now_ms).messages
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        return elapsed, cpu, sum(isinstance(env.body, WatermarkAnnouncement) for env in out)


def run_core(readers: int, rounds: int, assigner: str) -> CoreFigures:
    gc.collect()
    before = psutil.Process().memory_info().rss
    driver = CoreDriver(readers, assigner)
    gc.freeze()
    register_s, register_cpu_s = driver.register_all()
    round_ms: list[float] = []
    round_cpu_ms: list[float] = []
    announcements: list[int] = []
    for r in range(1, rounds + 1):
        elapsed, cpu, count = driver.watermark_round(r)
        round_ms.append(elapsed * 1000)
        round_cpu_ms.append(cpu * 1000)
        announcements.append(count)
    memory_mb = (psutil.Process().memory_info().rss - before) / 1e6
    gc.unfreeze()
    return CoreFigures(assigner, readers, register_s, register_cpu_s, round_ms, round_cpu_ms, announcements, memory_mb)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def print_core(figures: list[CoreFigures]) -> None:
    print("core only (CoordinatorCore, sequence source, one split per reader; wall / CPU of this process)")
    header = ("assigner", "readers", "register s", "round ms, median", "round ms, max", "announcements/round")
    print(
        f"{header[0]:>10} {header[1]:>8} {header[2]:>14} {header[3]:>18} {header[4]:>14} {header[5]:>20}"
        f" {'memory MB':>10}"
    )
    for f in figures:
        print(
            f"{f.assigner:>10} {f.readers:>8,} {f.register_s:>6.2f} / {f.register_cpu_s:<5.2f} "
            f"{_median(f.round_ms):>8.1f} / {_median(f.round_cpu_ms):<7.1f} {max(f.round_ms):>14.1f} "
            f"{max(f.announcements):>20,} {f.memory_mb:>10,.0f}"
        )
    for f in figures:
        if f.readers not in TARGETS:
            continue
        register_s, round_ms = TARGETS[f.readers]
        print(
            f"targets for {f.assigner} at {f.readers:,} readers (CPU): register <= {register_s:g} s "
            f"{'met' if f.register_cpu_s <= register_s else 'NOT met'}; round <= {round_ms:.0f} ms "
            f"{'met' if _median(f.round_cpu_ms) <= round_ms else 'NOT met'}; "
            f"<= 1 announcement per reader per interval "
            f"{'met' if max(f.announcements) <= f.readers else 'NOT met'}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--readers", type=int, nargs="+", default=[10_000], help="core phases: reader counts")
    parser.add_argument("--rounds", type=int, default=5, help="core phases: watermark rounds")
    parser.add_argument(
        "--assigners",
        default="fair_share,sticky,round_robin",
        help="core phases: the sequence source's assigners, each measured on its own",
    )
    parser.add_argument("--skip-core", action="store_true")
    parser.add_argument("--skip-kafka", action="store_true")
    parser.add_argument("--splits", type=int, default=1_000_000, help="Kafka phases: splits of the source")
    parser.add_argument("--kafka-readers", type=int, default=64)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the core logs every registration at INFO
    ok = True
    if not args.skip_core:
        assigners = [a.strip() for a in args.assigners.split(",") if a.strip()]
        print_core([run_core(n, args.rounds, a) for a in assigners for n in args.readers])
    if not args.skip_kafka:
        from scale_kafka import run_kafka  # benchmarks/ is on sys.path when run as a script

        logging.disable(logging.NOTSET)
        ok = run_kafka(args.splits, args.kafka_readers, args.bootstrap_servers, args.keep_logs)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
