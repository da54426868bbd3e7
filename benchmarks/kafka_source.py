"""Spark's own Kafka source (defaults and tuned) against format("sluicegate") with the kafka connector, same topic.

    .venv/bin/python benchmarks/kafka_source.py                    # 10M records of 110 B, 8 partitions, 3 times
    .venv/bin/python benchmarks/kafka_source.py --record-bytes 1024                     # "1 KB records"
    .venv/bin/python benchmarks/kafka_source.py --partitions 64                         # "64 partitions"
    .venv/bin/python benchmarks/kafka_source.py --records 200000 --repetitions 1        # a smoke run
    .venv/bin/python benchmarks/kafka_source.py --replot R1.json R2.json L.json --plot out.png

The topic is kafka_clients.py's (``fill_topic``: record i in partition i % P, key ``%010d``
of i, a value of ``--record-bytes`` - 10 bytes starting with the same digits, CreateTime
``2026-01-01T00:00Z + i // 10`` ms), one topic per (records, record size, partitions),
written once and reused while it holds exactly those records.

Sides, each run its own Python process with its own SparkSession (``spark_session``:
``local[2]``, 4 shuffle partitions, UTC), never two at once:

- ``native-defaults``: ``readStream.format("kafka")`` (Spark's source, spark-sql-kafka from
  ``ensure_spark_kafka_jars`` via ``spark.jars``), ``subscribe``,
  ``startingOffsets=earliest``, ``kafka.isolation.level=read_committed``, the Kafka
  consumer's defaults;
- on every side, rows without headers unless ``--include-headers`` (Spark's
  ``includeHeaders``, sluicegate's ``include_headers``: both default to false);
- ``native-tuned``: the same with ``NATIVE_TUNED`` (below; ``--tuned KEY=VALUE`` adds or
  overrides one);
- ``sluicegate-python`` / ``sluicegate-native``: ``readStream.format("sluicegate")``,
  ``connector=kafka`` (``topics``, ``starting_offsets=earliest``,
  ``stopping_offsets=latest``), ``parallelism`` not given: the query's default, the topic's
  partitions but at most the task slots of ``--master`` (``local[2]``: 2), each subtask
  reading several partitions' ranges in one Spark task (``--parallelism`` sets it), a real
  coordinator process on a fresh source name, and ``SLUICEGATE_KAFKA_READ_PATH`` set to the
  read path (``native`` only when the module ``sluicegate._native`` is importable).

All read with ``Trigger.AvailableNow`` and the same per-batch limit (``--max-per-trigger``:
``maxOffsetsPerTrigger`` / ``maxRecordsPerTrigger``), in two jobs: ``noop`` (the rows into
``writeStream.format("noop")``) and ``windowed`` (``groupBy(window(timestamp, "1 minute"))
.agg(count, sum(length(value)))``, stateful, into a ``memory`` sink in complete mode).

The runs alternate: each repetition runs every job on every side, the sides in turn
(round-robin, the first side moving one place each repetition), ``--repetitions`` times.
Figures come from Spark's progress events; "steady state" runs from the end of the first
batch that read data (it starts the Python workers) to the end of the last. The table
shows the median over the repetitions with min and max, MB/s counting key + value bytes
(10^6 B), and the ratio of each sluicegate side's median to each native side's, then the
same ratio paired by repetition (``paired.py``: the machine's drift cancels). While a
run goes, the process tree of its Spark driver is sampled every 0.25 s (psutil): the peak
resident memory of its PySpark Python workers (``pyspark.daemon`` and the workers it
forks) is printed per run with the batch size that bounds it.

Results are saved as JSON (``--results``) and drawn into a PNG (``--plot``); ``--replot``
draws saved results (several configurations, and kafka_latency.py's) into one picture.
Exit code 1 if a run's row count is not exactly the topic's, or a window's count or sum is
not the expected one.

Without ``--bootstrap-servers`` / ``KAFKA_BOOTSTRAP_SERVERS`` it runs the kept local broker
of ``<cache root>/bench-broker`` (as kafka_clients.py does).
"""

from __future__ import annotations

import argparse
import bisect
import importlib
import json
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

from kafka_clients import (
    BASE_TS_MS,
    KEY_BYTES,
    RECORDS_PER_MS,
    VALUE_BYTES,
    bench_broker,
    default_topic,
    fill_topic,
)
from paired import paired_ratios, paired_text

from sluicegate.spark.task_slots import capped_parallelism, task_slots

REPO = Path(__file__).resolve().parent.parent
WINDOW_MS = 60_000
JOBS = ("noop", "windowed")
NATIVE_DEFAULTS = "native-defaults"
NATIVE_TUNED_SIDE = "native-tuned"
NATIVE_SIDES = (NATIVE_DEFAULTS, NATIVE_TUNED_SIDE)
READ_PATH_ENV = "SLUICEGATE_KAFKA_READ_PATH"
READ_PATHS = ("python", "native", "jvm")
NATIVE_MODULE = "sluicegate._native"
#: Spark's Kafka source, "tuned": bigger polls and fetches, no waiting for a full fetch.
NATIVE_TUNED: dict[str, str] = {
    "kafka.max.poll.records": "20000",
    "kafka.max.partition.fetch.bytes": "16777216",
    "kafka.fetch.max.bytes": "134217728",
    "kafka.fetch.max.wait.ms": "10",
}
#: format("sluicegate") with readPath=jvm: sluicegate's planning (its coordinator, its offsets)
#: with Spark's own Kafka partition readers, given native-tuned's consumer settings.
JVM_SIDE = "sluicegate-jvm"
#: format("sluicegate") with no readPath and no tuning: what a user gets (readPath=auto,
#: sluicegate/spark/read_path_choice.py); the run prints the path it chose.
DEFAULT_SIDE = "sluicegate-default"
CHOICE_LINE = re.compile(r"readPath=auto chose (\w+)")
#: The sluicegate side's batches into Spark (SparkSourceOptions.arrow_batch_rows' default).
ARROW_BATCH_ROWS = 65_536
DEFAULT_PLOT = REPO / "docs" / "images" / "kafka-source-benchmark.png"
RESULTS_DIR = REPO / "benchmarks" / "results"
#: PySpark's Python processes (by cmdline), and among them the executors' workers
#: (Spark 4: ``python -m pyspark.daemon pyspark.worker`` and its forks).
PYSPARK_CMDLINE = re.compile(r"pyspark[./]")
EXECUTOR_WORKER_CMDLINE = re.compile(r"pyspark\.daemon( pyspark\.worker)?$|pyspark\.worker$")


def sluicegate_side(path: str) -> str:
    return f"sluicegate-{path}"


def is_native(side: str) -> bool:
    """Spark's own Kafka source: native-defaults, native-tuned, native-tuned+<variant>."""
    return side.startswith("native-")


def is_planned_by_sluicegate(side: str) -> bool:
    """The sides with a sluicegate coordinator and offsets: every sluicegate read path."""
    return side.startswith("sluicegate-")


def native_settings(side: str, args: argparse.Namespace) -> dict[str, str]:
    """The reader options a native side (or sluicegate-jvm, Spark's readers) adds to the common ones."""
    if side in (NATIVE_TUNED_SIDE, JVM_SIDE):
        return dict(args.native_tuned)
    if side.startswith(NATIVE_TUNED_SIDE + "+"):
        return {**args.native_tuned, **args.variants[side.split("+", 1)[1]]}
    return {}


def sluicegate_variant_settings(side: str, args: argparse.Namespace) -> dict[str, str]:
    """The librdkafka settings a ``sluicegate-native+LABEL`` side adds to ``--client-setting``."""
    if side.startswith("sluicegate-") and "+" in side:
        return dict(args.sluicegate_variants[side.split("+", 1)[1]])
    return {}


def available_read_paths() -> list[str]:
    """``python``; ``native`` when its module imports in this interpreter (the workers run it
    too); ``jvm`` when its jar is built (make install)."""
    from sluicegate.spark.jvm_classpath import built

    paths = ["python"]
    try:
        importlib.import_module(NATIVE_MODULE)
        paths.append("native")
    except ImportError:
        pass
    return [*paths, *(["jvm"] if built() is not None else [])]


def record_bytes(value_bytes: int) -> int:
    return KEY_BYTES + value_bytes


def expected_windows(records: int, value_bytes: int = VALUE_BYTES) -> dict[int, tuple[int, int]]:
    """{window start ms: (count, sum of value lengths)} of records 0..N-1."""
    per_window = WINDOW_MS * RECORDS_PER_MS  # BASE_TS_MS is on a minute boundary
    windows = {}
    for lo in range(0, records, per_window):
        count = min(records, lo + per_window) - lo
        windows[BASE_TS_MS + lo // RECORDS_PER_MS] = (count, count * value_bytes)
    return windows


# --- what both benchmarks share: readers, coordinators, processes ---------------------------


def spark_extra_conf(side: str, read_path: str | None, spark_conf: dict[str, str]) -> dict[str, str]:
    extra: dict[str, str] = dict(spark_conf)
    if is_native(side):
        from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars

        extra["spark.jars"] = ",".join(str(p) for p in ensure_spark_kafka_jars())
    if read_path is not None:
        extra[f"spark.executorEnv.{READ_PATH_ENV}"] = read_path
    return extra


def stream_reader(spark: Any, spec: dict[str, Any]) -> Any:
    """``spark.readStream`` of ``spec``'s side over its topic (not loaded)."""
    side, bootstrap, topic = spec["side"], spec["bootstrap"], spec["topic"]
    limit = spec.get("max_per_trigger")
    if is_native(side):
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("includeHeaders", str(spec.get("include_headers", False)).lower())
        )
        if limit:
            reader = reader.option("maxOffsetsPerTrigger", str(limit))
        for key, value in spec.get("native_settings", {}).items():
            reader = reader.option(key, value)
        return reader
    reader = spark.readStream.format("sluicegate")
    options = sluicegate_options(spec)
    if side == JVM_SIDE:  # Spark's readers, with the consumer settings native-tuned has
        options = {**options, "readPath": "jvm", **spec["native_settings"]}
        options.pop("arrowBatchRows")
    if side == DEFAULT_SIDE:  # nothing that tunes or names a read path
        options.pop("arrowBatchRows")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def sluicegate_options(spec: dict[str, Any]) -> dict[str, str]:
    """The format("sluicegate") options of ``spec``'s side over its topic."""
    bootstrap, topic = spec["bootstrap"], spec["topic"]
    options = {
        "source": spec["source"],
        "connector": "kafka",
        "option.topics": topic,
        "option.bootstrap_servers": bootstrap,
        "option.starting_offsets": "earliest",
        "option.include_headers": str(spec.get("include_headers", False)).lower(),
        "arrowBatchRows": str(spec.get("arrow_batch_rows", ARROW_BATCH_ROWS)),
        "kafka.bootstrap.servers": bootstrap,
    }
    if spec.get("parallelism_given", True):  # else the query's default (at most the task slots of --master)
        options["parallelism"] = str(spec["parallelism"])
    if spec.get("bounded", True):
        options["option.stopping_offsets"] = "latest"
    if limit := spec.get("max_per_trigger"):
        options["maxRecordsPerTrigger"] = str(limit)
    for key, value in spec.get("client_settings", {}).items():
        options[f"option.kafka.{key}"] = value
    return options


def start_coordinator(
    source: str, topic: str, bootstrap: str, parallelism: int, log: Path, bounded: bool = True
) -> subprocess.Popen[bytes]:
    """A ``sluicegate coordinator`` process for ``source`` over ``topic``, once it serves."""
    cmd = [sys.executable, "-m", "sluicegate", "coordinator", "--source", source, "--connector", "kafka"]
    cmd += ["--max-parallelism", str(parallelism), "--option", f"topics={topic}"]
    cmd += ["--option", f"bootstrap_servers={bootstrap}", "--option", "starting_offsets=earliest"]
    if bounded:
        cmd += ["--option", "stopping_offsets=latest"]
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    with log.open("ab") as handle:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "is serving" in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    stop_process(proc)
    raise RuntimeError(f"the coordinator did not start:\n{log.read_text(errors='replace')[-3000:]}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class WorkerMemory:
    """Peak memory of the PySpark Python processes under one Spark driver process, sampled.

    Executor workers are the ``pyspark.daemon`` of ``pyspark.worker`` and the workers it
    forks: they run the reads (a sluicegate ``DataSourceStreamReader.read``). The others are
    the driver's helpers (data source lookup, planning, ``python_streaming_source_runner``).
    Forked workers share pages, so sums are of PSS (each shared page counted once overall).
    """

    worker_rss_mb: float = 0.0
    """The largest RSS of one executor worker at any sample: what a batch costs a worker."""
    workers_pss_mb: float = 0.0
    """The largest sum of PSS over the executor workers (with their daemon) at one sample."""
    all_pss_mb: float = 0.0
    """The largest sum of PSS over every PySpark Python process at one sample."""
    max_workers: int = 0
    samples: int = 0

    def sample(self, root_pid: int) -> None:
        import psutil

        try:
            procs = psutil.Process(root_pid).children(recursive=True)
        except psutil.Error:
            return
        worker_rss, worker_pss, all_pss = [], 0.0, 0.0
        for proc in procs:
            try:
                cmdline = " ".join(proc.cmdline())
                if not PYSPARK_CMDLINE.search(cmdline):
                    continue
                info = proc.memory_full_info()
            except psutil.Error:
                continue
            pss = float(getattr(info, "pss", info.rss)) / 1e6
            all_pss += pss
            if EXECUTOR_WORKER_CMDLINE.search(cmdline):
                worker_pss += pss
                if proc.parent() is not None and EXECUTOR_WORKER_CMDLINE.search(" ".join(proc.parent().cmdline())):
                    worker_rss.append(info.rss / 1e6)  # a forked worker, not the daemon
        self.samples += 1
        self.all_pss_mb = max(self.all_pss_mb, all_pss)
        self.workers_pss_mb = max(self.workers_pss_mb, worker_pss)
        if worker_rss:
            self.worker_rss_mb = max(self.worker_rss_mb, max(worker_rss))
            self.max_workers = max(self.max_workers, len(worker_rss))


CPU_PARTS = ("python workers", "spark jvm", "broker", "other")
"""Where a run's CPU goes: the Python processes Spark's JVM started (the executor workers
that run sluicegate's reads and hand Arrow batches over, and the driver-side runners that
plan), the Spark JVM (driver and executor: Spark's own Kafka consumer, the Arrow-to-row
copy of a Python source's batches, the query), the Kafka broker, and the rest (the
driver's own Python, the coordinator)."""


@dataclass
class CpuSamples:
    """CPU seconds used so far by each part of one run (``CPU_PARTS``), sampled with the
    wall clock, so that a stretch of the run (its steady state) can be cut out after."""

    times: list[float] = field(default_factory=list)
    totals: list[dict[str, float]] = field(default_factory=list)
    _last: dict[int, tuple[str, float]] = field(default_factory=dict)
    """pid -> (part, its CPU seconds at the last sample): a process that ended keeps its last."""

    def sample(self, root_pid: int, others: Mapping[int, str]) -> None:
        import psutil

        try:
            tree = [psutil.Process(root_pid), *psutil.Process(root_pid).children(recursive=True)]
        except psutil.Error:
            return
        jvms = set()
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                if "java" in Path(proc.exe()).name:
                    jvms.add(proc.pid)
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                part = "spark jvm" if proc.pid in jvms else "other"
                if part == "other" and any(parent.pid in jvms for parent in proc.parents()):
                    part = "python workers"
                self._record(proc, part)
        for pid, part in others.items():
            with contextlib.suppress(psutil.Error):
                self._record(psutil.Process(pid), part)
        totals = dict.fromkeys(CPU_PARTS, 0.0)
        for part, seconds in self._last.values():
            totals[part] += seconds
        self.times.append(time.time())
        self.totals.append(totals)

    def _record(self, proc: Any, part: str) -> None:
        cpu = proc.cpu_times()
        self._last[proc.pid] = (part, cpu.user + cpu.system)

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds of each part from ``start`` to ``end`` (epoch seconds, interpolated)."""
        if len(self.times) < 2:
            return {}
        return {part: self._at(end, part) - self._at(start, part) for part in CPU_PARTS}

    def _at(self, when: float, part: str) -> float:
        i = max(1, min(len(self.times) - 1, bisect.bisect_left(self.times, when)))
        t0, t1 = self.times[i - 1], self.times[i]
        v0, v1 = self.totals[i - 1][part], self.totals[i][part]
        share = 0.0 if t1 <= t0 else min(1.0, max(0.0, (when - t0) / (t1 - t0)))
        return v0 + (v1 - v0) * share


def listening_pid(bootstrap: str) -> int | None:
    """The process listening on the first address of ``bootstrap`` (this machine's broker)."""
    import psutil

    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    with contextlib.suppress(psutil.Error):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return int(conn.pid)
    return None


def run_sampled(
    cmd: list[str],
    env: dict[str, str],
    stderr_log: Path,
    timeout_s: float,
    others: Mapping[int, str],
    interval_s: float = 0.25,
) -> tuple[int, WorkerMemory, CpuSamples]:
    """Run ``cmd`` (stdout passes through), sampling its Python workers' memory and the CPU
    of it and of ``others`` (pid -> part: the broker, the coordinator); (exit code, memory, cpu)."""
    memory = WorkerMemory()
    cpu = CpuSamples()
    with stderr_log.open("wb") as err:
        proc = subprocess.Popen(cmd, env=env, stderr=err)
        deadline = time.monotonic() + timeout_s
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(cmd, timeout_s)
                memory.sample(proc.pid)
                cpu.sample(proc.pid, others)
                time.sleep(interval_s)
        finally:
            if proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait()
    return proc.returncode, memory, cpu


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything it started (the child's JVM and Python workers)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def parse_settings(pairs: Iterable[str]) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in pairs)


def machine_info() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def save_results(data: dict[str, Any], path: Path, quiet: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    if not quiet:
        print(f"results saved to {path}", flush=True)


# --- one run, in its own process ------------------------------------------------------------


def child(spec: dict[str, Any]) -> int:
    """Run one side x job, write its progress (and windows) to ``spec["out"]`` as JSON."""
    from pyspark.sql import functions as F

    from sluicegate.spark.job import spark_session

    side, job = spec["side"], spec["job"]
    label = f"{side} {job}"
    spark = spark_session(
        f"kafka-bench-{side}-{job}",
        spec["master"],
        quiet=True,
        extra_conf=spark_extra_conf(side, spec["read_path"], spec.get("spark_conf", {})),
    )
    df = stream_reader(spark, spec).load()
    checkpoint = str(Path(spec["workdir"]) / f"checkpoint-{side}-{job}-{spec['run']}")
    name = "windows_" + re.sub(r"\W", "_", side)
    if job == "noop":
        writer = df.writeStream.format("noop")
    else:
        windows = df.groupBy(F.window("timestamp", "1 minute").alias("window")).agg(
            F.count(F.lit(1)).alias("count"), F.sum(F.length("value")).alias("bytes")
        )
        writer = windows.writeStream.format("memory").queryName(name).outputMode("complete")
    started = time.monotonic()
    query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    last_batch, last_print = -1, 0.0
    deadline = started + spec["timeout"]
    while not query.awaitTermination(1):
        if time.monotonic() > deadline:
            query.stop()
            raise RuntimeError(f"the query did not finish within {spec['timeout']} s")
        progress = query.lastProgress
        now = time.monotonic()
        if progress is not None and progress["batchId"] != last_batch and now - last_print >= 5:
            last_batch, last_print = progress["batchId"], now
            rows_seen = sum(int(p["numInputRows"] or 0) for p in query.recentProgress)
            print(f"    {label}: {now - started:5.1f} s, batch {last_batch}, {rows_seen:,} rows", flush=True)
    elapsed = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    result: dict[str, Any] = {
        "elapsed": elapsed,
        "progress": [json.loads(p.json) for p in query.recentProgress],
    }
    if job == "windowed":
        result["windows"] = [
            [int(r["start_ms"]), int(r["count"]), int(r["bytes"])]
            for r in spark.sql(f"SELECT unix_millis(window.start) AS start_ms, count, bytes FROM {name}").collect()
        ]
    spark.stop()
    Path(spec["out"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


# --- the parent -------------------------------------------------------------------------------


@dataclass
class Result:
    side: str
    job: str
    repetition: int = 0
    record_bytes: int = KEY_BYTES + VALUE_BYTES
    rows: int = 0
    seconds: float = 0.0
    steady_rows: int = 0
    steady_s: float = 0.0
    first_batch_s: float = 0.0
    data_batches: int = 0
    add_batch_ms: float = 0.0
    error: str = ""
    windows_ok: bool | None = None
    worker_rss_mb: float = 0.0
    workers_pss_mb: float = 0.0
    pyspark_pss_mb: float = 0.0
    workers: int = 0
    cpu_us_per_row: dict[str, float] = field(default_factory=dict)
    """CPU µs per row of each of ``CPU_PARTS`` in the steady state."""
    read_path: str = ""
    """The read path the query took (``read_path_of``)."""

    @property
    def steady_rate(self) -> float:
        return self.steady_rows / self.steady_s if self.steady_s > 0 else float("nan")

    @property
    def steady_mb(self) -> float:
        return self.steady_rate * self.record_bytes / 1e6


def _ms(p: dict[str, Any], key: str) -> float:
    return float((p.get("durationMs") or {}).get(key, 0))


def _end_s(p: dict[str, Any]) -> float:
    stamp = datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()
    return stamp + _ms(p, "triggerExecution") / 1000


def summarize(
    res: Result, data: dict[str, Any], records: int, value_bytes: int, cpu: CpuSamples | None = None
) -> Result:
    progress = data["progress"]
    res.seconds = float(data["elapsed"])
    res.rows = sum(int(p.get("numInputRows") or 0) for p in progress)
    with_data = [p for p in progress if int(p.get("numInputRows") or 0) > 0]
    res.data_batches = len(with_data)
    if with_data:
        res.first_batch_s = _ms(with_data[0], "triggerExecution") / 1000
    if len(with_data) >= 2:
        res.steady_rows = sum(int(p["numInputRows"]) for p in with_data[1:])
        res.steady_s = _end_s(with_data[-1]) - _end_s(with_data[0])
        res.add_batch_ms = statistics.median(_ms(p, "addBatch") for p in with_data[1:])
        if cpu is not None and res.steady_rows:
            used = cpu.between(_end_s(with_data[0]), _end_s(with_data[-1]))
            res.cpu_us_per_row = {part: s * 1e6 / res.steady_rows for part, s in used.items()}
    if "windows" in data:
        got = {start: (count, total) for start, count, total in data["windows"]}
        want = expected_windows(records, value_bytes)
        res.windows_ok = got == want
        if not res.windows_ok:
            bad = sorted(set(got) ^ set(want)) + sorted(k for k in set(got) & set(want) if got[k] != want[k])
            res.error = f"windows differ, first at {bad[:3]}: got {[got.get(k) for k in bad[:3]]}, " + (
                f"expected {[want.get(k) for k in bad[:3]]}"
            )
    return res


def run_one(
    side: str, job: str, repetition: int, args: argparse.Namespace, bootstrap: str, topic: str, workdir: Path
) -> Result:
    run = f"{side}-{job}-{repetition}"
    res = Result(side, job, repetition, record_bytes(args.value_bytes))
    coordinator = None
    out = workdir / f"result-{run}.json"
    # the executors' read path of the sluicegate sides that read in Python workers
    in_python = side.startswith("sluicegate-") and side not in (JVM_SIDE, DEFAULT_SIDE)
    read_path = side.removeprefix("sluicegate-").split("+")[0] if in_python else None
    spec: dict[str, Any] = {
        "side": side,
        "job": job,
        "run": run,
        "read_path": read_path,
        "bootstrap": bootstrap,
        "topic": topic,
        "master": args.master,
        "max_per_trigger": args.max_per_trigger,
        "arrow_batch_rows": args.arrow_batch_rows,
        "parallelism": sluicegate_parallelism(args),
        "parallelism_given": bool(args.parallelism),
        "workdir": str(workdir),
        "timeout": args.timeout,
        "out": str(out),
        "source": "",
        "client_settings": {**parse_settings(args.client_setting), **sluicegate_variant_settings(side, args)},
        "native_settings": native_settings(side, args),
        "include_headers": args.include_headers,
        "spark_conf": parse_settings(args.spark_conf),
    }
    try:
        if is_planned_by_sluicegate(side):
            spec["source"] = f"kbench-{secrets.token_hex(3)}"
            log = workdir / f"coordinator-{spec['source']}.log"
            coordinator = start_coordinator(spec["source"], topic, bootstrap, args.parallelism or args.partitions, log)
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
        env.pop(READ_PATH_ENV, None)
        if read_path is not None:
            env[READ_PATH_ENV] = read_path
        stderr_log = workdir / f"spark-{run}.log"
        others = {pid: "broker" for pid in [listening_pid(bootstrap)] if pid is not None}
        if coordinator is not None:
            others[coordinator.pid] = "other"
        code, memory, cpu = run_sampled(
            [sys.executable, __file__, "--child", json.dumps(spec)], env, stderr_log, args.timeout + 120, others
        )
        res.worker_rss_mb, res.workers_pss_mb = memory.worker_rss_mb, memory.workers_pss_mb
        res.pyspark_pss_mb, res.workers = memory.all_pss_mb, memory.max_workers
        if code != 0 or not out.is_file():
            tail = "\n".join(stderr_log.read_text(errors="replace").splitlines()[-40:])
            res.error = f"the Spark process failed (exit {code}), {stderr_log}:\n{tail}"
            return res
        res = summarize(res, json.loads(out.read_text()), args.records, args.value_bytes, cpu)
        res.read_path = read_path_of(side, stderr_log)
        return res
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        return res
    finally:
        if coordinator is not None:
            stop_process(coordinator)


def read_path_of(side: str, spark_log: Path) -> str:
    """The read path a side's query took: the one its side names, or readPath=auto's choice
    as the driver logged it."""
    if is_native(side):
        return "spark"
    if side != DEFAULT_SIDE:
        return side.removeprefix("sluicegate-").split("+")[0]
    chosen = CHOICE_LINE.findall(spark_log.read_text(errors="replace"))
    if not chosen:
        return "python (no JVM path in the session)"
    # the Python data source reads with the native reader where the install has it
    return "native" if chosen[-1] == "python" and "native" in available_read_paths() else chosen[-1]


def run_line(r: Result, args: argparse.Namespace) -> str:
    if r.error and not r.rows:
        return f"  -> {r.side} {r.job}: FAILED"
    steady = f"{r.steady_rate:,.0f} rows/s, {r.steady_mb:,.1f} MB/s steady" if r.steady_s > 0 else "no steady state"
    memory = (
        f"\n     executor Python workers: peak RSS {r.worker_rss_mb:,.0f} MB (largest of {r.workers}), "
        f"{r.workers_pss_mb:,.0f} MB PSS together; all PySpark Python processes {r.pyspark_pss_mb:,.0f} MB PSS; "
        f"maxRecordsPerTrigger {args.max_per_trigger:,}, arrowBatchRows {args.arrow_batch_rows:,}"
        if r.workers
        else ""
    )
    return f"  -> {r.side} {r.job}: {r.rows:,} rows in {r.seconds:.1f} s, {steady} (read path {r.read_path}){memory}"


@dataclass
class Summary:
    """One side x job over its repetitions."""

    side: str
    job: str
    runs: int
    ok: bool
    rows_per_s: float = float("nan")
    rows_per_s_min: float = float("nan")
    rows_per_s_max: float = float("nan")
    mb_per_s: float = float("nan")
    seconds: float = float("nan")
    first_batch_s: float = float("nan")
    worker_rss_mb: float = 0.0
    rates: list[float] = field(default_factory=list)
    cpu_us_per_row: dict[str, float] = field(default_factory=dict)
    read_path: str = ""


def summaries(results: Sequence[Result], sides: Sequence[str], jobs: Sequence[str]) -> list[Summary]:
    out = []
    for job in jobs:
        for side in sides:
            runs = [r for r in results if r.side == side and r.job == job]
            good = [r for r in runs if not r.error and r.steady_s > 0]
            s = Summary(side, job, len(runs), ok=bool(runs) and all(not r.error for r in runs))
            if good:
                rates = [r.steady_rate for r in good]
                s.rates = rates
                s.rows_per_s, s.rows_per_s_min, s.rows_per_s_max = statistics.median(rates), min(rates), max(rates)
                s.mb_per_s = statistics.median(r.steady_mb for r in good)
                s.seconds = statistics.median(r.seconds for r in good)
                s.first_batch_s = statistics.median(r.first_batch_s for r in good)
                s.worker_rss_mb = max(r.worker_rss_mb for r in good)
                s.read_path = "/".join(sorted({r.read_path for r in good}))
                measured = [r.cpu_us_per_row for r in good if r.cpu_us_per_row]
                if measured:
                    s.cpu_us_per_row = {part: statistics.median(m[part] for m in measured) for part in CPU_PARTS}
            out.append(s)
    return out


def rates_by_repetition(results: Sequence[Result], job: str, side: str) -> dict[int, float]:
    return {
        r.repetition: r.steady_rate
        for r in results
        if r.job == job and r.side == side and not r.error and r.steady_s > 0
    }


def report(results: list[Result], summary: list[Summary], args: argparse.Namespace) -> int:
    records = args.records
    size = record_bytes(args.value_bytes)
    print(
        f"\n{records:,} records of {size} B (key + value) over {args.partitions} partitions; "
        f"{args.repetitions} repetition(s), median (min - max) of steady-state rows/s; "
        f"batch limit {args.max_per_trigger:,} records\n"
    )
    w = max([18, *(len(s.side) for s in summary)])
    header = (
        f"{'job':<9} {'side':<{w}} {'rows/s':>12} {'(min - max)':>25} {'MB/s':>8} "
        f"{'seconds':>8} {'1st batch s':>11} {'worker RSS MB':>13}  read path"
    )
    print(header)
    print("-" * len(header))
    for s in summary:
        if s.rows_per_s != s.rows_per_s:  # nan: no good run
            print(f"{s.job:<9} {s.side:<{w}} {'no steady state (one data batch)' if s.ok else 'FAILED':>12}")
            continue
        spread = f"({s.rows_per_s_min:,.0f} - {s.rows_per_s_max:,.0f})"
        rss = f"{s.worker_rss_mb:,.0f}" if s.worker_rss_mb else "-"
        print(
            f"{s.job:<9} {s.side:<{w}} {s.rows_per_s:>12,.0f} {spread:>25} {s.mb_per_s:>8.1f} "
            f"{s.seconds:>8.1f} {s.first_batch_s:>11.1f} {rss:>13}  {s.read_path}"
        )
    print()
    by_key = {(s.job, s.side): s for s in summary}
    for job in args.jobs:
        for ours in (s for s in summary if s.job == job and s.side.startswith("sluicegate-")):
            ratios = []
            for base in NATIVE_SIDES:
                native = by_key.get((job, base))
                if native and native.rows_per_s == native.rows_per_s and ours.rows_per_s == ours.rows_per_s:
                    ratios.append(f"{ours.rows_per_s / native.rows_per_s:.2f}x {base}")
            if ratios:
                print(f"{job}: {ours.side} = {', '.join(ratios)} (median steady rows/s, = MB/s ratio)")
            for base in NATIVE_SIDES:
                pairs = paired_text(
                    paired_ratios(rates_by_repetition(results, job, ours.side), rates_by_repetition(results, job, base))
                )
                if pairs:
                    print(f"    paired by repetition, / {base}: {pairs}")
    print_cpu_profile(summary)
    sg_runs = [r for r in results if r.side.startswith("sluicegate-") and r.workers]
    if sg_runs:
        print(
            f"\nmemory of sluicegate's executor Python workers, backlog {records:,} records "
            f"({records * size / 1e6:,.0f} MB), "
            f"maxRecordsPerTrigger={args.max_per_trigger:,} ({args.max_per_trigger * size / 1e6:,.0f} MB), "
            f"arrowBatchRows={args.arrow_batch_rows:,}:"
        )
        for r in sg_runs:
            print(
                f"  {r.side} {r.job} #{r.repetition + 1}: peak RSS of one worker {r.worker_rss_mb:,.0f} MB, "
                f"workers together {r.workers_pss_mb:,.0f} MB PSS"
            )
    print()
    ok = True
    for r in results:
        good = r.rows == records and not r.error
        ok = ok and good
        windows = "" if r.windows_ok is None else f", windows {'OK' if r.windows_ok else 'WRONG'}"
        verdict = "OK" if good else "WRONG"
        print(f"{r.job} {r.side} #{r.repetition + 1}: rows {r.rows:,} of {records:,}{windows} -> {verdict}")
        if r.error:
            print(f"  {r.error}")
    return 0 if ok else 1


def print_cpu_profile(summary: Sequence[Summary]) -> None:
    """Where each side's CPU went per row in the steady state (median over repetitions)."""
    profiled = [s for s in summary if s.cpu_us_per_row]
    if not profiled:
        return
    w = max([18, *(len(s.side) for s in profiled)])
    print(f"\nCPU µs per row, steady state (median); {', '.join(CPU_PARTS)} as sampled every 0.25 s:")
    header = f"{'job':<9} {'side':<{w}} " + " ".join(f"{part:>14}" for part in CPU_PARTS) + f" {'total':>8}"
    print(header)
    for s in profiled:
        parts = " ".join(f"{s.cpu_us_per_row[part]:>14.2f}" for part in CPU_PARTS)
        print(f"{s.job:<9} {s.side:<{w}} {parts} {sum(s.cpu_us_per_row.values()):>8.2f}")


# --- the picture -------------------------------------------------------------------------------


def plot(datasets: Sequence[dict[str, Any]], path: Path) -> None:
    """Throughput per configuration and side (median, min-max whiskers); latency p50/p99 per side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    throughput = sorted(
        (d for d in datasets if d.get("kind") == "throughput"),
        key=lambda d: (d["config"]["partitions"], d["config"]["record_bytes"], d["config"]["records"]),
    )
    latency = [d for d in datasets if d.get("kind") == "latency"]
    panels = (1 if throughput else 0) + (1 if latency else 0)
    if not panels:
        raise ValueError("nothing to plot: no throughput or latency results")
    bars = sum(len(d["config"]["jobs"]) * len(d["config"]["sides"]) for d in throughput)
    fig, axes = plt.subplots(panels, 1, figsize=(max(12.0, 0.62 * bars + 2), 5.2 * panels), squeeze=False)
    colors = {
        NATIVE_DEFAULTS: "#9e9e9e",
        NATIVE_TUNED_SIDE: "#546e7a",
        sluicegate_side("python"): "#1e88e5",
        sluicegate_side("native"): "#fb8c00",
        JVM_SIDE: "#43a047",
        DEFAULT_SIDE: "#8e24aa",
    }
    panel = 0
    if throughput:
        ax = axes[panel][0]
        panel += 1
        groups: list[tuple[str, dict[str, dict[str, Any]]]] = []
        for d in throughput:
            c = d["config"]
            for job in c["jobs"]:
                label = f"{job}\n{c['record_bytes']} B x {c['partitions']} p\n{c['records'] / 1e6:g}M records"
                label += _parallelism_note(c)
                groups.append((label, {s["side"]: s for s in d["summary"] if s["job"] == job}))
        sides = [s for s in colors if any(s in g for _, g in groups)]
        sides += sorted({s for _, g in groups for s in g} - set(sides))
        width = 0.8 / max(1, len(sides))
        for i, side in enumerate(sides):
            xs, ys, lo, hi, notes = [], [], [], [], []
            for gi, (_, g) in enumerate(groups):
                s = g.get(side)
                if s is None or s["rows_per_s"] is None:
                    continue
                xs.append(gi + (i - (len(sides) - 1) / 2) * width)
                ys.append(s["rows_per_s"] / 1e6)
                lo.append((s["rows_per_s"] - s["rows_per_s_min"]) / 1e6)
                hi.append((s["rows_per_s_max"] - s["rows_per_s"]) / 1e6)
                notes.append(f"{_rate(s['rows_per_s'])}\n{s['mb_per_s']:,.1f} MB/s")
            bars = ax.bar(xs, ys, width, label=side, color=colors.get(side), yerr=[lo, hi], capsize=3)
            for bar, note in zip(bars, notes, strict=True):
                ax.annotate(
                    note,
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    xytext=(0, 4),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
        ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=9)
        ax.set_ylabel("million rows/s (steady state, median)")
        reps = sorted({d["config"]["repetitions"] for d in throughput})
        ax.set_title(
            f"Kafka source throughput, Trigger.AvailableNow, median of {'/'.join(map(str, reps))} "
            "alternating runs (whiskers: min-max)"
        )
        ax.margins(y=0.25)
        ax.legend(fontsize=8, loc="upper right")
        ax.grid(axis="y", alpha=0.3)
    if latency:
        ax = axes[panel][0]
        entries = []
        for d in latency:
            c = d["config"]
            for s in d["sides"]:
                if s.get("p50_ms") is not None:
                    label = f"{s['side']}\n{c['rate']:,}/s, {c['record_bytes']} B x {c['partitions']} p"
                    entries.append((label + _parallelism_note(c), s))
        xs = list(range(len(entries)))
        p50 = [e[1]["p50_ms"] for e in entries]
        p99 = [e[1]["p99_ms"] for e in entries]
        b1 = ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50", color="#43a047")
        b2 = ax.bar([x + 0.2 for x in xs], p99, 0.4, label="p99", color="#e53935")
        for bars in (b1, b2):
            for bar in bars:
                ax.annotate(
                    f"{bar.get_height():,.0f}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    fontsize=8,
                )
        ax.set_xticks(xs, [e[0] for e in entries], fontsize=9)
        ax.set_ylabel("ms, record timestamp -> sink")
        ax.set_title("End-to-end latency at a fixed produce rate, processingTime=0 (lower is better)")
        ax.margins(y=0.2)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    hosts = sorted({f"{d.get('machine', {}).get('cpus', '?')} cores" for d in datasets})
    fig.text(0.01, 0.005, f"local broker, Spark local[2], {', '.join(hosts)}; benchmarks/kafka_source.py", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"picture written to {path}", flush=True)


def sluicegate_parallelism(args: argparse.Namespace) -> int:
    """The sluicegate sides' reader subtasks: ``--parallelism``, or what the query takes
    when it names none (the partitions, at most the task slots of ``--master``)."""
    if args.parallelism:
        return int(args.parallelism)
    return capped_parallelism(int(args.partitions), task_slots(args.master, {}, os.cpu_count() or 1))


def _parallelism_note(config: dict[str, Any]) -> str:
    """The sluicegate sides' subtasks when they were not one per partition (older results
    have no ``parallelism``: one per partition)."""
    parallelism = config.get("parallelism") or config["partitions"]
    return "" if parallelism == config["partitions"] else f"\nsluicegate parallelism {parallelism}"


def _rate(rows_per_s: float) -> str:
    return f"{rows_per_s / 1e6:.2f}M" if rows_per_s >= 1e6 else f"{rows_per_s / 1e3:,.0f}k"


def load_results(paths: Sequence[str]) -> list[dict[str, Any]]:
    return [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]


# --- the command -------------------------------------------------------------------------------


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and the options' defaults where they say something."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in ("", [], None, False):
            return action.help
        return super()._get_help_string(action)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog=(
            "Sides: native-defaults, native-tuned (with "
            + ", ".join(f"{k}={v}" for k, v in NATIVE_TUNED.items())
            + "), sluicegate-python and, when sluicegate._native imports, sluicegate-native. "
            "See the module docstring and benchmarks/README.md for the method."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--records", type=int, default=10_000_000, help="records in the topic")
    parser.add_argument(
        "--record-bytes",
        type=int,
        default=KEY_BYTES + VALUE_BYTES,
        help="bytes of key + value per record (a 10-byte key; e.g. 1024 for '1 KB records'); a topic per size",
    )
    parser.add_argument(
        "--partitions", type=int, default=8, help="partitions of the topic (e.g. 64); a topic per count"
    )
    parser.add_argument(
        "--topic", default="", help="default: sluicegate-bench-<records>r-<partitions>p[-<record bytes>b]-v1"
    )
    parser.add_argument(
        "--repetitions", type=int, default=3, help="runs of every side x job; the sides alternate between runs"
    )
    parser.add_argument(
        "--max-per-trigger",
        type=int,
        default=0,
        help="the batch size: maxOffsetsPerTrigger (Spark's source) and maxRecordsPerTrigger (sluicegate); "
        "default: a fifth of --records (2,000,000 for 10M), so every run has a steady state of 4 batches",
    )
    parser.add_argument(
        "--arrow-batch-rows",
        type=int,
        default=ARROW_BATCH_ROWS,
        help="sluicegate's arrowBatchRows: rows per Arrow batch a Python worker hands Spark",
    )
    parser.add_argument(
        "--sides",
        default="",
        help="comma-separated subset of native-defaults, native-tuned, sluicegate-python, sluicegate-native, "
        f"{JVM_SIDE} (default: all; sluicegate-native only when sluicegate._native imports, {JVM_SIDE} only "
        "when its jar is built)",
    )
    parser.add_argument("--jobs", default=",".join(JOBS), help="comma-separated subset of noop, windowed")
    parser.add_argument(
        "--tuned",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the native-tuned side, added to or overriding its tuned settings "
        "(e.g. kafka.receive.buffer.bytes=1048576), repeatable",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
        help="one more native side, native-tuned+LABEL: the tuned settings with these added or overridden, "
        "run in turn with the others (to try a setting), repeatable",
    )
    parser.add_argument(
        "--sluicegate-variant",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
        help="one more sluicegate side, sluicegate-native+LABEL: the native read path with these librdkafka "
        "settings added to --client-setting, run in turn with the others (to try a setting), repeatable",
    )
    parser.add_argument(
        "--client-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting of the sluicegate sides' consumers (option.kafka.KEY), repeatable",
    )
    parser.add_argument(
        "--parallelism",
        type=int,
        default=0,
        help="the sluicegate sides' reader subtasks = Spark tasks a batch (default: none given, the query's "
        "default: the topic's partitions, at most the task slots of --master)",
    )
    parser.add_argument(
        "--include-headers",
        action="store_true",
        help="rows with a headers column on every side (Spark's includeHeaders, sluicegate's include_headers); "
        "default: without, as both sources default",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting of every run's session (e.g. a profiler's spark.driver.extraJavaOptions), repeatable",
    )
    parser.add_argument("--master", default="local[2]", help="Spark master of every run")
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""),
        help="an existing broker (default: $KAFKA_BOOTSTRAP_SERVERS, else the kept local bench broker)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take")
    parser.add_argument(
        "--results",
        default="",
        help=f"the results JSON (default: {RESULTS_DIR.relative_to(REPO)}/kafka-source-<config>-<UTC time>.json)",
    )
    parser.add_argument("--plot", default=str(DEFAULT_PLOT), help="the PNG to draw ('' for none)")
    parser.add_argument(
        "--replot",
        nargs="+",
        metavar="JSON",
        help="draw saved results JSON (this script's, several configurations, and kafka_latency.py's) "
        "into --plot; runs nothing",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the work directory (logs, checkpoints)")
    args = parser.parse_args(argv)
    if args.replot:
        return args
    if bad := [kv for kv in [*args.client_setting, *args.tuned] if "=" not in kv]:
        parser.error(f"--client-setting and --tuned take KEY=VALUE, not {bad[0]!r}")
    if args.record_bytes < 2 * KEY_BYTES:
        parser.error(f"--record-bytes is at least {2 * KEY_BYTES}")
    if args.repetitions < 1:
        parser.error("--repetitions is at least 1")
    if args.max_per_trigger <= 0:
        args.max_per_trigger = max(1, args.records // 5)
    args.value_bytes = args.record_bytes - KEY_BYTES
    args.native_tuned = {**NATIVE_TUNED, **parse_settings(args.tuned)}
    args.variants = _labelled_settings(parser, "--variant", args.variant)
    args.sluicegate_variants = _labelled_settings(parser, "--sluicegate-variant", args.sluicegate_variant)
    paths = available_read_paths()
    all_sides = [*NATIVE_SIDES, *(sluicegate_side(p) for p in READ_PATHS), DEFAULT_SIDE]
    if args.sides:
        args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
        if bad := [s for s in args.sides if s not in all_sides]:
            parser.error(f"unknown side {bad[0]!r}: --sides is a subset of {', '.join(all_sides)}")
        if sluicegate_side("native") in args.sides and "native" not in paths:
            parser.error(f"sluicegate-native needs the module {NATIVE_MODULE}, which does not import here")
        if JVM_SIDE in args.sides and "jvm" not in paths:
            parser.error(f"{JVM_SIDE} needs the JVM read path's jar: make install builds it")
    else:
        args.sides = [*NATIVE_SIDES, *(sluicegate_side(p) for p in paths), DEFAULT_SIDE]
    variant_sides = [f"{NATIVE_TUNED_SIDE}+{label}" for label in args.variants]
    native_end = max((i + 1 for i, s in enumerate(args.sides) if is_native(s)), default=0)
    args.sides[native_end:native_end] = variant_sides
    if args.sluicegate_variants and "native" not in paths:
        parser.error(f"--sluicegate-variant needs the module {NATIVE_MODULE}, which does not import here")
    args.sides += [f"{sluicegate_side('native')}+{label}" for label in args.sluicegate_variants]
    args.jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if set(args.jobs) - set(JOBS):
        parser.error(f"--jobs is a subset of {', '.join(JOBS)}")
    return args


def _labelled_settings(parser: argparse.ArgumentParser, flag: str, texts: Sequence[str]) -> dict[str, dict[str, str]]:
    """``LABEL:KEY=VALUE[,KEY=VALUE]`` arguments as {label: settings}."""
    out = {}
    for text in texts:
        label, _, pairs = text.partition(":")
        settings = [kv.strip() for kv in pairs.split(",") if kv.strip()]
        if not label or not settings or any("=" not in kv for kv in settings):
            parser.error(f"{flag} takes LABEL:KEY=VALUE[,KEY=VALUE], not {text!r}")
        out[label] = parse_settings(settings)
    return out


def _json_safe(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}


def results_data(
    args: argparse.Namespace, topic: str, machine: dict[str, Any], results: list[Result], code: int | None
) -> dict[str, Any]:
    """What --results holds: the configuration, the machine, the summary and every run (``code`` None: partial)."""
    config = {
        "records": args.records,
        "record_bytes": args.record_bytes,
        "partitions": args.partitions,
        "parallelism": sluicegate_parallelism(args),
        "parallelism_given": bool(args.parallelism),
        "topic": topic,
        "repetitions": args.repetitions,
        "max_per_trigger": args.max_per_trigger,
        "arrow_batch_rows": args.arrow_batch_rows,
        "jobs": args.jobs,
        "sides": args.sides,
        "native_tuned": args.native_tuned,
        "variants": args.variants,
        "sluicegate_variants": args.sluicegate_variants,
        "client_settings": parse_settings(args.client_setting),
        "include_headers": args.include_headers,
        "spark_conf": parse_settings(args.spark_conf),
        "master": args.master,
    }
    return {
        "kind": "throughput",
        "config": config,
        "machine": machine,
        "summary": [_json_safe(asdict(s)) for s in summaries(results, args.sides, args.jobs)],
        "runs": [_json_safe({**asdict(r), "steady_rate": r.steady_rate, "steady_mb": r.steady_mb}) for r in results],
        "complete": code is not None,
        "exit_code": code,
    }


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child(json.loads(sys.argv[2]))
    args = parse_args()
    if args.replot:
        plot(load_results(args.replot), Path(args.plot or DEFAULT_PLOT))
        return 0
    topic = args.topic or default_topic(args.records, args.partitions, args.value_bytes)
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-kafka-bench-"))
    machine = machine_info()
    results: list[Result] = []
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"kafka-source-{args.records}r-{args.record_bytes}b-{args.partitions}p-{stamp}.json"
    results_path = Path(args.results) if args.results else RESULTS_DIR / name
    print(f"results go to {results_path} (rewritten after every run)", flush=True)
    with bench_broker(args.bootstrap_servers) as bootstrap:
        print(f"Kafka {bootstrap}; work directory {workdir}; load average {machine['load_average'][0]:.1f}", flush=True)
        fill_topic(bootstrap, topic, args.records, args.partitions, args.value_bytes)
        if any(is_native(s) for s in args.sides):
            from sluicegate.devtools.broker.maven import ensure_spark_kafka_jars

            print(f"Spark's Kafka source: {', '.join(p.name for p in ensure_spark_kafka_jars())}", flush=True)
        if NATIVE_TUNED_SIDE in args.sides:
            print(f"native-tuned: {', '.join(f'{k}={v}' for k, v in args.native_tuned.items())}", flush=True)
        for label, settings in args.variants.items():
            extra = ", ".join(f"{k}={v}" for k, v in settings.items())
            print(f"{NATIVE_TUNED_SIDE}+{label}: native-tuned with {extra}", flush=True)
        if args.client_setting:
            print(f"sluicegate sides' librdkafka settings: {', '.join(args.client_setting)}", flush=True)
        for label, settings in args.sluicegate_variants.items():
            extra = ", ".join(f"{k}={v}" for k, v in settings.items())
            print(f"sluicegate-native+{label}: the native read path with {extra}", flush=True)
        paths = available_read_paths()
        print(
            f"sluicegate read paths available: {', '.join(paths)}"
            + ("" if "native" in paths else f" ({NATIVE_MODULE} does not import: no sluicegate-native side)"),
            flush=True,
        )
        total = args.repetitions * len(args.jobs) * len(args.sides)
        n = 0
        for repetition in range(args.repetitions):
            turn = repetition % len(args.sides)
            order = args.sides[turn:] + args.sides[:turn]
            for job in args.jobs:
                for side in order:
                    n += 1
                    print(f"\n[{n}/{total}] repetition {repetition + 1}: {side} / {job}", flush=True)
                    result = run_one(side, job, repetition, args, bootstrap, topic, workdir)
                    print(run_line(result, args), flush=True)
                    results.append(result)
                    save_results(results_data(args, topic, machine, results, None), results_path)
    machine["load_average_end"] = list(os.getloadavg())
    summary = summaries(results, args.sides, args.jobs)
    code = report(results, summary, args)
    data = results_data(args, topic, machine, results, code)
    save_results(data, results_path, quiet=False)
    if args.plot:
        plot([data], Path(args.plot))
    if args.keep_logs or code != 0:
        print(f"\nlogs and checkpoints kept in {workdir}")
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
