"""Spark's own Parquet file stream against the sluicegate ``files`` connector, same files.

    .venv/bin/python benchmarks/file_source.py                 # 200 files x 100,000 rows, 3 repetitions
    .venv/bin/python benchmarks/file_source.py --files 40 --repetitions 1 --jobs noop      # a smoke run
    .venv/bin/python benchmarks/file_source.py --replot R.json                             # the picture again

Writes the files once into a temporary directory: ten columns, ``id BIGINT, value DOUBLE,
name STRING, ts TIMESTAMP`` and six more (``c4`` .. ``c9``, doubles and strings), ``ts`` =
2023-11-14T22:13:20Z + ``id`` ms. Then, in one Spark session (``local[2]``), it runs each
job on both sides, ``Trigger.AvailableNow``, the sides in turn (the first side moving one
place each repetition), ``--repetitions`` times:

- ``native``: ``spark.readStream.schema(S).parquet(dir)``, ``maxFilesPerTrigger``;
- ``sluicegate``: ``readStream.format("sluicegate")``, connector ``files`` with
  ``option.schema`` S (a real coordinator process per run, bounded, ``--parallelism``
  reader subtasks, a local Kafka broker unless ``--bootstrap-servers``),
  ``maxRecordsPerTrigger`` = files per batch x rows per file: the same batches;
- ``sluicegate-jvm``: the native side's query with ``format("sluicegate")``,
  ``option("format", "parquet")`` and ``readPath=jvm`` (sluicegate's planning, Spark's
  Parquet reader; the query coordinates its source itself, in the driver, as a user's would),
  ``maxFilesPerTrigger`` as on the native side, ``--parallelism`` reader subtasks;
- ``sluicegate-default``: the same query with no ``readPath``: what a user gets
  (``readPath=auto``, sluicegate/spark/read_path_choice.py); the path it chose is printed.

Jobs: ``noop`` (all ten columns into ``writeStream.format("noop")``), ``pruned`` (S names two
of the ten columns, ``id, value``: Spark's reader and the connector's read only those two;
into noop) and ``windowed`` (S all ten, the query ``groupBy(window(ts, "1 minute"))
.agg(count, sum(value))`` into a ``memory`` sink in complete mode: Spark prunes the
columns the query does not use, a Python streaming source cannot be told, so the
connector reads all ten; on ``readPath=jvm`` Spark prunes them as on the native side).

Each job runs once on every side before the measured runs, not counted: a session's
first queries run up to 1.5x slower while the JVM compiles Spark's code, which would
penalize whichever side went first, and the broker started here (which only the sluicegate
sides use) compiles its own (``--no-warmup`` leaves it out). Figures are steady
state: from the end of the first batch that read data to the end of the last. Prints the
median (min - max) rows/s of each side and job, the ratio of each sluicegate side to native
(of the medians, and paired by repetition: ``paired.py``), and where a trigger's time goes;
saves them as JSON (``--results``) and draws rows/s per job and side into a PNG
(``--plot``, docs/images/file-source-benchmark.png). Exit code 1 if a query's row count
is not files x rows per file or a window's count or sum is not the exact expected one.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import paired_ratios, paired_text
from read_path_log import ChoiceLog, install

TARGET_RATIO = 1.0
READ_PATHS = {"native": "spark", "sluicegate": "python", "sluicegate-jvm": "jvm"}
"""The read path of each side that names one (``sluicegate-default`` prints its choice)."""
SIDES = ("native", "sluicegate", "sluicegate-jvm", "sluicegate-default")
DRIVER_PLANNED = ("sluicegate-jvm", "sluicegate-default")
"""The sides whose query coordinates its source itself, Spark's way (``load(dir)``)."""
JOBS = ("noop", "pruned", "windowed")
FULL_SCHEMA = (
    "id BIGINT, value DOUBLE, name STRING, ts TIMESTAMP, "
    "c4 DOUBLE, c5 STRING, c6 DOUBLE, c7 STRING, c8 DOUBLE, c9 STRING"
)
PRUNED_SCHEMA = "id BIGINT, value DOUBLE"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_PLOT = REPO / "docs" / "images" / "file-source-benchmark.png"
COLORS = {"native": "#546e7a", "sluicegate": "#1e88e5", "sluicegate-jvm": "#43a047", "sluicegate-default": "#fb8c00"}
TS_ORIGIN_MS = 1_700_000_000_000
WINDOW_MS = 60_000


def write_files(root: Path, files: int, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for k in range(files):
        ids = pa.array(range(k * rows, (k + 1) * rows), pa.int64())
        doubles = pc.cast(ids, pa.float64())
        text = pc.cast(pc.bit_wise_and(ids, 1023), pa.string())
        columns = {
            "id": ids,
            "value": pc.multiply(doubles, 0.5),
            "name": pc.binary_join_element_wise("n", text, ""),
            "ts": pc.cast(pc.add(ids, TS_ORIGIN_MS), pa.timestamp("ms", tz="UTC")),
        }
        for c in range(4, 10):
            columns[f"c{c}"] = (
                pc.multiply(doubles, float(c)) if c % 2 == 0 else pc.binary_join_element_wise(f"c{c}-", text, "")
            )
        pq.write_table(pa.table(columns), root / f"part-{k:05d}.parquet")


def expected_windows(total: int) -> dict[int, tuple[int, float]]:
    """window start (epoch ms) -> (rows, sum of value) for ids 0..total-1."""
    out = {}
    first = TS_ORIGIN_MS - TS_ORIGIN_MS % WINDOW_MS
    start = first
    while start < TS_ORIGIN_MS + total:
        lo, hi = max(0, start - TS_ORIGIN_MS), min(total, start + WINDOW_MS - TS_ORIGIN_MS)
        if hi > lo:
            out[start] = (hi - lo, 0.5 * (lo + hi - 1) * (hi - lo) / 2)
        start += WINDOW_MS
    return out


def start_coordinator(source: str, options: dict[str, str], bootstrap: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "sluicegate", "coordinator", "--source", source, "--connector", "files"]
    cmd += ["--max-parallelism", options.pop("_parallelism")]
    for key, value in options.items():
        cmd += ["--option", f"{key}={value}"]
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
class FileRun:
    side: str
    job: str
    repetition: int
    rows: int = 0
    steady_rate: float = float("nan")
    batches: int = 0
    add_batch_ms: float = float("nan")
    phases_ms: dict[str, float] = field(default_factory=dict)
    """Median ms of each part of a steady-state trigger (Spark's ``durationMs``)."""
    windows_ok: bool | None = None
    read_path: str = ""
    """The read path the query took: the one given, or ``readPath=auto``'s choice."""
    error: str = ""


def schema_of(job: str) -> str:
    return PRUNED_SCHEMA if job == "pruned" else FULL_SCHEMA


def stream_of(
    spark: Any, side: str, job: str, args: argparse.Namespace, data: Path, source: str, bootstrap: str
) -> Any:
    ddl = schema_of(job)
    if side == "native" or side in DRIVER_PLANNED:
        schema = spark.createDataFrame([], ddl).schema
        reader = spark.readStream.schema(schema).option("maxFilesPerTrigger", str(args.files_per_batch))
        if side == "native":
            return reader.parquet(str(data))
        reader = reader.format("sluicegate").option("format", "parquet")
        if side == "sluicegate-jvm":
            reader = reader.option("readPath", "jvm")
        reader = reader.option("source", source).option("kafka.bootstrap.servers", bootstrap)
        return reader.option("parallelism", str(args.parallelism)).load(str(data))
    return (
        spark.readStream.format("sluicegate")
        .option("source", source)
        .option("connector", "files")
        .option("parallelism", str(args.parallelism))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("maxRecordsPerTrigger", str(args.files_per_batch * args.rows_per_file))
        .option("option.path", str(data))
        .option("option.schema", ddl)
        .load()
    )


def run_query(spark: Any, stream: Any, run: FileRun, checkpoint: Path, timeout_s: float) -> Any:
    """Run one query to its end; (progress events, windows as {start ms: (count, sum)} or None)."""
    from pyspark.sql import functions as F

    name = f"windows_{run.side}_{run.repetition}".replace("-", "_")
    if run.job == "windowed":
        windows = stream.groupBy(F.window("ts", "1 minute").alias("window")).agg(
            F.count(F.lit(1)).alias("count"), F.sum("value").alias("sum")
        )
        writer = windows.writeStream.format("memory").queryName(name).outputMode("complete")
    else:
        writer = stream.writeStream.format("noop")
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination(timeout_s)
    if query.isActive:
        query.stop()
        raise RuntimeError(f"the query did not finish within {timeout_s} s")
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    got = None
    if run.job == "windowed":
        rows = spark.sql(f"SELECT unix_millis(window.start) AS start, count, sum FROM {name}").collect()
        got = {int(r["start"]): (int(r["count"]), float(r["sum"])) for r in rows}
        spark.sql(f"DROP VIEW IF EXISTS {name}")
    return list(query.recentProgress), got


def end_s(p: dict[str, Any]) -> float:
    stamp = datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()
    return stamp + float((p.get("durationMs") or {}).get("triggerExecution", 0)) / 1000


def summarize(run: FileRun, progress: list[dict[str, Any]]) -> None:
    data = [p for p in progress if int(p.get("numInputRows") or 0) > 0]
    run.rows = sum(int(p["numInputRows"]) for p in data)
    run.batches = len(data)
    if len(data) >= 2:
        steady_rows = sum(int(p["numInputRows"]) for p in data[1:])
        run.steady_rate = steady_rows / (end_s(data[-1]) - end_s(data[0]))
        run.add_batch_ms = statistics.median(float((p.get("durationMs") or {}).get("addBatch", 0)) for p in data[1:])
        phases = {name for p in data[1:] for name in (p.get("durationMs") or {})}
        run.phases_ms = {
            name: statistics.median(float((p.get("durationMs") or {}).get(name, 0)) for p in data[1:])
            for name in sorted(phases)
        }


def one_run(
    spark: Any, run: FileRun, args: argparse.Namespace, data: Path, workdir: Path, bootstrap: str, choices: ChoiceLog
) -> None:
    coordinator = None
    source = f"fbench-{secrets.token_hex(3)}"
    tag = f"{run.side}-{run.job}-{run.repetition}"
    try:
        if run.side == "sluicegate":
            options = {"path": str(data), "schema": schema_of(run.job), "_parallelism": str(args.parallelism)}
            coordinator = start_coordinator(source, options, bootstrap, workdir / f"coordinator-{tag}.log")
        stream = stream_of(spark, run.side, run.job, args, data, source, bootstrap)
        progress, windows = run_query(spark, stream, run, workdir / f"checkpoint-{tag}", args.timeout)
        summarize(run, progress)
        run.read_path = READ_PATHS.get(run.side) or choices.chosen(source)
        if windows is not None:
            run.windows_ok = windows == expected_windows(args.files * args.rows_per_file)
    except Exception as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        if coordinator is not None:
            stop_process(coordinator)


def rates_by_repetition(runs: list[FileRun], job: str, side: str) -> dict[int, float]:
    return {
        r.repetition: r.steady_rate
        for r in runs
        if r.job == job and r.side == side and not r.error and r.steady_rate == r.steady_rate
    }


def report(runs: list[FileRun], args: argparse.Namespace) -> int:
    total = args.files * args.rows_per_file
    print(
        f"\n{args.files} files x {args.rows_per_file:,} rows, {args.files_per_batch} files a batch; "
        f"{args.repetitions} repetition(s), median (min - max) of steady-state rows/s\n"
    )
    print(f"{'job':<9} {'side':<19} {'rows/s':>12} {'(min - max)':>27} {'addBatch ms':>12}  read path")
    medians: dict[tuple[str, str], float] = {}
    for job in args.jobs:
        for side in args.sides:
            good = [
                r for r in runs if r.side == side and r.job == job and not r.error and r.steady_rate == r.steady_rate
            ]
            if not good:
                print(f"{job:<9} {side:<19} {'FAILED':>12}")
                continue
            rates = [r.steady_rate for r in good]
            medians[(job, side)] = statistics.median(rates)
            spread = f"({min(rates):,.0f} - {max(rates):,.0f})"
            add_batch = statistics.median(r.add_batch_ms for r in good)
            paths = "/".join(sorted({r.read_path for r in good}))
            print(f"{job:<9} {side:<19} {medians[(job, side)]:>12,.0f} {spread:>27} {add_batch:>12,.0f}  {paths}")
    print()
    for job in args.jobs:
        for side in args.sides:
            if side != "native" and (job, "native") in medians and (job, side) in medians:
                ratio = medians[(job, side)] / medians[(job, "native")]
                print(f"{job}: {side} / native = {ratio:.2f} (target >= {TARGET_RATIO})")
                pairs = paired_ratios(rates_by_repetition(runs, job, side), rates_by_repetition(runs, job, "native"))
                if pairs:
                    print(f"    paired by repetition: {paired_text(pairs)}")
    print("\nwhere a steady-state trigger's time goes, ms (median of the runs' medians, Spark's durationMs):")
    for job in args.jobs:
        for side in args.sides:
            done = [r for r in runs if r.side == side and r.job == job and r.phases_ms]
            if done:
                names = sorted({n for r in done for n in r.phases_ms})
                parts = ", ".join(f"{n} {statistics.median(r.phases_ms.get(n, 0) for r in done):,.0f}" for n in names)
                print(f"  {job:<9} {side:<15} {parts}")
    print()
    ok = True
    for r in runs:
        exact = r.rows == total and not r.error and r.windows_ok is not False
        ok = ok and exact
        windows = "" if r.windows_ok is None else f", windows {'OK' if r.windows_ok else 'WRONG'}"
        verdict = "OK" if exact else "WRONG"
        print(f"{r.job} {r.side} #{r.repetition + 1}: rows {r.rows:,} of {total:,}{windows} -> {verdict}")
        if r.error:
            print(f"  {r.error}")
    return 0 if ok else 1


def summary(runs: list[FileRun], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per job and side: the median and range of the steady-state rows/s of its exact runs."""
    rows = []
    for job in args.jobs:
        for side in args.sides:
            rates = [r.steady_rate for r in runs if r.side == side and r.job == job and not r.error]
            rates = [rate for rate in rates if rate == rate]
            if rates:
                rows.append(
                    {
                        "job": job,
                        "side": side,
                        "rows_per_s": statistics.median(rates),
                        "min": min(rates),
                        "max": max(rates),
                    }
                )
    return rows


def save_results(runs: list[FileRun], args: argparse.Namespace, path: Path) -> None:
    config = {
        k: getattr(args, k) for k in ("files", "rows_per_file", "files_per_batch", "repetitions", "jobs", "sides")
    }
    data = {"config": config, "cpus": os.cpu_count(), "summary": summary(runs, args), "runs": [asdict(r) for r in runs]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    print(f"results saved to {path}")


def plot(data: dict[str, Any], path: Path) -> None:
    """Rows/s per job and side: the median, whiskers from the slowest to the fastest run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config, rows = data["config"], data["summary"]
    jobs, sides = config["jobs"], config["sides"]
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(sides)
    for i, side in enumerate(sides):
        found = [(jobs.index(r["job"]), r) for r in rows if r["side"] == side]
        xs = [j + (i - (len(sides) - 1) / 2) * width for j, _ in found]
        ys = [r["rows_per_s"] / 1e6 for _, r in found]
        errors = [
            [(r["rows_per_s"] - r["min"]) / 1e6 for _, r in found],
            [(r["max"] - r["rows_per_s"]) / 1e6 for _, r in found],
        ]
        bars = ax.bar(xs, ys, width, label=side, color=COLORS.get(side), yerr=errors, capsize=3)
        tops = [r["max"] / 1e6 for _, r in found]  # above the whisker
        for bar, y, top in zip(bars, ys, tops, strict=True):
            where = (bar.get_x() + bar.get_width() / 2, top)
            ax.annotate(f"{y:.2f}M", where, xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    labels = {"noop": "noop (10 columns)", "pruned": "pruned (2 of 10)", "windowed": "windowed (uses 2 of 10)"}
    ax.set_xticks(range(len(jobs)), [labels.get(j, j) for j in jobs])
    ax.set_ylabel("million rows/s (steady state, median)")
    ax.set_title(
        f"Parquet file stream, {config['files']} files x {config['rows_per_file']:,} rows, "
        f"{config['files_per_batch']} files a batch, median of {config['repetitions']} alternating runs"
    )
    ax.margins(y=0.2)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.text(0.01, 0.005, f"Spark local[2], {data.get('cpus', '?')} cores; benchmarks/file_source.py", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"picture written to {path}")


def run(args: argparse.Namespace) -> int:
    from sluicegate.devtools.broker.local import LocalKafkaBroker
    from sluicegate.spark.job import spark_session

    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-file-bench-"))
    data = workdir / "in"
    data.mkdir()
    total = args.files * args.rows_per_file
    started = time.monotonic()
    write_files(data, args.files, args.rows_per_file)
    print(f"{args.files} Parquet files x {args.rows_per_file:,} rows = {total:,} rows in {data}", end="")
    print(f" (written in {time.monotonic() - started:.1f} s)", flush=True)
    broker = spark = None
    bootstrap = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    runs: list[FileRun] = []
    try:
        if not bootstrap:
            broker = LocalKafkaBroker(run_dir=workdir / "broker", die_with_parent=True)
            bootstrap = broker.start(timeout_s=180)
        spark = spark_session("sluicegate-file-bench", args.master, quiet=True)
        choices = install()
        for job in args.jobs if args.warmup else ():
            # the session's first queries run up to 1.5x slower (the JVM compiles Spark's
            # reader and operators as they run): whichever side went first would pay for it.
            # Every side once: the broker (started here, used by the sluicegate sides only)
            # compiles its request paths the same way.
            for side in args.sides:
                print(f"warm-up (not counted): {side} / {job}", flush=True)
                one_run(spark, FileRun(side, job, -1), args, data, workdir, bootstrap, choices)
        count = args.repetitions * len(args.jobs) * len(args.sides)
        for repetition in range(args.repetitions):
            first = repetition % len(args.sides)
            sides = args.sides[first:] + args.sides[:first]
            for job in args.jobs:
                for side in sides:
                    run = FileRun(side, job, repetition)
                    print(f"[{len(runs) + 1}/{count}] repetition {repetition + 1}: {side} / {job}", flush=True)
                    one_run(spark, run, args, data, workdir, bootstrap, choices)
                    runs.append(run)
                    state = (
                        run.error
                        or f"{run.rows:,} rows in {run.batches} data batches, {run.steady_rate:,.0f} rows/s"
                        f" (read path {run.read_path})"
                    )
                    print(f"  -> {state}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)  # ~1 GB of files
    status = report(runs, args)
    if args.results:
        save_results(runs, args, Path(args.results))
    if args.plot:
        plot({"config": vars(args), "cpus": os.cpu_count(), "summary": summary(runs, args)}, Path(args.plot))
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rows-per-file", type=int, default=100_000)
    parser.add_argument("--files-per-batch", type=int, default=20)
    parser.add_argument("--parallelism", type=int, default=2, help="the sluicegate sides' reader subtasks")
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset of " + ", ".join(SIDES))
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--jobs", default=",".join(JOBS), help="comma-separated subset of " + ", ".join(JOBS))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap-servers", default="")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (files, logs)")
    parser.add_argument(
        "--no-warmup", dest="warmup", action="store_false", help="no untimed run of each job before the measured ones"
    )
    parser.add_argument("--results", default="", help="save the runs as JSON here")
    parser.add_argument("--plot", default=str(DEFAULT_PLOT), help="the PNG to draw ('' for none)")
    parser.add_argument("--replot", default="", help="draw --plot from a --results file; runs nothing")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads(Path(args.replot).read_text()), Path(args.plot or DEFAULT_PLOT))
        return 0
    args.jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = sorted(set(args.jobs) - set(JOBS))
    if unknown:
        parser.error(f"unknown job(s) {', '.join(unknown)}; the jobs are {', '.join(JOBS)}")
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if "native" not in args.sides or set(args.sides) - set(SIDES):
        parser.error(f"--sides: native and any of {', '.join(SIDES[1:])}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
