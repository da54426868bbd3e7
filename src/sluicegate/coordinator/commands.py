"""`sluicegate coordinator`: create the topics, then run the Faust app as a worker."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer

from sluicegate.api.errors import ConfigError
from sluicegate.connectors import load_source, parse_options
from sluicegate.coordinator.settings import CoordinatorSettings, resolve_bootstrap

log = logging.getLogger("sluicegate.coordinator")


def coordinator_command(
    source: Annotated[str, typer.Option(help="Source name S (topics NS.S.*)")],
    connector: Annotated[str, typer.Option(help="Connector name (entry point in sluicegate.connectors)")],
    max_parallelism: Annotated[int, typer.Option(help="Number of reader subtasks (partitions of NS.S.readers)")],
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="Connector option key=value (repeatable)")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap (default: $KAFKA_BOOTSTRAP_SERVERS)")] = None,
    namespace: Annotated[str, typer.Option(help="Topic namespace NS")] = "sluicegate",
    session_timeout_ms: Annotated[int, typer.Option(help="A reader silent this long has failed")] = 10_000,
    reader_departure_timeout_ms: Annotated[int, typer.Option(help="A failed subtask's checkpointed splits return after this")] = 60_000,
    watermark_announce_interval_ms: Annotated[int, typer.Option()] = 1_000,
    max_watermark_drift_ms: Annotated[int | None, typer.Option(help="Watermark alignment bound (off if unset)")] = None,
    web_port: Annotated[int | None, typer.Option(help="Serve Faust's web endpoints on this port")] = None,
) -> None:
    """Run the coordinator of one source as a Faust worker (stop with SIGTERM or Ctrl-C)."""
    try:
        settings = CoordinatorSettings(
            source=source,
            connector=connector,
            max_parallelism=max_parallelism,
            bootstrap_servers=resolve_bootstrap(bootstrap_servers),
            options=parse_options(option or []),
            namespace=namespace,
            session_timeout_ms=session_timeout_ms,
            reader_departure_timeout_ms=reader_departure_timeout_ms,
            watermark_announce_interval_ms=watermark_announce_interval_ms,
            max_watermark_drift_ms=max_watermark_drift_ms,
            web_port=web_port,
        )
        load_source(settings.connector, settings.options)  # fail on bad connector options now
    except ConfigError as exc:
        typer.echo(f"sluicegate coordinator: {exc}", err=True)
        raise typer.Exit(2) from None
    run_coordinator(settings)


def run_coordinator(settings: CoordinatorSettings) -> None:
    import faust

    from sluicegate.coordinator.faust_app import build_app
    from sluicegate.transport.topics import apply_topics
    from sluicegate_topics import topic_specs

    specs = topic_specs(settings.namespace, settings.source, settings.max_parallelism)
    asyncio.run(apply_topics(settings.bootstrap_servers, specs))
    app = build_app(settings)
    worker = faust.Worker(app, loglevel="INFO", quiet=True)
    worker.execute_from_commandline()
