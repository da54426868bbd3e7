"""`sluicegate acls --source S`: the least-privilege ACLs of a source's principals."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from sluicegate.api.errors import ConfigError
from sluicegate.kafka.access import KafkaAccessError, require_access
from sluicegate.kafka.acls import acl_plan, apply_acls, kafka_acls_commands, principal_problem
from sluicegate.kafka.security import current_security
from sluicegate.protocol.names import validate_namespace, validate_source

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


def acls_command(
    source: Annotated[str, typer.Option("--source", "-s", help="The source S")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Topic namespace NS")] = "sluicegate",
    app_id: Annotated[
        str | None, typer.Option(help="The coordinator's app id (its consumer group); default NS.S.coordinator")
    ] = None,
    coordinator_principal: Annotated[
        str,
        typer.Option(
            help="Principal of the coordinator workers; with client certificates User:<subject DN, RFC 2253> "
            "(User:CN=coordinator,OU=eng) or what ssl.principal.mapping.rules make of it"
        ),
    ] = "User:coordinator",
    reader_principal: Annotated[str, typer.Option(help="Principal of readers and Spark drivers")] = "User:reader",
    audit_principal: Annotated[str, typer.Option(help="Principal of `sluicegate audit`")] = "User:audit",
    apply: Annotated[
        bool, typer.Option("--apply", help="Create the ACLs now (as a principal that may alter ACLs)")
    ] = False,
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", envvar=BOOTSTRAP_ENV, help="Kafka bootstrap (for --apply)")
    ] = None,
) -> None:
    """Print the kafka-acls.sh commands granting each principal of source S what it needs
    (and why), or create those ACLs with --apply."""
    try:
        validate_source(source, "--source")
        validate_namespace(namespace, "--namespace")
        for flag, principal in (
            ("--coordinator-principal", coordinator_principal),
            ("--reader-principal", reader_principal),
            ("--audit-principal", audit_principal),
        ):
            problem = principal_problem(principal)
            if problem is not None:
                raise ConfigError(flag, problem)
    except ConfigError as exc:
        typer.echo(f"sluicegate acls: {exc}", err=True)
        raise typer.Exit(2) from None
    plan = acl_plan(
        source,
        namespace,
        coordinator=coordinator_principal,
        reader=reader_principal,
        audit=audit_principal,
        app_id=app_id,
    )
    if not apply:
        for line in kafka_acls_commands(plan):
            typer.echo(line)
        return
    bootstrap = (bootstrap_servers or os.environ.get(BOOTSTRAP_ENV, "")).strip()
    if not bootstrap:
        typer.echo(f"sluicegate acls: --apply needs --bootstrap-servers or ${BOOTSTRAP_ENV}", err=True)
        raise typer.Exit(2)
    try:
        require_access(bootstrap)
        count = apply_acls(plan, bootstrap, current_security())
    except KafkaAccessError as exc:
        typer.echo(f"sluicegate acls: {exc}", err=True)
        raise typer.Exit(1) from None
    except Exception as exc:  # e.g. not authorized to alter ACLs: one line, no traceback
        typer.echo(f"sluicegate acls: creating the ACLs on {bootstrap} failed: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"created {count} ACLs for source {source!r} on {bootstrap}", err=True)
