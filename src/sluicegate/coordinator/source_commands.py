"""`sluicegate source redefine`: change what a source is, recorded in its control log."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from sluicegate.api.errors import ConfigError
from sluicegate.connectors import load_source, parse_options
from sluicegate.coordinator.redefine import RedefineError, redefine_source
from sluicegate.coordinator.settings import resolve_bootstrap
from sluicegate.kafka.access import KafkaAccessError, require_access
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.names import validate_namespace, validate_source

source_app = typer.Typer(
    name="source",
    help="Change what a source is (its connector and options), on purpose.",
    no_args_is_help=True,
    rich_markup_mode=None,  # click's layout wraps at any width; rich's panels cut option names at 80
    add_completion=False,
)


@source_app.command("redefine")
def redefine_command(
    source: Annotated[str, typer.Option(help="Source name S (topics NS.S.*)")],
    connector: Annotated[str, typer.Option(help="The connector the source reads with from now on")],
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="Connector option key=value (repeatable)")
    ] = None,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap (default: $KAFKA_BOOTSTRAP_SERVERS)")
    ] = None,
    namespace: Annotated[str, typer.Option(help="Topic namespace NS")] = "sluicegate",
) -> None:
    """Give a source a new definition. The coordinator serving the old one is fenced (it stops);
    start coordinators, readers and Spark queries with the new options afterwards. The change is
    a SourceRedefined record in the control log: `sluicegate audit` shows it."""
    try:
        validate_source(source, "--source")
        validate_namespace(namespace, "--namespace")
        options = parse_options(option or [])
        load_source(connector, options)  # a bad connector or option fails now, named
        definition = SourceDefinition.of(connector, options)
        bootstrap = resolve_bootstrap(bootstrap_servers)
        require_access(bootstrap)
        result = asyncio.run(redefine_source(bootstrap, namespace, source, definition))
    except ConfigError as exc:
        typer.echo(f"sluicegate source redefine: {exc}", err=True)
        raise typer.Exit(2) from None
    except (KafkaAccessError, RedefineError) as exc:
        typer.echo(f"sluicegate source redefine: {exc}", err=True)
        raise typer.Exit(1) from None
    if not result.changed:
        typer.echo(f"source {source} already has this definition ({definition.describe()}); nothing changed")
        return
    changes = result.previous.differences(definition) if result.previous else [definition.describe()]
    typer.echo(f"source {source} redefined:")
    for line in changes:
        typer.echo(f"  {line.replace('(given)', '(new)').replace('(source)', '(old)')}")
    typer.echo("its coordinator was fenced: start coordinators, readers and queries with the new options")
