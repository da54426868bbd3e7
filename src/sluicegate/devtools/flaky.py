"""Run chosen tests several times and print each test's pass rate, so that a flaky test
shows up before a stop instead of in CI.

    .venv/bin/python -m sluicegate.devtools.flaky tests/integration --runs 10 --hog 2
    make flaky TESTS=tests/integration RUNS=10 HOG=2

Each run is one ``pytest`` process over the given tests with a JUnit XML report; nothing
is retried, so a test that failed once in ten runs shows 9/10. ``--hog N`` keeps N
processes spinning on the CPU for the whole time, as a shared CI machine is loaded.
Prints, after every run, its counts and time; at the end, every test that failed at
least once with its pass rate and the first line of its last failure, and the slowest
tests by median time. Exit code 1 if any test failed at least once.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Outcome:
    """One test over every run."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: list[float] = field(default_factory=list)
    last_failure: str = ""

    @property
    def runs(self) -> int:
        return self.passed + self.failed


def read_report(path: Path, outcomes: dict[str, Outcome]) -> tuple[int, int, int]:
    """Add one JUnit XML report to ``outcomes``; (passed, failed, skipped) of that run."""
    counts = [0, 0, 0]
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        test_id = f"{module}.py::{case.get('name', '')}"
        outcome = outcomes.setdefault(test_id, Outcome())
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            outcome.failed += 1
            text = problem.get("message") or (problem.text or "")
            outcome.last_failure = text.strip().splitlines()[0][:160] if text.strip() else "(no message)"
            counts[1] += 1
        elif case.find("skipped") is not None:
            outcome.skipped += 1
            counts[2] += 1
        else:
            outcome.passed += 1
            outcome.seconds.append(float(case.get("time", "0")))
            counts[0] += 1
    return counts[0], counts[1], counts[2]


def _spin() -> None:
    while True:
        pass


@contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU while the block runs."""
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.join()


def run_all(tests: Sequence[str], runs: int, pytest_args: Sequence[str], workdir: Path) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    for run in range(1, runs + 1):
        report = workdir / f"run-{run}.xml"
        started = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        subprocess.run([*cmd, *pytest_args, *tests], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        took = time.monotonic() - started
        if not report.is_file():
            print(f"run {run}/{runs}: pytest wrote no report (collection failed?) after {took:.0f} s", flush=True)
            continue
        passed, failed, skipped = read_report(report, outcomes)
        print(
            f"run {run}/{runs}: {passed} passed, {failed} failed, {skipped} skipped in {took / 60:.1f} min", flush=True
        )
    return outcomes


def print_summary(outcomes: dict[str, Outcome], slowest: int) -> int:
    flaky = sorted(((t, o) for t, o in outcomes.items() if o.failed), key=lambda item: item[1].passed / item[1].runs)
    steady = [o for o in outcomes.values() if not o.failed and o.runs]
    print()
    if flaky:
        print("failed at least once (passed / runs):")
        for test_id, o in flaky:
            print(f"  {o.passed:>3}/{o.runs:<3} {test_id}\n          last: {o.last_failure}")
    skipped = sum(1 for o in outcomes.values() if o.skipped and not o.runs)
    print(f"passed every run: {len(steady)} tests; skipped every run: {skipped}")
    timed = sorted(((statistics.median(o.seconds), t) for t, o in outcomes.items() if o.seconds), reverse=True)[
        :slowest
    ]
    if timed:
        print(f"\nslowest {len(timed)} (median s over the runs that passed):")
        for seconds, test_id in timed:
            print(f"  {seconds:7.1f}  {test_id}")
    return 1 if flaky else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="*", default=["tests"], help="pytest paths or node ids (default: tests)")
    parser.add_argument("--runs", type=int, default=5, help="how many times to run them")
    parser.add_argument("--hog", type=int, default=0, help="processes spinning on the CPU meanwhile")
    parser.add_argument("--slowest", type=int, default=10, help="how many of the slowest tests to list")
    parser.add_argument("--pytest-arg", action="append", default=[], help="passed to pytest, repeatable")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(
        f"{' '.join(args.tests)}: {args.runs} runs"
        + (f", {args.hog} CPU hog(s) beside" if args.hog else "")
        + f" ({multiprocessing.cpu_count()} cores)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="sluicegate-flaky-") as tmp, cpu_hogs(args.hog):
        outcomes = run_all(args.tests, args.runs, args.pytest_arg, Path(tmp))
    return print_summary(outcomes, args.slowest)


if __name__ == "__main__":
    sys.exit(main())
