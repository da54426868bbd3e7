"""`sluicegate coordinator`: create the topics, then run the Faust app as a worker."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Annotated

import typer

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate.connectors import parse_options
from sluicegate.coordinator.settings import CoordinatorSettings, SourceSettings, resolve_bootstrap
from sluicegate.kafka.access import KafkaAccessError, require_access
from sluicegate.kafka.replication_options import (
    AllowUnreplicatedOption,
    MinInsyncOption,
    ReplicationFactorOption,
    cli_replication,
)
from sluicegate.protocol.timing import SESSION_TIMEOUT_MS

log = logging.getLogger("sluicegate.coordinator")


def coordinator_command(
    source: Annotated[str | None, typer.Option(help="Source name S (topics NS.S.*); or use --config")] = None,
    connector: Annotated[str | None, typer.Option(help="Connector name (entry point in sluicegate.connectors)")] = None,
    max_parallelism: Annotated[int | None, typer.Option(help="Reader subtasks (partitions of NS.S.readers)")] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="Connector option key=value (repeatable)")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="sources.toml with one [[source]] table per source")] = None,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap (default: $KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="Topic namespace NS (default sluicegate)")] = None,
    session_timeout_ms: Annotated[int, typer.Option(help="A reader silent this long has failed")] = SESSION_TIMEOUT_MS,
    reader_departure_timeout_ms: Annotated[
        int, typer.Option(help="A failed subtask's checkpointed splits return after this")
    ] = 60_000,
    watermark_announce_interval_ms: Annotated[
        int, typer.Option(help="Every live reader hears the low watermark at least this often")
    ] = 1_000,
    max_watermark_drift_ms: Annotated[int | None, typer.Option(help="Watermark alignment bound (off if unset)")] = None,
    app_id: Annotated[str | None, typer.Option(help="Faust app id; workers with the same id share the sources")] = None,
    web_port: Annotated[int | None, typer.Option(help="Serve /health, /metrics, /sources/S on this port")] = None,
    web_bind: Annotated[str, typer.Option(help="Address the web server binds to")] = "127.0.0.1",
    takeover_silence_ms: Annotated[
        int | None,
        typer.Option(help="Take a source over once its coordinator committed nothing this long; 0 = off [2000]"),
    ] = None,
    replication_factor: ReplicationFactorOption = None,
    min_insync_replicas: MinInsyncOption = None,
    allow_unreplicated: AllowUnreplicatedOption = False,
) -> None:
    """Run a coordinator worker (a Faust app) for one source, or for every source of --config.
    Start several with the same arguments: one is active per source, the others take over."""
    try:
        settings = _settings(
            source,
            connector,
            max_parallelism,
            option or [],
            config,
            bootstrap_servers,
            namespace,
            session_timeout_ms,
            reader_departure_timeout_ms,
            watermark_announce_interval_ms,
            max_watermark_drift_ms,
            app_id,
            web_port,
            web_bind,
        )
        if takeover_silence_ms is not None:
            settings = dataclasses.replace(settings, takeover_silence_ms=takeover_silence_ms)
        if replication_factor is not None or min_insync_replicas is not None or allow_unreplicated:
            settings = dataclasses.replace(
                settings,
                replication=cli_replication(
                    replication_factor, min_insync_replicas, allow_unreplicated, settings.replication
                ),
            )
    except ConfigError as exc:
        typer.echo(f"sluicegate coordinator: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        require_access(settings.bootstrap_servers)
    except KafkaAccessError as exc:
        typer.echo(f"sluicegate coordinator: {exc}", err=True)
        raise typer.Exit(1) from None
    run_coordinator(settings)


def _settings(
    source: str | None,
    connector: str | None,
    max_parallelism: int | None,
    option: list[str],
    config: Path | None,
    bootstrap_servers: str | None,
    namespace: str | None,
    session_timeout_ms: int,
    reader_departure_timeout_ms: int,
    watermark_announce_interval_ms: int,
    max_watermark_drift_ms: int | None,
    app_id: str | None,
    web_port: int | None,
    web_bind: str,
) -> CoordinatorSettings:
    if config is not None:
        if source or connector or max_parallelism is not None or option:
            raise ConfigError("--config", "give either --config or --source/--connector/--max-parallelism/--option")
        return CoordinatorSettings.from_toml(
            config, bootstrap_servers, namespace=namespace, app_id=app_id, web_port=web_port, web_bind=web_bind
        )
    for value, setting in ((source, "--source"), (connector, "--connector"), (max_parallelism, "--max-parallelism")):
        if value is None:
            raise ConfigError(setting, "is required (or give --config)")
    assert source is not None and connector is not None and max_parallelism is not None
    single = SourceSettings(
        source=source,
        connector=connector,
        max_parallelism=max_parallelism,
        options=parse_options(option),
        session_timeout_ms=session_timeout_ms,
        reader_departure_timeout_ms=reader_departure_timeout_ms,
        watermark_announce_interval_ms=watermark_announce_interval_ms,
        max_watermark_drift_ms=max_watermark_drift_ms,
    )
    return CoordinatorSettings(
        sources=(single,),
        bootstrap_servers=resolve_bootstrap(bootstrap_servers),
        namespace=namespace or "sluicegate",
        app_id=app_id,
        web_port=web_port,
        web_bind=web_bind,
    )


def run_coordinator(settings: CoordinatorSettings) -> None:
    import faust

    from sluicegate.coordinator.faust_app import build_app, check_sources, prepare_topics
    from sluicegate.kafka.topics import TopicApplyError
    from sluicegate.protocol.definition import DefinitionMismatchError

    try:
        asyncio.run(prepare_topics(settings))
        asyncio.run(check_sources(settings))
    except TopicApplyError as exc:  # e.g. not authorized to create a missing topic: one line
        typer.echo(f"sluicegate coordinator: {exc}", err=True)
        raise typer.Exit(1) from None
    except DefinitionMismatchError as exc:
        typer.echo(f"sluicegate coordinator: {exc.problem}", err=True)
        raise typer.Exit(2) from None
    except SourceError as exc:  # what it was told to read does not exist
        typer.echo(f"sluicegate coordinator: {exc}", err=True)
        raise typer.Exit(2) from None
    app = build_app(settings)
    worker = faust.Worker(app, loglevel="INFO", quiet=True)
    worker.execute_from_commandline()
    refusal = getattr(app, "sluicegate_refusal", None)
    if refusal is not None:
        typer.echo(f"sluicegate coordinator: {refusal}", err=True)
        raise typer.Exit(2)
