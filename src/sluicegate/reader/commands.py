"""`sluicegate reader`: run one reader subtask of a source as a standalone process."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import Annotated

import typer

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate.api.options import checked_int
from sluicegate.connectors import load_source, parse_options
from sluicegate.coordinator.embedded import CoordinatorMode, EmbeddedCoordinator
from sluicegate.kafka.access import KafkaAccessError, require_access
from sluicegate.kafka.log_repeats import quiet_repeats
from sluicegate.kafka.topics import TopicApplyError
from sluicegate.protocol.timing import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS
from sluicegate.reader.host import EXIT_CONFIG, ReaderHost, ReaderSettings
from sluicegate.reader.output import OutputSpec
from sluicegate.reader.stop_signals import StopRequest, StopSignals
from sluicegate.reader.timing import KAFKA_WAIT_S, TOPIC_WAIT_S

log = logging.getLogger("sluicegate.reader")


def reader_command(
    source: Annotated[str, typer.Option("--source", help="The source name S.")],
    subtask: Annotated[
        str,
        typer.Option(
            "--subtask",
            help="This reader's subtask K (0 <= K < max_parallelism), or auto: a free one from the coordinator.",
        ),
    ],
    connector: Annotated[str, typer.Option("--connector", help="The connector (entry point name), e.g. sequence.")],
    output: Annotated[
        str,
        typer.Option(
            "--output",
            help="kafka:TOPIC (exactly-once, the topic must exist), parquet:DIR (exactly-once: files appear "
            "with their checkpoint), jsonl:PATH (at-least-once) or sink:MODULE:FACTORY (your sluicegate.Sink).",
        ),
    ],
    output_format: Annotated[
        str | None,
        typer.Option(
            "--output-format",
            help="record: the records themselves (key, value, headers, timestamp; kafka's default); "
            "envelope: sluicegate's JSON wrapper with the split id (jsonl's default).",
        ),
    ] = None,
    process: Annotated[
        str | None,
        typer.Option(
            "--process",
            help="module:function run on every record (or, if its first parameter is annotated "
            "pyarrow.RecordBatch, on every batch) between reading and writing.",
        ),
    ] = None,
    on_process_error: Annotated[
        str,
        typer.Option(
            "--on-process-error",
            help="When the function raises: fail (stop; nothing is lost), skip (dead-letter the record "
            "and go on) or retry (--process-retries times, then fail).",
        ),
    ] = "fail",
    process_retries: Annotated[
        int, typer.Option("--process-retries", help="With --on-process-error retry: tries after the first.")
    ] = 3,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="A connector option key=value (repeatable)."),
    ] = None,
    namespace: Annotated[str, typer.Option("--namespace", help="Topic namespace NS.")] = "sluicegate",
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            "--bootstrap-servers",
            envvar="KAFKA_BOOTSTRAP_SERVERS",
            help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS).",
        ),
    ] = None,
    checkpoint_interval_ms: Annotated[
        int, typer.Option("--checkpoint-interval-ms", help="Checkpoint every N ms.")
    ] = 2_000,
    heartbeat_interval_ms: Annotated[
        int, typer.Option("--heartbeat-interval-ms", help="Heartbeat every N ms.")
    ] = HEARTBEAT_INTERVAL_MS,
    transaction_timeout_ms: Annotated[
        int | None,
        typer.Option(
            "--transaction-timeout-ms",
            help="The checkpoint transaction's timeout: how long a broker keeps the transaction of a reader "
            "that died mid-checkpoint open (holding read_committed consumers of its outputs back), and "
            "how long a broker outage the open transaction survives. At least 3 checkpoint intervals "
            "[default: that or 60000, whichever is longer].",
        ),
    ] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Most records read in one batch.")] = 10_000,
    exit_when_finished: Annotated[
        bool,
        typer.Option(
            "--exit-when-finished/--no-exit-when-finished",
            help="Exit 0 once a bounded source's splits are all finished.",
        ),
    ] = True,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="With --subtask auto: a stable member name; a restarted process with the same name "
            "gets its slot back (as Kafka's group.instance.id).",
        ),
    ] = None,
    session_timeout_ms: Annotated[
        int,
        typer.Option(
            "--session-timeout-ms",
            help="The coordinator's session timeout; with no heartbeat sent for longer, "
            "the reader fences itself and registers again.",
        ),
    ] = SESSION_TIMEOUT_MS,
    split_idle_timeout_ms: Annotated[
        int,
        typer.Option(
            "--split-idle-timeout-ms",
            help="A split with no record for this long stops holding the reader's watermark back "
            "until its next record; when every split is idle the reader reports itself idle. 0: off.",
        ),
    ] = 0,
    metrics_port: Annotated[
        int,
        typer.Option(
            "--metrics-port",
            envvar="SLUICEGATE_READER_METRICS_PORT",
            help="Serve Prometheus metrics on http://0.0.0.0:PORT/metrics (0: off).",
        ),
    ] = 0,
    kafka_wait_s: Annotated[
        float,
        typer.Option(
            "--kafka-wait-s",
            help="At start, how long to retry a Kafka that has not answered yet (a broker still starting); "
            "then exit 2 naming --bootstrap-servers.",
        ),
    ] = KAFKA_WAIT_S,
    topic_wait_timeout_s: Annotated[
        float,
        typer.Option(
            "--topic-wait-timeout-s",
            help="At start, how long to wait for the source's control topics (its coordinator creates "
            "them) and the output topic; then exit 2 saying which is missing. Raise it when readers "
            "start before their coordinator.",
        ),
    ] = TOPIC_WAIT_S,
    metrics_split_labels: Annotated[
        bool,
        typer.Option(
            "--metrics-split-labels/--no-metrics-split-labels",
            help="Also one series per owned split (records left to its end); one series per split id.",
        ),
    ] = False,
    coordinator: Annotated[
        str | None,
        typer.Option(
            "--coordinator",
            help="auto: this process coordinates the source when nobody does (a deployed coordinator "
            "takes over from it); embedded: at once; external: never, a deployed coordinator must. "
            "Default: $SLUICEGATE_READER_COORDINATOR, else auto.",
        ),
    ] = None,
    max_parallelism: Annotated[
        int | None,
        typer.Option(
            "--max-parallelism",
            help="With --coordinator auto or embedded: the source's reader subtasks, to set up a source "
            "that is not set up yet (its control topics are created).",
        ),
    ] = None,
) -> None:
    """Read splits of a source as subtask K, as the source's coordinator assigns them."""
    try:
        if name is not None and _subtask(subtask) is not None:
            raise ConfigError("--name", "only with --subtask auto (a fixed subtask needs no name)")
        settings = ReaderSettings(
            source=source,
            subtask=_subtask(subtask),
            name=name,
            connector=connector,
            output=OutputSpec.parse(output, output_format),
            process=process,
            on_process_error=on_process_error,
            process_retries=process_retries,
            bootstrap_servers=bootstrap_servers or "",
            options=parse_options(option or []),
            namespace=namespace,
            checkpoint_interval_ms=checkpoint_interval_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            transaction_timeout_ms=transaction_timeout_ms,
            max_batch=max_batch,
            exit_when_finished=exit_when_finished,
            session_timeout_ms=session_timeout_ms,
            split_idle_timeout_ms=split_idle_timeout_ms,
            metrics_port=metrics_port,
            metrics_split_labels=metrics_split_labels,
            kafka_wait_s=kafka_wait_s,
            topic_wait_timeout_s=topic_wait_timeout_s,
        )
        source_impl = load_source(settings.connector, settings.options)
        host = ReaderHost(settings, source_impl)  # imports --process: a bad one fails here
        embedded = embedded_coordinator(settings, coordinator, max_parallelism, ("--coordinator", "--max-parallelism"))
    except ConfigError as exc:
        typer.echo(f"sluicegate reader: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    try:
        # A broker not up yet is waited for (--kafka-wait-s); refused credentials end it now.
        require_access(settings.bootstrap_servers, unreachable_ok=True)
    except KafkaAccessError as exc:
        typer.echo(f"sluicegate reader: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    try:
        code = run_with_coordinator(host, embedded)
    except (ConfigError, TopicApplyError, SourceError) as exc:  # SourceError: a new source's inputs are missing
        typer.echo(f"sluicegate reader: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    raise typer.Exit(code)


COORDINATOR_ENV = "SLUICEGATE_READER_COORDINATOR"


def embedded_coordinator(
    settings: ReaderSettings,
    mode: str | None,
    max_parallelism: int | None,
    names: tuple[str, str] = ("coordinator", "max_parallelism"),
) -> EmbeddedCoordinator:
    """The coordinator this reader runs when nobody else serves its source (``mode``: auto,
    embedded or external; None: ``$SLUICEGATE_READER_COORDINATOR``, else auto). A source it
    sets up gets ``max_parallelism`` reader subtasks (None: it sets none up). ``names``: the
    two settings as the caller's user wrote them, for messages."""
    mode_name, parallelism_name = names
    return EmbeddedCoordinator(
        settings.source,
        settings.connector,
        settings.options,
        settings.bootstrap_servers,
        settings.namespace,
        CoordinatorMode.parse(mode or os.environ.get(COORDINATOR_ENV, "auto"), mode_name),
        new_source_parallelism=None if max_parallelism is None else checked_int(parallelism_name, max_parallelism, 1),
        parallelism_setting=parallelism_name,
        session_timeout_ms=settings.session_timeout_ms,
    )


def run_with_coordinator(host: ReaderHost, embedded: EmbeddedCoordinator) -> int:
    """Run ``host`` with its coordinator beside it (started first: it may set the source up);
    raises what refuses the coordinator's start (another definition of the source)."""
    embedded.start()
    try:
        return asyncio.run(run_host(host))
    finally:
        embedded.close()


def _subtask(value: str) -> int | None:
    if value.strip().lower() == "auto":
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError("--subtask", f"must be an integer >= 0 or auto, got {value!r}") from None


async def run_host(host: ReaderHost) -> int:
    """Run ``host`` with SIGTERM/SIGINT wired to a graceful stop (a second one, a second
    or more later: at once; stop_signals.py)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    signals = StopSignals()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        request = signals.seen(time.monotonic())
        if request is StopRequest.GRACEFUL:
            log.info("%s: stopping gracefully (send it again to stop at once)", name)
            host.request_stop()
        elif request is StopRequest.AT_ONCE and task is not None:
            log.warning("%s again: stopping at once, without leaving", name)
            task.cancel()

    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
    try:
        return await host.run()
    except asyncio.CancelledError:
        return 130
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
            if signals.stopping:  # the copy of a signal that stopped it must not kill it on its way out
                signal.signal(signum, signal.SIG_IGN)


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    quiet_repeats()
