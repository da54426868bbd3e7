"""`sluicegate broker start|stop|status`: a local Kafka broker for development and tests.

``start`` prints progress on stderr and the bootstrap address alone as the last line of
stdout, so ``export KAFKA_BOOTSTRAP_SERVERS=$(sluicegate broker start | tail -1)`` works.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sluicegate.devtools.broker.local import (
    KAFKA_VERSION,
    BrokerError,
    LocalKafkaBroker,
    artifacts_dir,
    default_run_dir,
    ensure_kafka_artifacts,
)

broker_app = typer.Typer(
    name="broker",
    help=f"A local single-node Apache Kafka {KAFKA_VERSION} broker (KRaft) run from Maven "
    "Central jars (needs java and mvn; no Docker).",
    no_args_is_help=True,
    rich_markup_mode=None,  # click's layout wraps at any width; rich's panels cut option names at 80
    add_completion=False,
)

_err = Console(stderr=True, highlight=False)
_out = Console(highlight=False)

DirOption = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help="Run directory of the broker (default: $SLUICEGATE_CACHE_DIR/broker or ~/.cache/sluicegate/broker)",
    ),
]


def _echo(message: str) -> None:
    _err.print(f"[dim]sluicegate broker:[/dim] {message}", markup=True, soft_wrap=True)


def _broker(run_dir: Path | None, keep: bool = False) -> LocalKafkaBroker:
    return LocalKafkaBroker(run_dir=run_dir or default_run_dir(), keep=keep, echo=_echo)


@broker_app.command("start")
def start(
    run_dir: DirOption = None,
    port: Annotated[int | None, typer.Option(help="Broker port (default: a free one)")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the broker")] = 60.0,
    keep: Annotated[bool, typer.Option(help="Reuse the data of a previous --keep stop")] = False,
    secure: Annotated[
        Path | None,
        typer.Option(
            help="Secured mode: a SASL_SSL listener (SCRAM-SHA-512) with ACLs enforced; the CA, the broker "
            "keystore and each user's password and env file are kept in this directory"
        ),
    ] = None,
    user: Annotated[
        list[str] | None,
        typer.Option(help="A user to create in secured mode, repeatable (default: coordinator, reader, audit)"),
    ] = None,
    mtls: Annotated[
        bool,
        typer.Option(
            "--mtls",
            help="With --secure: an SSL listener requiring client certificates (mutual TLS) instead of SCRAM; "
            "each user gets a certificate signed by the CA, its principal User:<name>",
        ),
    ] = False,
) -> None:
    """Start a detached broker (or find the running one); print its bootstrap address last."""
    broker = _broker(run_dir, keep=keep)
    broker.port = port
    if secure is not None:
        broker.secure_dir = secure.expanduser().resolve()
        if user:
            broker.secure_users = tuple(user)
        broker.secure_mode = "mtls" if mtls else "scram"
    elif mtls:
        _err.print("sluicegate broker: --mtls needs --secure DIR (where the certificates are kept)", soft_wrap=True)
        raise typer.Exit(2)
    try:
        bootstrap = broker.start(timeout_s=timeout)
    except BrokerError as exc:
        _err.print(
            f"[bold red]sluicegate broker: {exc}[/bold red]",
            markup=True,
            soft_wrap=True,
            highlight=False,
        )
        raise typer.Exit(1) from None
    _err.print(
        f"[green]Kafka {KAFKA_VERSION} is running[/green] at [bold]{bootstrap}[/bold]; "
        f"stop it with `sluicegate broker stop"
        f"{' --dir ' + str(run_dir) if run_dir else ''}`",
        markup=True,
        soft_wrap=True,
    )
    if broker.secure is not None:
        _err.print(
            f"secured ({broker.secure_mode}): clients log in with `set -a; . {broker.secure.directory}/users/USER.env` "
            f"(users: {', '.join(broker.secure.users())}; admin is a super user)",
            soft_wrap=True,
            highlight=False,
        )
    print(bootstrap, flush=True)


@broker_app.command("stop")
def stop(
    run_dir: DirOption = None,
    keep: Annotated[bool, typer.Option(help="Keep the data directory (topics, offsets)")] = False,
) -> None:
    """Stop the broker (SIGTERM, SIGKILL after 20 s) and remove its data unless --keep."""
    broker = _broker(run_dir, keep=keep)
    try:
        stopped = broker.stop()
    except BrokerError as exc:
        _err.print(f"[bold red]sluicegate broker: {exc}[/bold red]", markup=True)
        raise typer.Exit(1) from None
    if stopped:
        _err.print(f"[green]stopped[/green] the broker in {broker.run_dir}", markup=True)
    else:
        _err.print(f"no broker running in {broker.run_dir}", markup=True)


@broker_app.command("status")
def status(run_dir: DirOption = None) -> None:
    """Show the broker of a run directory; exit code 1 if it is not running."""
    broker = _broker(run_dir)
    st = broker.status(probe=True)
    table = Table(title=f"sluicegate broker ({broker.run_dir})", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    if st.running:
        state = "[green]running[/green]" if st.reachable else "[yellow]running, not answering[/yellow]"
    elif st.pid is not None:
        state = f"[red]not running[/red] (stale broker.json, pid {st.pid} is gone)"
    else:
        state = "[red]not running[/red]"
    table.add_row("state", state)
    if st.bootstrap:
        table.add_row("bootstrap", st.bootstrap)
        table.add_row("pid", str(st.pid))
        table.add_row("controller port", str(st.controller_port))
    if st.started_at:
        table.add_row("up since", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.started_at)))
    table.add_row("kafka", f"{KAFKA_VERSION} (jars in {artifacts_dir()})")
    table.add_row("log", str(st.log_file))
    _out.print(table)
    if not (st.running and st.reachable):
        raise typer.Exit(1)


@broker_app.command("fetch")
def fetch() -> None:
    """Resolve the Kafka jars from Maven Central into the cache (once); print their folder."""
    try:
        libs = ensure_kafka_artifacts(echo=_echo)
    except BrokerError as exc:
        _err.print(f"sluicegate broker fetch: {exc}")
        raise typer.Exit(1) from None
    _out.print(str(libs))
