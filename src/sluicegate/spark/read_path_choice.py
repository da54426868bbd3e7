"""``readPath=auto``, the default: which read path a query of ``format("sluicegate")`` takes.

Two read paths serve the kafka and files connectors (docs/kafka.md, docs/files.md): the
Python data source (its executors read in Python workers, the kafka connector with its
native reader where the install has it) and the JVM read path (sluicegate's planning,
Spark's own Kafka and Parquet readers in the executors' JVM). What the benchmarks measured
(benchmarks/README.md) decides between them:

- **files**: the JVM path wherever it can read the query. Spark's Parquet reader is
  columnar and pruned to the columns the query uses; the Python path builds every column's
  rows in a Python worker (0.69x noop and 0.48x windowed of Spark's own Parquet stream,
  against 0.97x and 0.92x on the JVM path, at the issue's measurement).
- **kafka**: by the query's trigger. A backlog read to its end (``AvailableNow``,
  ``Once``) is a throughput job, where the native reader leads (1.05-1.18x Spark's tuned
  source, the JVM path 0.93-1.15x); a stream read as records arrive (a processing-time
  trigger, Spark's default) is a latency job, where a Python data source pays ~60 ms a
  micro-batch (p50 66-139 % over Spark's source, the JVM path within 1-13 %). Without the
  native reader the JVM path reads both (confluent-kafka's Python path: ~0.3x).

Either is a choice only where the JVM path is in the session (its jar from the JVM's start
and ``register(spark)``: jvm_planner.py): elsewhere the Python data source reads everything.
A query whose options tune one path (``arrowBatchRows``, ``metricsPort``'s executor
figures: the Python path's) or that the JVM path cannot read (not Parquet, rows cut inside
files, another file system) takes the Python path, saying why. A given ``readPath`` (or
the kafka connector's own ``option.read_path``) is never second-guessed. The rule is here
once; the Java source asks it through the planner factory (``JvmPlannerFactory.choose``),
for a kafka stream again when its trigger is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sluicegate.spark.file_options import CONNECTOR as FILES_CONNECTOR
from sluicegate.spark.kafka_options import CONNECTOR as KAFKA_CONNECTOR
from sluicegate.spark.options import JVM, SparkSourceOptions

JVM_CONNECTORS = (KAFKA_CONNECTOR, FILES_CONNECTOR)
"""The connectors the JVM read path reads."""
PYTHON = "python"
BY_TRIGGER = "trigger"
"""Not a read path: a kafka stream's choice waits for its trigger (``choose`` again with it)."""

BACKLOG_TRIGGERS = frozenset({"AvailableNowTrigger", "OneTimeTrigger"})
"""Spark's triggers (by their class's name) that read what is there and stop."""
LIVE_TRIGGERS = frozenset({"ProcessingTimeTrigger"})
"""Spark's triggers that read records as they arrive (the default is ProcessingTime(0))."""


@dataclass(frozen=True)
class ReadPathChoice:
    path: str
    """``jvm``, ``python`` (the Python data source: its connector reads natively where it
    can) or ``trigger`` (BY_TRIGGER)."""
    why: str
    """For the log line of the choice: what decided it."""


@dataclass(frozen=True)
class QueryFacts:
    """What the rule looks at besides the options: facts of this install and query that
    the caller finds out (it may block; the rule does not)."""

    reads_natively: bool = False
    """The kafka connector's ranges are read by the native reader in this install."""
    files_local: bool = True
    """A files query's path is on the local file system (the JVM path's only one yet)."""
    trigger: str | None = None
    """The stream's trigger by its class's name (``AvailableNowTrigger`` ...); "" when it
    cannot be known; None before the query starts."""


def choose(config: SparkSourceOptions, options: Mapping[str, str], facts: QueryFacts) -> ReadPathChoice:
    """The read path of a stream with the JVM read path in its session, from its parsed
    ``config``, the ``options`` as given and ``facts``."""
    given = {str(k).lower(): str(v).strip() for k, v in options.items()}
    requested = config.read_path  # parsed and checked by SparkSourceOptions
    if requested != "auto":
        return ReadPathChoice(JVM if requested == JVM else PYTHON, f"readPath={requested} was given")
    if config.connector == FILES_CONNECTOR:
        return _files(config, given, facts)
    if config.connector == KAFKA_CONNECTOR:
        own = config.options.get("read_path", "auto").strip().lower()
        if own != "auto":  # the connector's own option names one of the Python data source's
            return ReadPathChoice(PYTHON, f"option.read_path={own} was given")
        return _kafka(given, facts)
    return ReadPathChoice(PYTHON, f"the {config.connector} connector has one read path")


def _python_tuned(given: Mapping[str, str]) -> ReadPathChoice | None:
    """The Python path where the query tunes what only it has."""
    if "arrowbatchrows" in given:
        return ReadPathChoice(PYTHON, "arrowBatchRows tunes the Python path's Arrow batches")
    if given.get("metricsport", "0") not in ("", "0"):
        return ReadPathChoice(PYTHON, "metricsPort serves the Python readers' figures (Spark's own report none)")
    return None


def _files(config: SparkSourceOptions, given: Mapping[str, str], facts: QueryFacts) -> ReadPathChoice:
    fmt = config.options.get("format", "").strip().lower()
    if fmt != "parquet":
        what = fmt or "files by their extension"
        return ReadPathChoice(PYTHON, f"the JVM path reads Parquet (format parquet), and this query reads {what}")
    if "maxrecordspertrigger" in given:
        return ReadPathChoice(PYTHON, "maxRecordsPerTrigger ends batches inside files; the JVM path reads them whole")
    if "split_size_bytes" in config.options:
        return ReadPathChoice(PYTHON, "option.split_size_bytes cuts files, and the JVM path reads them whole")
    if not facts.files_local:
        return ReadPathChoice(PYTHON, "the JVM path reads files of the local file system only")
    tuned = _python_tuned(given)
    if tuned is not None:
        return tuned
    return ReadPathChoice(JVM, "Spark's Parquet reader reads the files (columnar, pruned to the query's columns)")


def _kafka(given: Mapping[str, str], facts: QueryFacts) -> ReadPathChoice:
    tuned = _python_tuned(given)
    if tuned is not None:
        return tuned
    if not facts.reads_natively:
        return ReadPathChoice(JVM, "no native Kafka reader in this install: Spark's Java consumers outrun Python's")
    if facts.trigger is None:
        return ReadPathChoice(BY_TRIGGER, "chosen by the query's trigger when it starts")
    if facts.trigger in BACKLOG_TRIGGERS:
        return ReadPathChoice(PYTHON, f"{_trigger_name(facts.trigger)} reads a backlog: the native reader's throughput")
    if facts.trigger in LIVE_TRIGGERS:
        return ReadPathChoice(JVM, "a processing-time trigger reads records as they arrive: the JVM path's latency")
    return ReadPathChoice(PYTHON, f"the native reader (trigger {facts.trigger or 'unknown'})")


def _trigger_name(trigger: str) -> str:
    return {"AvailableNowTrigger": "Trigger.AvailableNow", "OneTimeTrigger": "Trigger.Once"}.get(trigger, trigger)
