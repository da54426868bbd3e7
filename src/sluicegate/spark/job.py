"""The main job: a Spark Structured Streaming query over the sluicegate source that
counts and sums the values of each event-time minute, written to Parquet.

The query reads ``format("sluicegate")`` (one Spark partition per reader subtask),
groups by ``window(event_time, "1 minute")`` (a stateful aggregation) and writes each micro-batch's updated windows with
``foreachBatch`` to ``OUTPUT/batch_id=N/`` (overwriting that directory, so a batch
Spark runs again after a crash replaces its own files). The result table is, per
window, the row of the highest batch. With ``availableNow`` (the default) the
query ends when the bounded source is read to its end.

Event time. Without ``alignment_max_drift_ms`` the query declares no watermark: a
bounded run keeps every window's state, and a split read late never has its rows
dropped. With it, the source plans no split past the earliest next event time of
the query's splits plus that drift (the Spark option ``alignmentMaxDriftMs``), so
every row read later is at most the drift behind the largest event time read so
far (for connectors whose event times do not decrease within a split, as
``sequence``'s). Spark's watermark is the largest event time seen minus its delay:
``withWatermark`` with a delay of the drift therefore never drops a row, and yet
Spark evicts each window's state once the watermark passes its end, so an
unbounded run keeps bounded state. Alignment is what makes Spark's max-based
watermark safe: without it a lagging split's rows fall behind the watermark and
are dropped (``numRowsDroppedByWatermark``).

Run it as ``python -m sluicegate.spark.job --source S --output DIR --checkpoint DIR
[--option k=v ...]``: it prints ``progress ...`` lines and a final ``RESULT {json}``
line; with ``--check`` it compares the table with the one a ``sequence`` source
must give and exits 1 if they differ. On a cluster, ``spark-submit --master URL
.../sluicegate/spark/job.py --source S ...`` runs the same (the master is then
spark-submit's; docs/deploy.md, "Spark on a cluster"). ``sluicegate demo`` (devtools/spark_demo.py) runs
the same job in-process with a live view.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluicegate.api.errors import ConfigError

WINDOW_MS = 60_000


@dataclass(frozen=True)
class JobSettings:
    source: str
    output_dir: Path
    checkpoint_dir: Path
    bootstrap_servers: str = ""
    parallelism: int = 4
    connector: str = "sequence"
    connector_options: Mapping[str, str] = field(default_factory=dict)
    namespace: str = "sluicegate"
    max_records_per_trigger: int | None = None
    available_now: bool = True
    processing_time: str | None = None
    """With ``available_now`` off: the trigger interval (e.g. "1 second"); None: as fast as possible."""
    alignment_max_drift_ms: int | None = None
    """Plan no split past the earliest next event time + this, and declare a watermark of
    this delay (module docstring). None: neither."""
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    """Control-plane Kafka security as Spark's Kafka source names it (kafka.security.protocol,
    kafka.sasl.jaas.config ...; KafkaSecurity.spark_options). Empty: the SLUICEGATE_KAFKA_* env."""
    metrics_port: int = 0
    """The source's ``metricsPort`` (the driver serves its and its executors' figures); 0: off."""
    metrics_host: str | None = None
    """The source's ``metricsHost``: where executors reach the driver (None: found)."""

    def __post_init__(self) -> None:
        if self.alignment_max_drift_ms is not None and self.alignment_max_drift_ms < 0:
            raise ConfigError("alignment_max_drift_ms", f"must be >= 0, got {self.alignment_max_drift_ms}")

    def reader_options(self) -> dict[str, str]:
        opts = {
            "source": self.source,
            "parallelism": str(self.parallelism),
            "connector": self.connector,
            "namespace": self.namespace,
            "connectorOptions": json.dumps(dict(self.connector_options)),
        }
        if self.bootstrap_servers:
            opts["kafka.bootstrap.servers"] = self.bootstrap_servers
        if self.max_records_per_trigger:
            opts["maxRecordsPerTrigger"] = str(self.max_records_per_trigger)
        if self.alignment_max_drift_ms is not None:
            opts["alignmentMaxDriftMs"] = str(self.alignment_max_drift_ms)
        if self.metrics_port:
            opts["metricsPort"] = str(self.metrics_port)
        if self.metrics_host:
            opts["metricsHost"] = self.metrics_host
        opts.update(self.kafka_options)
        return opts


@dataclass(frozen=True)
class WindowRow:
    start_ms: int
    end_ms: int
    count: int
    sum: int


@dataclass(frozen=True)
class JobProgress:
    batch_id: int
    rows: int
    """Records planned so far by this query (its offsets' running count)."""
    input_rows_per_second: float
    elapsed_s: float
    active: bool


def totals(rows: Sequence[WindowRow]) -> tuple[int, int]:
    return sum(r.count for r in rows), sum(r.sum for r in rows)


def expected_sequence_windows(
    options: Mapping[str, str], window_ms: int = WINDOW_MS, until_ms: int | None = None
) -> list[WindowRow]:
    """The table a ``sequence`` source must give: value ``start_k + i`` of split ``k``
    has event time ``start_time_ms + k * split_time_offset_ms + i * event_interval_ms``.
    ``until_ms``: only the windows that end by then (required for an unbounded source,
    whose windows up to any time are complete once read that far)."""
    from sluicegate.connectors import load_source

    source: Any = load_source("sequence", options)
    opts = source.options  # SequenceOptions
    if opts.records_per_split is None and until_ms is None:
        raise ConfigError("records_per_split", "an unbounded sequence source has a table only up to a time")
    windows: dict[int, tuple[int, int]] = {}
    for split in opts.all_splits():
        origin = opts.event_time_base(split) + split.start * opts.event_interval_ms
        records = _records_until(opts, split, origin, until_ms)
        for start, i_lo, i_hi in _window_slices(origin, opts.event_interval_ms, records, window_ms):
            n = i_hi - i_lo
            count, total = windows.get(start, (0, 0))
            windows[start] = (count + n, total + n * split.start + (i_lo + i_hi - 1) * n // 2)
    return [
        WindowRow(start, start + window_ms, c, t)
        for start, (c, t) in sorted(windows.items())
        if until_ms is None or start + window_ms <= until_ms
    ]


def _records_until(opts: Any, split: Any, origin: int, until_ms: int | None) -> int:
    """How many records of ``split`` have event times before ``until_ms`` (all, if None)."""
    bounded = None if split.end is None else split.end - split.start
    if until_ms is None:
        assert bounded is not None
        return int(bounded)
    step = opts.event_interval_ms
    upto = max(0, math.ceil((until_ms - origin) / step)) if step > 0 else (1 << 62)
    return upto if bounded is None else min(upto, int(bounded))


def _window_slices(origin: int, step: int, records: int, window_ms: int) -> Iterator[tuple[int, int, int]]:
    """(window start, first index, end index) of the windows that indices 0..records-1 at
    event times origin + i * step fall into."""
    if step == 0:
        yield origin // window_ms * window_ms, 0, records
        return
    start = origin // window_ms * window_ms
    last_t = origin + (records - 1) * step
    while start <= last_t:
        i_lo = max(0, math.ceil((start - origin) / step))
        i_hi = min(records, math.ceil((start + window_ms - origin) / step))
        if i_hi > i_lo:
            yield start, i_lo, i_hi
        start += window_ms


def spark_session(
    app_name: str = "sluicegate-job",
    master: str | None = "local[2]",
    shuffle_partitions: int = 4,
    quiet: bool = False,
    extra_conf: Mapping[str, str] | None = None,
) -> Any:
    """A SparkSession with the sluicegate source registered (Python workers run this
    interpreter), and where its jar is built the JVM read path in ``spark.jars`` (with
    those ``extra_conf`` names). ``master`` None: the one spark-submit was given."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from sluicegate.spark.datasource import register
    from sluicegate.spark.jvm_classpath import jvm_read_path_jars

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
    )
    conf = dict(extra_conf or {})
    jars = [j for j in conf.get("spark.jars", "").split(",") if j]
    conf["spark.jars"] = ",".join(dict.fromkeys([*jars, *jvm_read_path_jars()]))
    for key, value in conf.items():
        if value:
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def start_query(spark: Any, config: JobSettings) -> Any:
    """Start the windowed count/sum query; returns the StreamingQuery."""
    from pyspark.sql import functions as F

    output = str(config.output_dir)
    events = spark.readStream.format("sluicegate").options(**config.reader_options()).load()
    if config.alignment_max_drift_ms is not None:
        events = events.withWatermark("event_time", f"{config.alignment_max_drift_ms} milliseconds")
    windows = events.groupBy(F.window("event_time", "1 minute").alias("window")).agg(
        F.count(F.lit(1)).alias("count"), F.sum("value").alias("sum")
    )

    def write_batch(batch: Any, batch_id: int) -> None:
        rows = batch.select(
            F.expr("unix_millis(window.start)").alias("window_start_ms"),
            F.expr("unix_millis(window.end)").alias("window_end_ms"),
            F.col("count"),
            F.col("sum"),
        )
        rows.write.mode("overwrite").parquet(f"{output}/batch_id={batch_id}")

    writer = (
        windows.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(config.checkpoint_dir))
        .queryName(f"sluicegate-windows-{config.source}")
    )
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    elif config.processing_time:
        writer = writer.trigger(processingTime=config.processing_time)
    return writer.start()


def read_windows(spark: Any, output_dir: Path) -> list[WindowRow]:
    """The result table: per window, the row written by the highest batch."""
    if not output_dir.exists():
        return []
    table = spark.read.parquet(str(output_dir))
    table.createOrReplaceTempView("sluicegate_window_updates")
    rows = spark.sql(
        """
        SELECT window_start_ms, window_end_ms, count, sum FROM (
          SELECT *, row_number() OVER (PARTITION BY window_start_ms ORDER BY batch_id DESC) AS rn
          FROM sluicegate_window_updates)
        WHERE rn = 1 ORDER BY window_start_ms
        """
    ).collect()
    return [WindowRow(int(r[0]), int(r[1]), int(r[2]), int(r[3] or 0)) for r in rows]


def _progress_of(query: Any, started: float) -> JobProgress:
    last = query.lastProgress or {}
    rows = 0
    for source in last.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                end = None
        if isinstance(end, dict) and isinstance(end.get("rows"), int):
            rows += end["rows"]
    return JobProgress(
        batch_id=int(last.get("batchId", -1)),
        rows=rows,
        input_rows_per_second=float(last.get("processedRowsPerSecond") or 0.0),
        elapsed_s=time.monotonic() - started,
        active=bool(query.isActive),
    )


def run_job(
    config: JobSettings,
    spark: Any,
    on_progress: Callable[[JobProgress], None] | None = None,
    poll_s: float = 0.5,
    timeout_s: float | None = None,
) -> list[WindowRow]:
    """Run the query until it ends (availableNow) or ``timeout_s``; returns the result table."""
    started = time.monotonic()
    query = start_query(spark, config)
    try:
        while query.isActive:
            query.awaitTermination(poll_s)
            if on_progress is not None:
                on_progress(_progress_of(query, started))
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise TimeoutError(f"the query did not end within {timeout_s:.0f} s")
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"the streaming query failed: {error}")
        if on_progress is not None:
            on_progress(_progress_of(query, started))
    finally:
        if query.isActive:
            query.stop()
    return read_windows(spark, config.output_dir)


def _master(chosen: str | None) -> str | None:
    """The master to set: the one chosen, none under spark-submit (whose ``--master``
    and ``--conf`` the session already has), local[2] for ``python -m``."""
    if chosen:
        return chosen
    return None if os.environ.get("PYSPARK_GATEWAY_PORT") else "local[2]"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluicegate.spark.job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""))
    parser.add_argument("--namespace", default="sluicegate")
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--connector", default="sequence")
    parser.add_argument("--option", "-o", action="append", default=[], help="connector option key=value")
    parser.add_argument("--max-records-per-trigger", type=int, default=None)
    parser.add_argument(
        "--alignment-max-drift-ms",
        type=int,
        default=None,
        help="plan no split past the earliest next event time + this, and set a watermark of this delay",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="the Spark master; default: spark-submit's --master when submitted, local[2] otherwise",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="serve the query's metrics from the driver here (0: off)"
    )
    parser.add_argument("--metrics-host", default=None, help="where executors reach the driver's metrics port")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--progress-interval", type=float, default=1.0)
    parser.add_argument("--check", action="store_true", help="compare with the table a sequence source must give")
    parser.add_argument("--quiet", action="store_true", help="Spark logs errors only")
    args = parser.parse_args(argv)

    from sluicegate.connectors import parse_options

    try:
        options = parse_options(args.option)
        config = JobSettings(
            source=args.source,
            output_dir=args.output.resolve(),
            checkpoint_dir=args.checkpoint.resolve(),
            bootstrap_servers=args.bootstrap_servers,
            parallelism=args.parallelism,
            connector=args.connector,
            connector_options=options,
            namespace=args.namespace,
            max_records_per_trigger=args.max_records_per_trigger,
            alignment_max_drift_ms=args.alignment_max_drift_ms,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
        )
        expected = expected_sequence_windows(options) if args.check else None
    except ConfigError as exc:
        print(f"sluicegate.spark.job: {exc}", file=sys.stderr)
        return 2
    spark = spark_session(f"sluicegate-{args.source}", _master(args.master), args.shuffle_partitions, quiet=args.quiet)
    last_print = [0.0]

    def report(p: JobProgress) -> None:
        now = time.monotonic()
        if now - last_print[0] >= args.progress_interval or not p.active:
            last_print[0] = now
            print(
                f"progress batch={p.batch_id} rows={p.rows} rate={p.input_rows_per_second:.0f}/s "
                f"elapsed={p.elapsed_s:.1f}s",
                flush=True,
            )

    try:
        table = run_job(config, spark, report)
    finally:
        spark.stop()
    count, total = totals(table)
    ok = expected is None or table == expected
    print(
        "RESULT "
        + json.dumps(
            {
                "windows": len(table),
                "count": count,
                "sum": total,
                "ok": ok,
                "table": [[r.start_ms, r.end_ms, r.count, r.sum] for r in table],
            }
        ),
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
