"""The `sluicegate` command line: one sub-command per thing a person runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.logging import RichHandler

import sluicegate
from sluicegate.audit.commands import audit_command
from sluicegate.coordinator.commands import coordinator_command
from sluicegate.coordinator.source_commands import source_app
from sluicegate.devtools.broker.commands import broker_app
from sluicegate.doctor import collect, fetch_kafka_jars, render
from sluicegate.extras import MissingExtra
from sluicegate.kafka.acls_commands import acls_command
from sluicegate.kafka.log_repeats import quiet_repeats
from sluicegate.kafka.security_options import use_security_flags
from sluicegate.kafka.startup_noise import quiet_startup_noise
from sluicegate.kafka.topics_commands import topics_app
from sluicegate.reader.commands import reader_command


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"sluicegate {sluicegate.__version__}")
        raise typer.Exit()


def root(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print sluicegate's version and exit"),
    ] = False,
    kafka_security_protocol: Annotated[
        str | None,
        typer.Option(help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (env SLUICEGATE_KAFKA_SECURITY_PROTOCOL)"),
    ] = None,
    kafka_sasl_mechanism: Annotated[
        str | None, typer.Option(help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env SLUICEGATE_KAFKA_SASL_MECHANISM)")
    ] = None,
    kafka_sasl_username: Annotated[str | None, typer.Option(help="SASL user (env SLUICEGATE_KAFKA_SASL_USERNAME)")] = (
        None
    ),
    kafka_password_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the SASL password (env SLUICEGATE_KAFKA_SASL_PASSWORD_FILE, "
            "or the password itself in SLUICEGATE_KAFKA_SASL_PASSWORD)"
        ),
    ] = None,
    kafka_ssl_ca: Annotated[
        Path | None, typer.Option(help="PEM CA certificate(s) to trust (env SLUICEGATE_KAFKA_SSL_CA_LOCATION)")
    ] = None,
    kafka_ssl_cert: Annotated[
        Path | None, typer.Option(help="PEM client certificate (env SLUICEGATE_KAFKA_SSL_CERT_LOCATION)")
    ] = None,
    kafka_ssl_key: Annotated[
        Path | None, typer.Option(help="PEM client key (env SLUICEGATE_KAFKA_SSL_KEY_LOCATION)")
    ] = None,
    kafka_ssl_key_password_file: Annotated[
        Path | None,
        typer.Option(help="File holding the client key's password (env SLUICEGATE_KAFKA_SSL_KEY_PASSWORD_FILE)"),
    ] = None,
) -> None:
    """The options given before a command: ``--version``, and the ``--kafka-*`` security
    settings of the control plane (kafka/security_options.py)."""
    use_security_flags(
        {
            "kafka_security_protocol": kafka_security_protocol,
            "kafka_sasl_mechanism": kafka_sasl_mechanism,
            "kafka_sasl_username": kafka_sasl_username,
            "kafka_password_file": kafka_password_file,
            "kafka_ssl_ca": kafka_ssl_ca,
            "kafka_ssl_cert": kafka_ssl_cert,
            "kafka_ssl_key": kafka_ssl_key,
            "kafka_ssl_key_password_file": kafka_ssl_key_password_file,
        }
    )


app = typer.Typer(
    name="sluicegate",
    help="Flink-style split coordination (FLIP-27) over Kafka.",
    no_args_is_help=True,
    rich_markup_mode=None,  # click's layout wraps at any width; rich's panels cut option names at 80
    pretty_exceptions_show_locals=False,
    callback=root,
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


@app.command("doctor")
def doctor(
    fetch: Annotated[
        bool,
        typer.Option(help="Fetch the JVM read path's Kafka jars into the cache now, not at first use"),
    ] = False,
) -> None:
    """What this install has: sluicegate's version and place, the native Kafka reader, the
    JVM read path's jar and its Kafka jars, the extras, Java, and the read path each
    connector takes by default. Exits 1 when something a user expects is missing, saying
    what and the command that fixes it."""
    report = collect()
    if fetch:
        to_fetch = [j for j in report.jvm.kafka_jars if j.state != "cached"]
        if to_fetch:
            typer.echo(f"fetching {len(to_fetch)} Kafka jars into {report.jvm.cache}")
        logging.getLogger("sluicegate.spark").setLevel(logging.ERROR)  # its per-jar warnings: the line above
        try:
            errors = fetch_kafka_jars(report)
        except MissingExtra as exc:
            errors = [str(exc)]
        for error in errors:
            typer.echo(f"sluicegate doctor --fetch: {error}", err=True)
        if errors:
            raise typer.Exit(1)
        report = collect()
    typer.echo("\n".join(render(report)))
    raise typer.Exit(0 if report.ok else 1)


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
