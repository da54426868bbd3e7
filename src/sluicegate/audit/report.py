"""Audit results for people (rich tables) and for machines (one JSON object)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sluicegate.audit.follow import Finding, FollowSnapshot
from sluicegate.audit.invariants import AuditResult
from sluicegate.audit.timeline import SplitHistory, Timeline
from sluicegate.protocol.event_time import event_time_text

MAX_VIOLATIONS_SHOWN = 20


def to_json(result: AuditResult) -> dict[str, Any]:
    return result.to_json()


def to_json_bytes(result: AuditResult) -> bytes:
    return orjson.dumps(to_json(result), option=orjson.OPT_SORT_KEYS)


def violations_table(result: AuditResult, limit: int = MAX_VIOLATIONS_SHOWN) -> Table:
    table = Table(title=f"{len(result.violations)} violation(s)", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("kind")
    table.add_column("topic")
    table.add_column("partition", justify="right")
    table.add_column("offset", justify="right")
    table.add_column("what broke", overflow="fold")
    for i, v in enumerate(result.violations[:limit], 1):
        loc = v.location
        table.add_row(
            str(i),
            v.kind.value,
            escape(loc.topic),
            str(loc.partition),
            str(loc.offset),
            escape(v.message),
        )
    return table


def subtasks_table(result: AuditResult) -> Table:
    table = Table(title="subtasks", title_justify="left")
    for name in (
        "subtask",
        "attempt",
        "live",
        "last seq",
        "acked seq",
        "owned",
        "finished",
        "fenced",
    ):
        # a header wraps between its words, never inside one: at 80 columns they all fit
        table.add_column(name, justify="right", min_width=max(len(word) for word in name.split()))
    for s in result.summary.subtasks:
        table.add_row(
            str(s.subtask),
            f"{'-' if s.current_attempt is None else s.current_attempt} of {s.attempts}",
            "yes" if s.live else "no",
            str(s.last_seq),
            str(s.acked_seq),
            str(s.owned),
            str(s.finished),
            str(s.fenced_messages),
        )
    return table


def totals_table(result: AuditResult) -> Table:
    summary = result.summary
    table = Table(title="totals", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", overflow="fold")
    released = ", ".join(f"{reason}: {n}" for reason, n in summary.released_by_reason.items()) or "none"
    undecodable = ", ".join(f"{topic}: {n}" for topic, n in summary.undecodable.items())
    rows = [
        ("replay order", summary.ordering.value),
        ("judged", "the records as given" if summary.cut is None else summary.cut.describe()),
        ("records replayed", f"{summary.inbox_records} inbox, {summary.readers_records} readers"),
        ("undecodable (dead-letter material)", f"{summary.undecodable_total} ({undecodable})"),
        ("splits ever assigned", f"{summary.splits_assigned} ({summary.assignments} assignments)"),
        ("splits finished", str(summary.splits_finished)),
        ("splits currently owned", str(summary.splits_owned)),
        ("splits released", released),
        ("fenced reader messages", str(summary.fenced_messages)),
        ("messages from another incarnation (dropped)", str(summary.other_incarnation_messages)),
        ("rejected reader messages", str(summary.rejected_messages)),
        ("ignored checkpoint acks", str(summary.ignored_acks)),
        ("records in pieces never whole", ", ".join(f"{t}: {n}" for t, n in summary.incomplete_records.items()) or "0"),
        ("epochs", ", ".join(map(str, summary.epochs)) or "none"),
        ("low watermark", event_time_text(summary.low_watermark)),
        ("last cseq", "none" if summary.last_cseq is None else str(summary.last_cseq)),
        ("source redefined", "; ".join(summary.redefinitions) or "never"),
    ]
    for what, value in rows:
        table.add_row(what, escape(value))
    return table


def messages_table(result: AuditResult) -> Table:
    table = Table(title="messages", title_justify="left")
    table.add_column("topic:type")
    table.add_column("count", justify="right")
    for name, n in result.summary.messages_by_type.items():
        table.add_row(escape(name), str(n))
    return table


def print_report(result: AuditResult, console: Console | None = None) -> None:
    console = console or Console()
    if result.violations:
        console.print(violations_table(result))
        hidden = len(result.violations) - MAX_VIOLATIONS_SHOWN
        if hidden > 0:
            console.print(f"... and {hidden} more violation(s) (use --json for all)")
    console.print(subtasks_table(result))
    console.print(totals_table(result))
    console.print(messages_table(result))
    for note in result.summary.notes:
        console.print(f"note: {escape(note)}", soft_wrap=True)
    first = result.first_violation
    if first is None:
        console.print("[green]audit ok[/green]: no invariant of docs/protocol.md is broken")
    else:
        console.print(f"[red]audit failed[/red]: first violation at {escape(str(first))}", soft_wrap=True)


# -- timeline questions (sluicegate audit --split / --at) ---------------------------------------


def _when(ts_ms: int | None, t0: int) -> str:
    if ts_ms is None:
        return "-"
    stamp = datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
    return f"{stamp} (+{(ts_ms - t0) / 1000:.1f}s)"


def split_history_tables(history: SplitHistory, timeline: Timeline) -> list[Table]:
    t0 = timeline.start_ms
    owners = Table(title=f"split {escape(history.split_id)}: owners", title_justify="left")
    # numbers keep their column; times and reasons wrap (at 80 columns rich would cut them)
    for name in ("subtask", "attempt"):
        owners.add_column(name, no_wrap=True, min_width=len(name))
    for name in ("from (UTC)", "until (UTC)", "ended by"):
        owners.add_column(name, overflow="fold")
    for o in history.ownerships:
        owners.add_row(
            str(o.subtask),
            "-" if o.attempt is None else str(o.attempt),
            _when(o.start_ms, t0),
            _when(o.end_ms, t0) if o.end_ms is not None else "(still owned)",
            o.ended_by or "-",
        )
    acks = Table(title=f"split {escape(history.split_id)}: acknowledged positions", title_justify="left")
    acks.add_column("at (UTC)", overflow="fold")
    for name in ("subtask", "attempt", "checkpoint"):
        acks.add_column(name, no_wrap=True, min_width=len(name))
    acks.add_column("position", overflow="fold")
    previous: dict[str, Any] | None = None
    for a in history.acks:
        if a.state == previous:
            continue  # an unchanged position acknowledged again says nothing new
        previous = a.state
        acks.add_row(
            _when(a.ts_ms, t0),
            str(a.subtask),
            "-" if a.attempt is None else str(a.attempt),
            str(a.checkpoint_id),
            escape(orjson.dumps(a.state, option=orjson.OPT_SORT_KEYS).decode()),
        )
    return [owners, acks]


def ownership_at_table(owned: dict[int, list[str]], when: str, ts_ms: int, timeline: Timeline) -> Table:
    table = Table(title=f"ownership at {escape(when)}: {_when(ts_ms, timeline.start_ms)} UTC", title_justify="left")
    table.add_column("subtask", justify="right")
    table.add_column("splits", justify="right")
    table.add_column("split ids", overflow="fold")
    for subtask, ids in owned.items():
        table.add_row(str(subtask), str(len(ids)), escape(", ".join(ids)) or "-")
    return table


def finding_line(finding: Finding) -> str:
    """One line per violation found by ``audit --follow``: when, what, where, and the record."""
    v, env = finding.violation, finding.record.env
    record = f"{env.type} for subtask {env.subtask} attempt {env.attempt}" + (
        "" if env.cseq is None else f", cseq {env.cseq}, epoch {env.epoch}"
    )
    return f"{_now()} VIOLATION {v.kind.value} at {v.location}: {v.message} [{record}]"


def progress_line(s: FollowSnapshot) -> str:
    """The periodic status of ``audit --follow``."""
    lag = sum(s.lag.values())
    found = sum(s.violations.values())
    return (
        f"{_now()} checked {s.applied:,} records, {lag:,} behind; splits owned {s.splits.get('owned', 0):,}, "
        f"finished {s.splits.get('finished', 0):,}; {s.readers_live} readers live; "
        + ("no violation" if not found else f"{found} violations")
    )


def split_event_line(split_id: str, event: str) -> str:
    """One line of ``audit --split ID --follow``: what a record did to the split."""
    return f"{_now()} {split_id}: {event}"


def reader_event_line(event: str) -> str:
    """A line of ``audit --follow`` when a reader joins, leaves or fails."""
    return f"{_now()} {event}"


def _now() -> str:
    """The time a ``--follow`` line is printed (UTC)."""
    return datetime.now(UTC).strftime("%H:%M:%S")
