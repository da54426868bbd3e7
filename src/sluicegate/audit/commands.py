"""``sluicegate audit``: replay a source's control topics and check the protocol's invariants.

With ``--timeline FILE`` it draws the history instead (timeline_plot.py), with
``--split ID`` it prints one split's history, with ``--at WHEN`` who owned what at
that point (WHEN: a cseq, or an ISO 8601 time, UTC unless it names a zone). With
``--follow`` it keeps running and checks each record as it arrives (follow.py),
printing each violation with the record that showed it; ``--fail-fast`` ends it at
the first, ``--metrics-port`` serves Prometheus metrics.

Exit codes: 0 no violation (summary printed), 1 violations (the first one named
with its topic, partition and offset), 2 the audit could not run (a setting is
missing, a topic does not exist, the broker is unreachable).
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import duration_ms
from sluicegate.audit.follow import Finding, FollowSnapshot
from sluicegate.audit.follow_kafka import follow_control_topics, serve_metrics
from sluicegate.audit.invariants import AuditResult, audit_records
from sluicegate.audit.kafka_source import (
    MissingTopicsError,
    ReadTimeoutError,
    read_control_topics_full,
)
from sluicegate.audit.replay import ReplayRecord, replay
from sluicegate.audit.report import (
    finding_line,
    ownership_at_table,
    print_report,
    progress_line,
    reader_event_line,
    split_event_line,
    split_history_tables,
    to_json_bytes,
)
from sluicegate.audit.timeline import PointNotFound, Timeline, build_timeline, ownership_at, position_at, split_history
from sluicegate.audit.timeline_plot import UnsupportedFormat, draw_timeline, require_plots
from sluicegate.extras import MissingExtra
from sluicegate.kafka.access import KafkaAccessError, require_access
from sluicegate.protocol.names import validate_source

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


async def run_audit(bootstrap: str, source: str, ns: str = "sluicegate") -> AuditResult:
    """Read NS.S.coordinator and NS.S.readers (committed records only) and audit them."""
    read = await read_control_topics_full(bootstrap, source, ns)
    return audit_records(
        read.inbox,
        read.readers,
        source=source,
        namespace=ns,
        max_parallelism=read.readers_partitions,
        cut=read.cut,
    )


async def read_timeline(bootstrap: str, source: str, ns: str = "sluicegate") -> Timeline:
    """Read both control topics and rebuild the source's timeline (timeline.py)."""
    read = await read_control_topics_full(bootstrap, source, ns)
    merged = replay(read.inbox, read.readers, inbox_topic=read.inbox_topic, readers_topic=read.readers_topic)
    return build_timeline(merged.records, source=source, max_parallelism=read.readers_partitions)


def _fail(message: str, json_output: bool) -> typer.Exit:
    if json_output:
        sys.stdout.buffer.write(b'{"ok": false, "error": ' + orjson.dumps(message) + b"}\n")
        sys.stdout.flush()
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def audit_command(
    source: Annotated[str, typer.Option("--source", "-s", help="The source to audit (its name S).")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Topic namespace prefix NS.")] = "sluicegate",
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            "--bootstrap-servers",
            "-b",
            envvar=BOOTSTRAP_ENV,
            help=f"Kafka bootstrap servers (default: ${BOOTSTRAP_ENV}).",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    timeline: Annotated[
        Path | None,
        typer.Option("--timeline", help="Draw the history to FILE (.png, .svg or .pdf): one lane per subtask."),
    ] = None,
    last: Annotated[
        str | None,
        typer.Option("--last", help="With --timeline: draw only the last DURATION of the history (90s, 10m, 2h ...)."),
    ] = None,
    split: Annotated[
        str | None, typer.Option("--split", help="Print one split's history: owners over time, acknowledged positions.")
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Print who owned which split at WHEN: a cseq (integer: the coordinator's sequence number "
            "of its readers-topic records) or an ISO 8601 time (UTC unless it names a zone).",
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Keep running: check each record as it arrives, print violations."),
    ] = False,
    fail_fast: Annotated[
        bool, typer.Option("--fail-fast", help="With --follow: exit 1 at the first violation.")
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", help="With --follow: serve Prometheus metrics on this port (/metrics)."),
    ] = None,
) -> None:
    """Replay NS.S.coordinator and NS.S.readers and check ownership, seq, epoch and watermark
    invariants. Exit 1 at a violation (naming the first record that breaks one), 0 otherwise.
    With --timeline, --split or --at: draw or question the history instead (docs/audit.md).
    With --follow: keep checking as records arrive until stopped (exit 1 if anything was found)."""
    bootstrap = bootstrap_servers or os.environ.get(BOOTSTRAP_ENV)
    if not bootstrap:
        raise _fail(
            f"no Kafka bootstrap servers: pass --bootstrap-servers or set {BOOTSTRAP_ENV}",
            json_output,
        )
    if (fail_fast or metrics_port is not None) and not follow:
        raise _fail("--fail-fast and --metrics-port go with --follow", json_output)
    if last is not None and timeline is None:
        raise _fail("--last goes with --timeline", json_output)
    try:
        window_ms = None if last is None else duration_ms("--last", last)
    except ConfigError as exc:
        raise _fail(str(exc), json_output) from None
    if follow:
        if json_output or timeline is not None or at is not None:
            raise _fail("--follow prints as it goes: not with --json, --timeline or --at", json_output)
        _follow(bootstrap, source, namespace, fail_fast, metrics_port, split)
        return
    if timeline is not None or split is not None or at is not None:
        _explain(bootstrap, source, namespace, timeline, split, at, window_ms)
        return
    try:
        validate_source(source, "--source")
        require_access(bootstrap)
        result = asyncio.run(run_audit(bootstrap, source, namespace))
    except (ConfigError, MissingTopicsError, ReadTimeoutError, KafkaAccessError) as exc:
        raise _fail(str(exc), json_output) from None
    except Exception as exc:  # broker unreachable and the like: say so, no traceback
        raise _fail(
            f"could not read the control topics of {source!r} from {bootstrap}: {exc!r}",
            json_output,
        ) from None
    if json_output:
        sys.stdout.buffer.write(to_json_bytes(result) + b"\n")
        sys.stdout.flush()
    else:
        print_report(result, Console())
    if not result.ok:
        raise typer.Exit(code=1)


def _follow(
    bootstrap: str, source: str, namespace: str, fail_fast: bool, metrics_port: int | None, split: str | None
) -> None:
    """--follow: run until Ctrl-C or SIGTERM (or the first violation with --fail-fast);
    with --split, print that split's history as it grows too."""
    console = Console()
    found: list[Finding] = []

    def split_events(events: list[tuple[ReplayRecord, str]]) -> None:
        for _, event in events:
            console.print(split_event_line(str(split), event), highlight=False, soft_wrap=True)

    def report(findings: list[Finding]) -> bool:
        for finding in findings:
            console.print(finding_line(finding), highlight=False, soft_wrap=True)
        found.extend(findings)
        return not fail_fast

    def progress(s: FollowSnapshot) -> None:
        console.print(progress_line(s), highlight=False, soft_wrap=True)

    def reader_events(events: list[str]) -> None:
        for event in events:
            console.print(reader_event_line(event), highlight=False, soft_wrap=True)

    try:
        validate_source(source, "--source")
        require_access(bootstrap)
        collector = None if metrics_port is None else serve_metrics(source, metrics_port)
        console.print(
            f"following {source} on {bootstrap}"
            + ("" if metrics_port is None else f"; metrics on :{metrics_port}/metrics"),
            highlight=False,
        )
        follow_source = functools.partial(
            follow_control_topics,
            bootstrap,
            source,
            namespace,
            report,
            collector=collector,
            on_progress=progress,
            split_id=split,
            on_split_events=split_events,
            on_reader_events=reader_events,
        )
        asyncio.run(_until_signalled(follow_source))
    except (ConfigError, MissingTopicsError, KafkaAccessError, OSError) as exc:
        raise _fail(str(exc), False) from None
    if found:
        raise typer.Exit(code=1)


async def _until_signalled(run: Callable[..., Awaitable[None]]) -> None:
    """``run(stop=event)``, the event set by Ctrl-C or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await run(stop=stop)


def _explain(
    bootstrap: str,
    source: str,
    namespace: str,
    path: Path | None,
    split: str | None,
    at: str | None,
    window_ms: int | None = None,
) -> None:
    """--timeline (of the last ``window_ms`` if given) / --split / --at: questions over the
    rebuilt history, not the invariant check."""
    console = Console()
    try:
        validate_source(source, "--source")
        if path is not None and path.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise UnsupportedFormat(f"--timeline {path}: the file must end in .png, .svg or .pdf")
        if path is not None:
            require_plots()  # before the control topics are read, not after
        history = asyncio.run(read_timeline(bootstrap, source, namespace))
        position = None if at is None else position_at(history, at)
    except (ConfigError, MissingTopicsError, ReadTimeoutError, PointNotFound, UnsupportedFormat, MissingExtra) as exc:
        raise _fail(str(exc), False) from None
    except Exception as exc:
        raise _fail(f"could not read the control topics of {source!r} from {bootstrap}: {exc!r}", False) from None
    if path is not None:
        since_ms = None if window_ms is None else history.end_ms - window_ms
        draw_timeline(history, path, title=f"source {source}", since_ms=since_ms)
        span = "" if window_ms is None else f" (its last {window_ms / 1000:g} s)"
        console.print(
            f"timeline of {source}{span}: {len(history.subtasks)} subtasks, {len(history.split_ids)} splits, "
            f"{len(history.marks)} events -> {escape(str(path))}",
            highlight=False,
            soft_wrap=True,
        )
    if split is not None:
        found = split_history(history, split)
        if not found.ownerships and not found.acks:
            raise _fail(f"split {split!r} never appears in the history of {source!r}", False)
        for table in split_history_tables(found, history):
            console.print(table)
    if at is not None and position is not None:
        owned = ownership_at(history, position)
        console.print(ownership_at_table(owned, at, history.ts_by_position[position], history))
