"""The audit's tables read whole at 80 columns (issue 24 item 5, issue 51 item 5): times
and reasons wrap instead of being cut to "…", and headers fit."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from rich.console import Console

from sluicegate.audit.invariants import AuditResult, SubtaskSummary
from sluicegate.audit.report import ownership_at_table, split_history_tables, subtasks_table
from sluicegate.audit.timeline import Ack, Ownership, SplitHistory, Timeline

T0 = 1_764_000_000_000


def render_at_80() -> list[str]:
    ownerships = [
        Ownership("orders-12", 3, 2, T0, 0, T0 + 123_456, 500, "released (session-timeout)"),
        Ownership("orders-12", 11, 14, T0 + 123_500, 500, None, None, None),
    ]
    acks = [Ack("orders-12", 11, 14, 1017, T0 + 130_000, 900, {"topic": "orders", "partition": 12, "position": 900})]
    timeline = Timeline(ownerships=ownerships, acks=acks, ts_by_position=[T0, T0 + 200_000], subtasks=[3, 11])
    console = Console(width=80, record=True, force_terminal=False)
    for table in split_history_tables(SplitHistory("orders-12", ownerships, acks), timeline):
        console.print(table)
    console.print(ownership_at_table({11: ["orders-12", "orders-13"], 3: []}, "2026-11-24T10:00:00Z", T0, timeline))
    return console.export_text().splitlines()


def test_the_split_history_fits_80_columns_and_cuts_nothing() -> None:
    lines = render_at_80()
    assert max(len(line) for line in lines) <= 80
    assert not [line for line in lines if "…" in line]
    text = "\n".join(lines)
    for whole in ("subtask", "attempt", "checkpoint", "(session-timeout)", "(+123.5s)", "(still owned)", "1017"):
        assert whole in text, whole


def test_the_subtasks_table_fits_80_columns_with_whole_headers() -> None:
    """Its headers were cut to "subta…" and two different "attem…"."""
    rows = [SubtaskSummary(s, 12, None if s else 12, s == 1, 123_456, 40_000, 9_999, 123_400, 17) for s in range(3)]
    result = cast(AuditResult, SimpleNamespace(summary=SimpleNamespace(subtasks=rows)))
    console = Console(width=80, record=True, force_terminal=False)
    console.print(subtasks_table(result))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80 and not [line for line in lines if "…" in line]
    text = "\n".join(lines)
    for whole in ("subtask", "attempt", "live", "last seq", "acked seq", "owned", "finished", "fenced", "- of 12"):
        assert whole in text, whole
