"""The coordinator's I/O-free core alone, on control_plane.py's phase 2 workload.

100,000 sequence splits shared by 16 readers; then each reader in turn registers
again as a new incarnation (fencing the old attempt, releasing its splits,
re-assigning them). Prints p50/p99/max of the time the core takes for one such
step, split into the step itself (CoordinatorCore.on_message), encoding its
outgoing records (the codec) and encoding the changed state parts (what the
SourceRunner commits), so the share of the end-to-end latency that is not Kafka
is known.

    .venv/bin/python benchmarks/core_step.py [--splits 100000] [--readers 16] [--rounds 20]
                                             [--collector paused|on]

Steps run as the runner's step thread runs them, with the cyclic collector paused
(coordinator/step_thread.py); ``--collector on`` measures them as before that.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import time
from collections.abc import Callable

from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.core import CoordinatorCore
from sluicegate.coordinator.state_store import encode_parts
from sluicegate.coordinator.step_thread import collector_paused
from sluicegate.protocol.codec import encode
from sluicegate.protocol.messages import Body, Envelope, ReaderRegistration
from sluicegate_connectors.sequence import SequenceSource

SOURCE = "bench"


class CoreDriver:
    def __init__(self, splits: int, readers: int, collector: str = "paused") -> None:
        self.run: Callable[[Callable[[], object]], object] = collector_paused if collector == "paused" else _call
        source = SequenceSource.from_options({"splits": str(splits), "records_per_split": "1000"})
        self.core: CoordinatorCore[object] = CoordinatorCore(
            source, CoordinatorConfig(source=SOURCE, max_parallelism=readers), epoch=1
        )
        self.now_ms = 1_700_000_000_000
        self.offset = 0
        self.incarnation = 0
        self.core.start(self.now_ms)
        gc.freeze()  # as the SourceRunner does after start-up

    def register(self, subtask: int) -> tuple[float, float, float]:
        """One re-registration; (step, encode messages, encode state) in ms."""
        self.incarnation += 1
        body: Body = ReaderRegistration(
            incarnation=f"inc-{self.incarnation}", location="bench", reported_splits=[], restored_checkpoint_id=None
        )
        env = Envelope(
            type="ReaderRegistration", source=SOURCE, subtask=subtask, attempt=None, epoch=0, ts=self.now_ms, body=body
        )
        self.now_ms += 1
        self.offset += 1
        times: list[float] = []

        def step() -> None:  # the runner's apply step: the core, then its messages encoded
            started = time.perf_counter()
            effects = self.core.on_message(env, self.offset, self.now_ms)
            stepped = time.perf_counter()
            for message in effects.messages:
                encode(message)
            times.extend((started, stepped, time.perf_counter()))

        self.run(step)
        t0, t1, t2 = times
        self.run(lambda: encode_parts(SOURCE, self.core.state_parts(only_changed=True)))
        t3 = time.perf_counter()
        return (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000


def _call(step: Callable[[], object]) -> object:
    return step()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=100_000)
    parser.add_argument("--readers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--collector",
        choices=("paused", "on"),
        default="paused",
        help="the cyclic collector during steps: paused as the runner's step thread runs them, or on (as before)",
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the core logs every fenced attempt

    driver = CoreDriver(args.splits, args.readers, args.collector)
    started = time.perf_counter()
    for subtask in range(args.readers):
        driver.register(subtask)
    phase1_ms = (time.perf_counter() - started) * 1000
    print(f"phase 1: {args.readers} registrations of {args.splits:,} splits: {phase1_ms:.0f} ms")

    samples: list[tuple[float, float, float]] = []
    for _ in range(args.rounds):
        for subtask in range(args.readers):
            samples.append(driver.register(subtask))
    print(f"phase 2: {len(samples)} re-registrations, {args.splits // args.readers:,} splits each (ms)")
    print(f"{'':>16} {'p50':>8} {'p99':>8} {'max':>8}")
    for name, column in (
        ("core step", [s[0] for s in samples]),
        ("encode messages", [s[1] for s in samples]),
        ("encode state", [s[2] for s in samples]),
        ("total", [sum(s) for s in samples]),
    ):
        print(f"{name:>16} {percentile(column, 0.5):8.1f} {percentile(column, 0.99):8.1f} {max(column):8.1f}")
    print(f"mean total {statistics.fmean(sum(s) for s in samples):.1f} ms")


if __name__ == "__main__":
    main()
