"""The `sluicegate` command line: one sub-command per thing a person runs."""

from __future__ import annotations

import logging
import os

import typer
from rich.logging import RichHandler

from sluicegate.audit.commands import audit_command
from sluicegate.broker.commands import broker_app
from sluicegate.coordinator.commands import coordinator_command
from sluicegate.reader.commands import reader_command
from sluicegate.transport.topics_commands import topics_app

app = typer.Typer(
    name="sluicegate",
    help="Flink-style split coordination (FLIP-27) over Kafka.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.command("coordinator")(coordinator_command)
app.command("reader")(reader_command)
app.command("audit")(audit_command)
app.add_typer(broker_app, name="broker")
app.add_typer(topics_app, name="topics")


def _setup_logging() -> None:
    level = os.environ.get("SLUICEGATE_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level,
        format="%(name)s: %(message)s",
        datefmt="[%X]",
        handlers=[RichHandler(show_path=False, rich_tracebacks=True)],
    )
    for noisy in ("aiokafka", "kafka", "faust", "mode", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main() -> None:
    _setup_logging()
    app()
