"""`sluicegate topics apply|list|scale`: create, inspect and grow the control topics of a source."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sluicegate.kafka.access import KafkaAccessError, require_access
from sluicegate.kafka.replication_options import (
    AllowUnreplicatedOption,
    MinInsyncOption,
    ReplicationFactorOption,
    cli_replication,
)
from sluicegate.kafka.scale import ScaleError, scale_source
from sluicegate.kafka.topics import (
    TopicApplyError,
    TopicMismatchError,
    apply_topics,
    describe_topics,
)
from sluicegate.protocol.topics import DEFAULT_NAMESPACE, topic_specs

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"

topics_app = typer.Typer(
    name="topics",
    help="Create and inspect the control topics of a source (NS.S.coordinator, NS.S.readers, "
    "...), as declared in src/sluicegate_topics/topics.toml.",
    no_args_is_help=True,
    rich_markup_mode=None,  # click's layout wraps at any width; rich's panels cut option names at 80
    add_completion=False,
)

# Piped output: wide enough that topic names are never cut.
_out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
_err = Console(stderr=True, highlight=False)

SourceOption = Annotated[str, typer.Option("--source", help="Source name S (topics NS.S.*)")]
NamespaceOption = Annotated[str, typer.Option("--namespace", help="Topic namespace NS")]
BootstrapOption = Annotated[
    str | None,
    typer.Option("--bootstrap-servers", help=f"Kafka bootstrap (default: ${BOOTSTRAP_ENV})"),
]


def _fail(message: str, code: int = 1) -> typer.Exit:
    _err.print(f"[bold red]sluicegate topics:[/bold red] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def _bootstrap(value: str | None) -> str:
    bootstrap = (value or os.environ.get(BOOTSTRAP_ENV, "")).strip()
    if not bootstrap:
        raise _fail(
            f"no Kafka bootstrap address: pass --bootstrap-servers / set {BOOTSTRAP_ENV} "
            f"(for a local broker: export {BOOTSTRAP_ENV}=$(sluicegate broker start | tail -1))",
            2,
        )
    try:
        require_access(bootstrap)
    except KafkaAccessError as exc:
        raise _fail(str(exc), 1) from None
    return bootstrap


def _log_to_stderr() -> None:
    # aiokafka logs connection errors itself; the command reports them in its own words.
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    logger = logging.getLogger("sluicegate.topics")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("sluicegate topics: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)


@topics_app.command("apply")
def apply(
    source: SourceOption,
    max_parallelism: Annotated[
        int, typer.Option("--max-parallelism", help="Reader subtasks (partitions of NS.S.readers)")
    ],
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    bootstrap_servers: BootstrapOption = None,
    replication_factor: ReplicationFactorOption = None,
    min_insync_replicas: MinInsyncOption = None,
    allow_unreplicated: AllowUnreplicatedOption = False,
) -> None:
    """Create the missing topics of a source and check the existing ones (idempotent)."""
    _log_to_stderr()
    try:
        specs = topic_specs(namespace, source, max_parallelism)
        replication = cli_replication(replication_factor, min_insync_replicas, allow_unreplicated)
    except ValueError as exc:  # ConfigError too
        raise _fail(str(exc), 2) from None
    bootstrap = _bootstrap(bootstrap_servers)
    try:
        results = asyncio.run(apply_topics(bootstrap, specs, replication=replication))
    except TopicMismatchError as exc:
        raise _fail(str(exc)) from None
    except TopicApplyError as exc:
        raise _fail(str(exc)) from None
    table = Table(title=f"topics of source {source!r} on {bootstrap}", title_justify="left")
    table.add_column("topic", overflow="fold")
    table.add_column("partitions", justify="right")
    table.add_column("replicas", justify="right")
    table.add_column("min ISR", justify="right")
    table.add_column("cleanup.policy")
    table.add_column("status")
    for result in results:
        status = "[green]created[/green]" if result.created else "ok"
        if result.warnings:
            status += " [yellow](see the warnings above)[/yellow]"
        table.add_row(
            result.name,
            str(result.partitions),
            str(result.replication_factor),
            str(result.min_insync_replicas),
            result.cleanup_policy,
            status,
        )
    _out.print(table)


@topics_app.command("scale")
def scale(
    source: SourceOption,
    max_parallelism: Annotated[
        int, typer.Option("--max-parallelism", help="The new number of reader subtasks (only grows)")
    ],
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    bootstrap_servers: BootstrapOption = None,
) -> None:
    """Grow a source to more reader subtasks; its running coordinator serves them without a restart."""
    _log_to_stderr()
    bootstrap = _bootstrap(bootstrap_servers)
    if max_parallelism < 1:
        raise _fail(f"--max-parallelism must be >= 1, got {max_parallelism}", 2)
    try:
        result = asyncio.run(scale_source(bootstrap, namespace, source, max_parallelism))
    except ScaleError as exc:
        raise _fail(str(exc), 2) from None
    except (TopicMismatchError, TopicApplyError) as exc:
        raise _fail(str(exc)) from None
    if result.before == result.after:
        _out.print(f"source {source} already has {result.after} subtasks; told its coordinator again")
    else:
        _out.print(
            f"source {source}: {result.before} -> {result.after} subtasks "
            f"(subtasks {result.before}..{result.after - 1} may register now)"
        )


@topics_app.command("list")
def list_topics(
    source: SourceOption,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    bootstrap_servers: BootstrapOption = None,
) -> None:
    """Show the control topics of a source and whether they exist; exit 1 if any is missing."""
    _log_to_stderr()
    try:
        specs = topic_specs(namespace, source, 1)
    except ValueError as exc:
        raise _fail(str(exc), 2) from None
    bootstrap = _bootstrap(bootstrap_servers)
    try:
        infos = asyncio.run(describe_topics(bootstrap, [s.name for s in specs]))
    except TopicApplyError as exc:
        raise _fail(str(exc)) from None
    table = Table(title=f"topics of source {source!r} on {bootstrap}", title_justify="left")
    table.add_column("topic", overflow="fold")
    table.add_column("partitions", justify="right")
    table.add_column("replicas", justify="right")
    table.add_column("cleanup.policy")
    table.add_column("role")
    missing = 0
    for spec in specs:
        info = infos[spec.name]
        if info is None:
            missing += 1
            table.add_row(spec.name, "[red]missing[/red]", "", "", spec.role)
        else:
            table.add_row(
                spec.name,
                str(info.partitions),
                str(info.replication_factor),
                info.cleanup_policy,
                spec.role,
            )
    _out.print(table)
    if missing:
        raise _fail(f"{missing} of {len(specs)} topics are missing; run `sluicegate topics apply`")
