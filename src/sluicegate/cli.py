"""The `sluicegate` command line: one sub-command per thing a person runs."""

from __future__ import annotations

import logging
import os
from typing import Annotated

import typer
from rich.logging import RichHandler

from sluicegate.audit.commands import audit_command
from sluicegate.coordinator.commands import coordinator_command
from sluicegate.coordinator.source_commands import source_app
from sluicegate.devtools.broker.commands import broker_app
from sluicegate.kafka.acls_commands import acls_command
from sluicegate.kafka.log_repeats import quiet_repeats
from sluicegate.kafka.security_options import kafka_security_callback
from sluicegate.kafka.startup_noise import quiet_startup_noise
from sluicegate.kafka.topics_commands import topics_app
from sluicegate.reader.commands import reader_command

app = typer.Typer(
    name="sluicegate",
    help="Flink-style split coordination (FLIP-27) over Kafka.",
    no_args_is_help=True,
    rich_markup_mode=None,  # click's layout wraps at any width; rich's panels cut option names at 80
    pretty_exceptions_show_locals=False,
    callback=kafka_security_callback,
)
app.command("coordinator")(coordinator_command)
app.command("reader")(reader_command)
app.command("audit")(audit_command)
app.command("acls")(acls_command)


@app.command("demo")
def demo(
    readers: Annotated[
        str,
        typer.Option(help="spark: the Spark Structured Streaming job reads the splits; processes: 3 reader processes"),
    ] = "spark",
    splits: Annotated[int, typer.Option(help="Splits of the bounded sequence source (spark)")] = 64,
    records_per_split: Annotated[int, typer.Option(help="Values per split (spark)")] = 50_000,
    parallelism: Annotated[int, typer.Option(help="Reader subtasks = Spark partitions per batch (spark)")] = 4,
    max_records_per_trigger: Annotated[int, typer.Option(help="Admission control: rows per micro-batch (spark)")] = (
        250_000
    ),
    keep_workdir: Annotated[bool, typer.Option(help="Keep logs, outputs and checkpoints")] = False,
) -> None:
    """The main job end to end on embedded defaults: a local Kafka broker, the topics, a
    coordinator, and a Spark Structured Streaming job reading the built-in `sequence` source
    through sluicegate into per-minute windows (or, with --readers processes, standalone reader
    processes); then the result and the audit, and everything is torn down."""
    if readers == "spark":
        from sluicegate.devtools.spark_demo import SparkDemoPlan, run_spark_demo

        plan = SparkDemoPlan(
            splits=splits,
            records_per_split=records_per_split,
            parallelism=parallelism,
            max_records_per_trigger=max_records_per_trigger,
        )
        raise typer.Exit(run_spark_demo(plan, keep_workdir=keep_workdir))
    if readers == "processes":
        from sluicegate.devtools.demo import DemoPlan, run_process_demo

        raise typer.Exit(run_process_demo(DemoPlan(), keep_workdir=keep_workdir))
    typer.echo(f"sluicegate demo: invalid setting '--readers': {readers!r} is not spark or processes", err=True)
    raise typer.Exit(2)


app.add_typer(broker_app, name="broker")
app.add_typer(topics_app, name="topics")
app.add_typer(source_app, name="source")


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
    quiet_repeats()
    quiet_startup_noise()  # before any client: a coordinator reads its new topics before Faust starts


def main() -> None:
    _setup_logging()
    app()
