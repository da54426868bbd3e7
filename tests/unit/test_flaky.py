"""The flaky-test runner's bookkeeping: JUnit XML reports of several runs into pass rates."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicegate.devtools.flaky import Outcome, print_summary, read_report

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_a" name="test_steady" time="1.5"/>
<testcase classname="tests.integration.test_a" name="test_sometimes" time="2.0">{sometimes}</testcase>
<testcase classname="tests.integration.test_b" name="test_skipped" time="0.0"><skipped message="no cargo"/></testcase>
</testsuite></testsuites>
"""


def write(tmp_path: Path, run: int, fails: bool) -> Path:
    path = tmp_path / f"run-{run}.xml"
    failure = '<failure message="AssertionError: 3 != 4&#10;more">trace</failure>' if fails else ""
    path.write_text(REPORT.format(sometimes=failure), encoding="utf-8")
    return path


def test_runs_add_up_per_test_and_a_test_that_failed_once_is_reported_with_its_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes: dict[str, Outcome] = {}
    counts = [read_report(write(tmp_path, run, fails=run == 2), outcomes) for run in range(1, 4)]
    assert counts == [(2, 0, 1), (1, 1, 1), (2, 0, 1)]
    sometimes = outcomes["tests/integration/test_a.py::test_sometimes"]
    assert (sometimes.passed, sometimes.failed, sometimes.last_failure) == (2, 1, "AssertionError: 3 != 4")
    assert outcomes["tests/integration/test_b.py::test_skipped"].skipped == 3

    assert print_summary(outcomes, slowest=1) == 1
    out = capsys.readouterr().out
    assert "2/3   tests/integration/test_a.py::test_sometimes" in out
    assert "passed every run: 1 tests; skipped every run: 1" in out
    assert "2.0  tests/integration/test_a.py::test_sometimes" in out  # the slowest, by median


def test_all_green_exits_zero(tmp_path: Path) -> None:
    outcomes: dict[str, Outcome] = {}
    read_report(write(tmp_path, 1, fails=False), outcomes)
    assert print_summary(outcomes, slowest=0) == 0
