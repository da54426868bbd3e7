"""``sluicegate audit``: replay a source's control topics and check the protocol's invariants.

Exit codes: 0 no violation (summary printed), 1 violations (the first one named
with its topic, partition and offset), 2 the audit could not run (a setting is
missing, a topic does not exist, the broker is unreachable).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from sluicegate.api.errors import ConfigError
from sluicegate.audit.invariants import AuditResult, audit_records
from sluicegate.audit.kafka_source import (
    MissingTopicsError,
    ReadTimeoutError,
    read_control_topics_full,
)
from sluicegate.audit.report import print_report, to_json_bytes
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
    )


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
) -> None:
    """Replay NS.S.coordinator and NS.S.readers and check ownership, seq, epoch and watermark
    invariants. Exit 1 at a violation (naming the first record that breaks one), 0 otherwise."""
    bootstrap = bootstrap_servers or os.environ.get(BOOTSTRAP_ENV)
    if not bootstrap:
        raise _fail(
            f"no Kafka bootstrap servers: pass --bootstrap-servers or set {BOOTSTRAP_ENV}",
            json_output,
        )
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
