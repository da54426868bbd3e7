"""Kafka -> Kafka exactly-once copying: sluicegate's standalone reader against Quix Streams.

    .venv/bin/python benchmarks/stream_processor.py                        # 1M records of 110 B, 8 partitions, 3 times
    .venv/bin/python benchmarks/stream_processor.py --records 300000 --repetitions 1   # a short run
    .venv/bin/python benchmarks/stream_processor.py --sides quix,sluicegate-batch      # some sides only
    .venv/bin/python benchmarks/stream_processor.py --sides faust --faust-records 20000  # Faust, its own slice
    .venv/bin/python benchmarks/stream_processor.py --sides sluicegate-batch,sluicegate-batch-x2  # 2 readers vs 1

The input is kafka_clients.py's topic (``fill_topic``: record i in partition i % P, key
``%010d`` of i, a value of ``--value-bytes`` starting with the same digits, no headers),
written once and reused by every side and every run. Each run copies all of it into a
fresh output topic OUT of P partitions, exactly once, in one processing process (two for
the ``-x2`` sides):

- ``sluicegate-identity``: a bounded ``sluicegate coordinator --connector kafka`` (max
  parallelism 1, ``starting_offsets=earliest``, ``stopping_offsets=latest``) on a fresh
  source name, and one ``sluicegate reader --subtask 0 --output kafka:OUT`` with no
  function: the record format writes key, value, headers and timestamp as read; the reader
  exits 0 once every split is read and committed;
- ``sluicegate-record``: the same with ``--process benchfns:add_field``, a per-record
  function ``record.replace(value=record.value + b"!")`` (``sluicegate.Message``);
- ``sluicegate-stateful``: ``sluicegate-record`` with a stateful function
  (``benchfns:add_field_counted``): it also counts the records of each split in the
  split's state, which every checkpoint saves to the split-state topic in its transaction;
- ``sluicegate-batch``: the same with ``--process benchfns:add_field_batch``, whose first
  parameter is a ``pyarrow.RecordBatch``: the value column joined with ``b"!"``
  (``pyarrow.compute.binary_join_element_wise``), key, headers and timestamp kept;
- ``quix``: Quix Streams 3.28, ``Application(processing_guarantee="exactly-once",
  auto_offset_reset="earliest")`` on a fresh consumer group, ``app.dataframe(IN)
  .apply(lambda value: value + b"!").to_topic(OUT)`` with ``bytes`` (de)serializers, run
  with ``app.run(count=N)`` (it stops once N records went through and commits).
  Its settings (``QUIX_SETTINGS``, ``--quix-defaults`` / ``--quix-setting`` to change):
  ``commit_interval`` 5 s (its default); producer ``linger.ms=20``, ``batch.size=1000000``,
  ``batch.num.messages=100000``, ``compression.type=none``; consumer
  ``fetch.max.bytes=104857600``, ``max.partition.fetch.bytes=16777216``,
  ``queued.max.messages.kbytes=262144``, ``queued.min.messages=200000``. Tried on 300k
  records, 2 runs each (a busy machine): these ~31k records/s, Quix's defaults ~23k (its
  5 ms linger makes small produce requests: 4x the broker CPU), commit_interval 2 s ~31k,
  10 s ~25k. Quix handles one message per ``poll()`` in Python whatever the settings are.
  Quix 3.28 requires ``confluent-kafka<2.13`` and ``pydantic<2.14`` (this venv has newer
  ones); when quixstreams does not import in this interpreter the side runs in
  ``<cache root>/quix-venv`` (``--quix-python``), made once with ``python3.11 -m venv`` and
  ``pip install "quixstreams==3.28.*"``, so this project's venv keeps its own versions;
- ``faust`` (only when named in ``--sides``): faust-streaming 0.15.3 (this venv's),
  ``processing_guarantee="exactly_once"``, ``broker_commit_interval`` 2 s, raw serializers,
  one agent sending ``value + b"!"`` to OUT, on a topic of its own of ``--faust-records``
  records (~1,700 records/s here: over 10x slower than Quix); SIGTERMed once it sent them
  all (its clean shutdown commits the last transaction; the check below says whether it did);
- ``sluicegate-identity-x2``, ``sluicegate-record-x2``, ``sluicegate-batch-x2`` (only when
  named in ``--sides``): the side without ``-x2`` (same function) with two readers: the
  coordinator gets ``--max-parallelism 2`` and ``sluicegate reader --subtask 0`` and
  ``--subtask 1`` start at once, each with its own log; the kafka connector's sticky
  assigner gives each half of the P partitions (Flink's rule: consecutive partitions to
  consecutive subtasks; each reader's "N splits finished" line shows what it got). The run
  ends once both exited (a reader that exits non-zero gets the other SIGTERMed: the run
  fails). They answer "do two reader processes on two cores copy >= 1.6x one?": run them
  with their one-process sides, e.g. ``--sides sluicegate-batch,sluicegate-batch-x2``.

Sides run one at a time, never two at once, in turn (round-robin, the first side moving one
place each repetition), ``--repetitions`` times.

Measures. OUT is created with ``message.timestamp.type=LogAppendTime``, so each output
record carries the broker's clock when its batch was appended. The rate is the records
appended after the first millisecond that had any, over the time from that millisecond to
the last append: the steady state, free of process start, imports, group joins and
registration, and of the final commit (the same cut for every side). "wall s" is the
processing process's life, start to exit (the coordinator is already serving), and "N/wall
s" the input's records over it: startup and the final commit included. CPU: every 0.1 s
(psutil) the user + system CPU of the processing process (with its children), of the
coordinator and of the broker; the table gives each one's CPU seconds over the steady
window per million records (interpolated between samples), and "own" = processing process +
coordinator (Quix and Faust have no coordinator: Kafka's group coordinator runs in the
broker); "whole" is the processing process's CPU from start to exit (getrusage, imports and
startup included) per million records. "x quix" is each side's median rate over Quix's,
"CPU x quix" Quix's own CPU per million over the side's (both > 1 when the side is better).
For an ``-x2`` side "processing process" is both readers: the rate is the same OUT-wide
measure, "wall s" runs from their start to the last exit, "process" and "whole" CPU are the
two readers' sums, and "x2 / x1" is its median rate over its one-process side's (when that
side ran too; also in the results' summary as ``rate_over_one_process``).

Check. After each run OUT is read to its end ``read_committed``: exactly N records, N
distinct keys, each key one of the input's (a key names its input partition and offset,
``i % P`` and ``i // P``), and each value the input's value plus the side's change
(``b"!"``; unchanged for ``sluicegate-identity``). Exit code 1 if a run fails this.

Results go to ``--results`` (default ``benchmarks/results/stream-processor-<config>-<UTC
time>.json``), rewritten after every run. Without ``--bootstrap-servers`` /
``KAFKA_BOOTSTRAP_SERVERS`` it runs the kept local broker of ``<cache root>/bench-broker``
(as kafka_clients.py does). OUT topics and the sources' control topics are deleted after
each run's check (``--keep-topics`` keeps them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Only the standard library at the top: the Quix side runs this file in another interpreter
# (a venv with quixstreams and nothing of this project).

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
SLUICEGATE_SIDES = ("sluicegate-identity", "sluicegate-record", "sluicegate-stateful", "sluicegate-batch")
X2 = "-x2"
"""The suffix of a side run by two reader processes (``--max-parallelism 2``)."""
SLUICEGATE_X2_SIDES = tuple(f"{side}{X2}" for side in SLUICEGATE_SIDES)
QUIX = "quix"
FAUST = "faust"
DEFAULT_SIDES = (*SLUICEGATE_SIDES, QUIX)
ALL_SIDES = (*DEFAULT_SIDES, *SLUICEGATE_X2_SIDES, FAUST)
SUFFIX = b"!"
CPU_PARTS = ("process", "coordinator", "broker")
SAMPLE_INTERVAL_S = 0.1
QUIX_VERSION = "3.28.*"
QUIX_VENV_NAME = "quix-venv"
#: Quix's settings (see the module docstring).
QUIX_SETTINGS: dict[str, Any] = {
    "commit_interval": 5.0,
    "producer_extra_config": {
        "linger.ms": 20,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "compression.type": "none",
    },
    "consumer_extra_config": {
        "fetch.max.bytes": 104_857_600,
        "max.partition.fetch.bytes": 16_777_216,
        "queued.max.messages.kbytes": 262_144,
        "queued.min.messages": 200_000,
    },
}
FAUST_COMMIT_INTERVAL_S = 2.0
FAUST_DONE = "stream-processor-benchmark: all records sent"

FUNCTIONS = textwrap.dedent(
    '''
    """The functions of the sluicegate-record, -stateful and -batch sides."""

    import pyarrow as pa
    import pyarrow.compute as pc

    import sluicegate

    SUFFIX = pa.scalar(b"!", pa.binary())
    NOTHING = pa.scalar(b"", pa.binary())


    def add_field(record: sluicegate.Message) -> sluicegate.Message:
        return record.replace(value=record.value + b"!")


    def add_field_counted(record: sluicegate.Message, state: dict) -> sluicegate.Message:
        state["records"] = state.get("records", 0) + 1
        return record.replace(value=record.value + b"!")


    def add_field_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.schema.get_field_index("value")
        return batch.set_column(i, "value", pc.binary_join_element_wise(batch.column(i), SUFFIX, NOTHING))
    '''
)
PROCESS_FUNCTIONS = {
    "sluicegate-record": "benchfns:add_field",
    "sluicegate-stateful": "benchfns:add_field_counted",
    "sluicegate-batch": "benchfns:add_field_batch",
}


def one_process_side(side: str) -> str:
    """The side run by one process: ``sluicegate-batch`` for ``sluicegate-batch-x2``."""
    return side.removesuffix(X2)


def reader_count(side: str) -> int:
    return 2 if side in SLUICEGATE_X2_SIDES else 1


# --- the peers' processes (children of this script) ----------------------------------------------


def quix_child(spec: dict[str, Any]) -> int:
    """Copy ``spec["input"]`` to ``spec["output"]`` with Quix Streams, exactly once, N records."""
    from quixstreams import Application  # type: ignore[import-not-found, unused-ignore]  # only in the quix venv

    settings = spec["settings"]
    app = Application(
        broker_address=spec["bootstrap"],
        consumer_group=spec["group"],
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=settings["commit_interval"],
        consumer_extra_config=settings["consumer_extra_config"],
        producer_extra_config=settings["producer_extra_config"],
        auto_create_topics=False,
        use_changelog_topics=False,
        loglevel="INFO",
    )
    source = app.topic(spec["input"], key_deserializer="bytes", value_deserializer="bytes")
    out = app.topic(spec["output"], key_serializer="bytes", value_serializer="bytes")
    sdf = app.dataframe(source)
    sdf = sdf.apply(lambda value: value + b"!")
    sdf.to_topic(out)
    app.run(count=spec["records"], timeout=spec["idle_timeout_s"], collect=False)
    return 0


def faust_child(spec: dict[str, Any]) -> int:
    """Copy with Faust, exactly once; says ``FAUST_DONE`` once N records were sent (the parent then stops it)."""
    import faust

    app = faust.App(
        spec["group"],
        broker=f"kafka://{spec['bootstrap']}",
        processing_guarantee="exactly_once",
        value_serializer="raw",
        key_serializer="raw",
        topic_partitions=spec["partitions"],
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=FAUST_COMMIT_INTERVAL_S,
        datadir=spec["datadir"],
        web_enabled=False,
    )
    source = app.topic(spec["input"], value_type=bytes, key_type=bytes)
    out = app.topic(spec["output"], value_type=bytes, key_type=bytes)
    seen = [0]

    @app.agent(source)
    async def copy(stream: Any) -> None:
        async for event in stream.events():
            await out.send(key=event.key, value=event.value + b"!")
            seen[0] += 1
            if seen[0] == spec["records"]:
                print(FAUST_DONE, flush=True)

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()
    return 0


# --- CPU ------------------------------------------------------------------------------------------


@dataclass
class CpuTrace:
    """CPU seconds used so far by each part (``CPU_PARTS``), sampled with the wall clock."""

    times: list[float] = field(default_factory=list)
    totals: list[dict[str, float]] = field(default_factory=list)
    _last: dict[int, tuple[str, float]] = field(default_factory=dict)
    """pid -> (part, its CPU seconds at its last sample): a process that ended keeps its last."""

    def sample(self, roots: Mapping[str, Sequence[int]]) -> None:
        import psutil

        for part, pids in roots.items():
            for pid in pids:
                try:
                    root = psutil.Process(pid)
                    procs = [root, *root.children(recursive=True)]
                except psutil.Error:
                    continue
                for proc in procs:
                    with contextlib.suppress(psutil.Error):
                        cpu = proc.cpu_times()
                        self._last[proc.pid] = (part, cpu.user + cpu.system)
        totals = dict.fromkeys(CPU_PARTS, 0.0)
        for part, seconds in self._last.values():
            totals[part] += seconds
        self.times.append(time.time())
        self.totals.append(totals)

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds of each part from ``start`` to ``end`` (epoch seconds, interpolated)."""
        if len(self.times) < 2:
            return {}
        return {part: self._at(end, part) - self._at(start, part) for part in CPU_PARTS}

    def _at(self, when: float, part: str) -> float:
        import bisect

        i = max(1, min(len(self.times) - 1, bisect.bisect_left(self.times, when)))
        t0, t1 = self.times[i - 1], self.times[i]
        v0, v1 = self.totals[i - 1][part], self.totals[i][part]
        share = 0.0 if t1 <= t0 else min(1.0, max(0.0, (when - t0) / (t1 - t0)))
        return v0 + (v1 - v0) * share


@dataclass
class Ran:
    """The processing processes, each run to its end."""

    codes: list[int]
    wall_s: float
    """From their start to the last one's exit."""
    cpu_s: float
    """User + system CPU of the processes and the children they waited for (getrusage), start to exit."""
    trace: CpuTrace


def run_processes(
    cmds: Sequence[list[str]],
    env: Mapping[str, str],
    logs: Sequence[Path],
    timeout_s: float,
    others: Mapping[str, Sequence[int]],
    cwd: Path,
    stop_when: Callable[[str], bool] | None = None,
) -> Ran:
    """Start every ``cmds[i]`` at once (output to ``logs[i]``) and run them all to their end, sampling
    CPU (part "process": all of them). ``stop_when(a process's output)`` SIGTERMs that process;
    once one exits non-zero the others are SIGTERMed."""
    trace = CpuTrace()
    procs: list[subprocess.Popen[bytes]] = []
    stopping: set[int] = set()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(log.open("wb")) for log in logs]
        started = time.monotonic()
        deadline = started + timeout_s
        try:
            for cmd, handle in zip(cmds, handles, strict=True):
                procs.append(subprocess.Popen(cmd, env=dict(env), stdout=handle, stderr=subprocess.STDOUT, cwd=cwd))
            while any(proc.poll() is None for proc in procs):
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(cmds[0], timeout_s)
                trace.sample({"process": [proc.pid for proc in procs if proc.returncode is None], **others})
                failed = any(proc.returncode not in (None, 0) for proc in procs)
                for i, (proc, log) in enumerate(zip(procs, logs, strict=True)):
                    if proc.returncode is not None or i in stopping:
                        continue
                    if failed or (stop_when is not None and stop_when(log.read_text(errors="replace"))):
                        stopping.add(i)
                        proc.send_signal(signal.SIGTERM)
                time.sleep(SAMPLE_INTERVAL_S)
            wall = time.monotonic() - started
            trace.sample(others)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    kill_tree(proc.pid)
                    proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Ran([proc.returncode for proc in procs], wall, cpu, trace)


def kill_tree(pid: int) -> None:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- topics -------------------------------------------------------------------------------------


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def create_output_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    config = {"message.timestamp.type": "LogAppendTime", "retention.ms": "-1", "retention.bytes": "-1"}
    client = admin(bootstrap)  # kept: a client collected before its future resolves destroys it
    client.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result()


def delete_topics(bootstrap: str, topics: Sequence[str]) -> None:
    if not topics:
        return
    client = admin(bootstrap)
    existing = set(client.list_topics(timeout=10).topics)
    doomed = [t for t in topics if t in existing]
    if doomed:
        for future in client.delete_topics(doomed).values():
            with contextlib.suppress(Exception):
                future.result()


@dataclass
class Check:
    """What OUT holds, read read_committed to its end."""

    records: int = 0
    distinct_keys: int = 0
    foreign_keys: int = 0
    wrong_values: int = 0
    first_append_ms: int = 0
    last_append_ms: int = 0
    after_first_ms: int = 0
    """Records appended after the first millisecond that had any."""

    def ok(self, expected: int) -> bool:
        return (
            self.records == expected
            and self.distinct_keys == expected
            and self.foreign_keys == 0
            and self.wrong_values == 0
        )

    def text(self, expected: int) -> str:
        verdict = "OK" if self.ok(expected) else "WRONG"
        return (
            f"{self.records:,} records of {expected:,}, {self.distinct_keys:,} distinct keys, "
            f"{self.foreign_keys} not from the input, {self.wrong_values} wrong values -> {verdict}"
        )


def check_output(bootstrap: str, topic: str, records: int, tail: bytes) -> Check:
    """Read OUT read_committed; each record's key must be one input key, once, with the value key + ``tail``."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "log_level": 3,
            "group.id": "sluicegate-bench-check",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = bytearray(records)
    check = Check()
    stamps: list[int] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 300
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} did not reach its end within 300 s")
            for message in consumer.consume(10_000, timeout=1.0):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {error}")
                    at_end.add(message.partition())
                    continue
                check.records += 1
                kind, stamp = message.timestamp()
                if kind == TIMESTAMP_LOG_APPEND_TIME:
                    stamps.append(stamp)
                key = message.key()
                try:
                    i = int(key)
                except (TypeError, ValueError):
                    i = -1
                if not 0 <= i < records or len(key) != 10:
                    check.foreign_keys += 1
                    continue
                if not seen[i]:
                    seen[i] = 1
                    check.distinct_keys += 1
                if message.value() != key + tail:
                    check.wrong_values += 1
    finally:
        consumer.close()
    if stamps:
        check.first_append_ms, check.last_append_ms = min(stamps), max(stamps)
        check.after_first_ms = sum(1 for s in stamps if s > check.first_append_ms)
    return check


# --- one run ------------------------------------------------------------------------------------


@dataclass
class Result:
    side: str
    repetition: int
    records: int
    wall_s: float = 0.0
    steady_records: int = 0
    steady_s: float = 0.0
    cpu_s_per_m: dict[str, float] = field(default_factory=dict)
    """CPU seconds per million records over the steady window, per ``CPU_PARTS``."""
    process_cpu_s_per_m_whole: float = float("nan")
    """The processing process's CPU start to exit (imports, startup, final commit) per million records
    (an ``-x2`` side: both readers')."""
    check: Check = field(default_factory=Check)
    ok: bool = False
    error: str = ""
    summary_line: str = ""
    """The readers' last lines ("... records written to ..."), one a line."""
    processes: int = 1

    @property
    def rate(self) -> float:
        return self.steady_records / self.steady_s if self.steady_s > 0 else float("nan")

    @property
    def own_cpu(self) -> float:
        if not self.cpu_s_per_m:
            return float("nan")
        return self.cpu_s_per_m["process"] + self.cpu_s_per_m["coordinator"]


def start_coordinator(
    source: str, parallelism: int, options: Sequence[str], bootstrap: str, log: Path, cwd: Path
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "sluicegate", "coordinator", "--source", source, "--connector", "kafka"]
    cmd += ["--max-parallelism", str(parallelism), *options]
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
    with log.open("ab") as handle:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "is serving" in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    stop_process(proc)
    raise RuntimeError(f"the coordinator did not start:\n{log.read_text(errors='replace')[-3000:]}")


def run_one(side: str, repetition: int, args: argparse.Namespace, bootstrap: str, workdir: Path) -> Result:
    faust = side == FAUST
    records = args.faust_records if faust else args.records
    topic = args.faust_topic if faust else args.topic
    run = f"{side}-{repetition}-{uuid.uuid4().hex[:8]}"
    out = f"spbench-out-{run}"
    base = one_process_side(side)
    res = Result(side, repetition, records, processes=reader_count(side))
    coordinator = None
    source = ""
    broker = [pid for pid in [args.broker_pid] if pid is not None]
    log = workdir / f"{run}.log"
    try:
        create_output_topic(bootstrap, out, args.partitions)
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, PYTHONUNBUFFERED="1")
        others: dict[str, list[int]] = {"broker": broker}
        stop_when = None
        if base in SLUICEGATE_SIDES:
            source = f"spbench-{uuid.uuid4().hex[:10]}"
            options = [f"topics={topic}", f"bootstrap_servers={bootstrap}"]
            options += ["starting_offsets=earliest", "stopping_offsets=latest"]
            option_args = [a for o in options for a in ("--option", o)]
            coordinator_log = workdir / f"{run}-coordinator.log"
            coordinator = start_coordinator(source, res.processes, option_args, bootstrap, coordinator_log, workdir)
            others["coordinator"] = [coordinator.pid]
            cmds = []
            for subtask in range(res.processes):
                cmd = [sys.executable, "-m", "sluicegate", "reader", "--source", source, "--subtask", str(subtask)]
                cmd += ["--connector", "kafka", *option_args, "--output", f"kafka:{out}"]
                cmd += ["--max-batch", str(args.max_batch)]
                cmd += ["--checkpoint-interval-ms", str(args.checkpoint_interval_ms)]
                if base in PROCESS_FUNCTIONS:
                    cmd += ["--process", PROCESS_FUNCTIONS[base]]
                cmds.append(cmd)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(workdir), os.environ.get("PYTHONPATH", "")) if p)
        else:
            spec: dict[str, Any] = {
                "bootstrap": bootstrap,
                "group": f"spbench-{run}",
                "input": topic,
                "output": out,
                "records": records,
                "partitions": args.partitions,
                "idle_timeout_s": 60.0,
                "settings": args.quix_settings,
                "datadir": str(workdir / f"{run}-faust"),
            }
            python = args.quix_python if side == QUIX else sys.executable
            cmds = [[python, __file__, f"--{side}-child", json.dumps(spec)]]
            if faust:
                stop_when = _said_done
        logs = [log] if len(cmds) == 1 else [workdir / f"{run}-subtask{i}.log" for i in range(len(cmds))]
        ran = run_processes(cmds, env, logs, args.timeout, others, workdir, stop_when)
        res.wall_s = ran.wall_s
        errors = []
        last_lines: list[str] = []
        for code, process_log in zip(ran.codes, logs, strict=True):
            output = process_log.read_text(errors="replace")
            last_lines += [line.strip() for line in output.splitlines() if " records written to " in line][:1]
            if code != 0 and not (faust and _said_done(output)):
                tail = "\n".join(output.splitlines()[-30:])
                errors.append(f"exit {code}, {process_log}:\n{tail}")
        res.summary_line = "\n".join(last_lines)
        res.error = "\n".join(errors)
        suffix = b"" if base == "sluicegate-identity" else SUFFIX
        res.check = check_output(bootstrap, out, records, args.value_tail + suffix)
        res.ok = not res.error and res.check.ok(records)
        c = res.check
        res.steady_records = c.after_first_ms
        res.steady_s = (c.last_append_ms - c.first_append_ms) / 1000
        if res.steady_records and res.steady_s > 0:
            used = ran.trace.between(c.first_append_ms / 1000, c.last_append_ms / 1000)
            res.cpu_s_per_m = {part: s * 1e6 / res.steady_records for part, s in used.items()}
        res.process_cpu_s_per_m_whole = ran.cpu_s * 1e6 / records
    except Exception as exc:
        res.error = res.error or f"{type(exc).__name__}: {exc}"
    finally:
        if coordinator is not None:
            stop_process(coordinator)
        if not args.keep_topics:
            with contextlib.suppress(Exception):
                doomed = [out]
                if source:
                    from sluicegate.protocol.topics import ControlTopics

                    doomed += ControlTopics.for_source(source).all()
                delete_topics(bootstrap, doomed)
    return res


def _said_done(output: str) -> bool:
    return FAUST_DONE in output


def run_line(r: Result) -> str:
    if r.error:
        return f"  -> {r.side}: FAILED: {r.error}\n     check: {r.check.text(r.records)}"
    cpu = ", ".join(f"{part} {r.cpu_s_per_m.get(part, float('nan')):.2f}" for part in CPU_PARTS)
    return (
        f"  -> {r.side}: {r.rate:,.0f} records/s steady ({r.steady_records:,} records in {r.steady_s:.2f} s), "
        f"wall {r.wall_s:.1f} s; CPU s per M records: {cpu}; whole process {r.process_cpu_s_per_m_whole:.2f}\n"
        f"     check: {r.check.text(r.records)}"
        + "".join(f"\n     reader: {line}" for line in r.summary_line.splitlines())
    )


# --- the report -----------------------------------------------------------------------------------


@dataclass
class Summary:
    side: str
    runs: int
    ok: bool
    records: int
    rate: float = float("nan")
    rate_min: float = float("nan")
    rate_max: float = float("nan")
    wall_s: float = float("nan")
    wall_rate: float = float("nan")
    """Records / wall seconds: start to exit, everything included."""
    cpu_s_per_m: dict[str, float] = field(default_factory=dict)
    own_cpu: float = float("nan")
    whole_process_cpu: float = float("nan")
    rate_over_one_process: float = float("nan")
    """An ``-x2`` side: its median rate over its one-process side's (when that one ran too)."""


def summaries(results: Sequence[Result], sides: Sequence[str]) -> list[Summary]:
    out = []
    for side in sides:
        runs = [r for r in results if r.side == side]
        good = [r for r in runs if r.ok and r.steady_s > 0]
        s = Summary(side, len(runs), bool(runs) and all(r.ok for r in runs), runs[0].records if runs else 0)
        if good:
            rates = [r.rate for r in good]
            s.rate, s.rate_min, s.rate_max = statistics.median(rates), min(rates), max(rates)
            s.wall_s = statistics.median(r.wall_s for r in good)
            s.wall_rate = statistics.median(r.records / r.wall_s for r in good)
            measured = [r for r in good if r.cpu_s_per_m]
            if measured:
                s.cpu_s_per_m = {p: statistics.median(r.cpu_s_per_m[p] for r in measured) for p in CPU_PARTS}
                s.own_cpu = statistics.median(r.own_cpu for r in measured)
            s.whole_process_cpu = statistics.median(r.process_cpu_s_per_m_whole for r in good)
        out.append(s)
    rate_of = {s.side: s.rate for s in out}
    for s in out:
        one = rate_of.get(one_process_side(s.side), float("nan"))
        if s.side in SLUICEGATE_X2_SIDES and one > 0:
            s.rate_over_one_process = s.rate / one
    return out


def report(results: Sequence[Result], summary: Sequence[Summary], args: argparse.Namespace) -> int:
    print(
        f"\n{args.records:,} records of {10 + args.value_bytes} B (key + value) over {args.partitions} partitions, "
        f"Kafka -> Kafka exactly once, one process a side (-x2: two readers); "
        f"{args.repetitions} repetition(s), median (min - max)"
        + (f"; faust on {args.faust_records:,} records" if FAUST in args.sides else "")
    )
    print(
        "records/s: appended to OUT after its first millisecond / first to last append time; "
        "CPU: seconds per million records over that window (own = process + coordinator)\n"
    )
    w = max([20, *(len(s.side) for s in summary)])
    header = (
        f"{'side':<{w}} {'records/s':>10} {'(min - max)':>21} {'wall s':>7} {'N/wall s':>9} "
        f"{'own CPU':>8} {'process':>8} "
        f"{'coord':>6} {'broker':>7} {'whole':>6} {'x quix':>7} {'CPU x quix':>10} {'x2 / x1':>8}"
    )
    print(header)
    print("-" * len(header))
    peer = next((s for s in summary if s.side == QUIX and s.rate == s.rate), None)
    for s in summary:
        if s.rate != s.rate:
            print(f"{s.side:<{w}} {'FAILED' if not s.ok else 'no steady state':>10}")
            continue
        spread = f"({s.rate_min:,.0f} - {s.rate_max:,.0f})"
        cpu = s.cpu_s_per_m or dict.fromkeys(CPU_PARTS, float("nan"))
        ratio = f"{s.rate / peer.rate:.2f}x" if peer else "-"
        cpu_ratio = f"{peer.own_cpu / s.own_cpu:.2f}x" if peer and s.own_cpu > 0 else "-"
        x2 = f"{s.rate_over_one_process:.2f}x" if s.rate_over_one_process == s.rate_over_one_process else "-"
        print(
            f"{s.side:<{w}} {s.rate:>10,.0f} {spread:>21} {s.wall_s:>7.1f} {s.wall_rate:>9,.0f} "
            f"{s.own_cpu:>8.2f} {cpu['process']:>8.2f} "
            f"{cpu['coordinator']:>6.2f} {cpu['broker']:>7.2f} {s.whole_process_cpu:>6.2f} "
            f"{ratio:>7} {cpu_ratio:>10} {x2:>8}"
        )
    print(
        "\nwall s: the processing process, start to exit (N/wall s: the input over it, startup and final commit "
        "included); whole: its CPU start to exit per million records; "
        "x quix: rate / Quix's rate; CPU x quix: Quix's own CPU / the side's (> 1: the side is better); "
        "x2 / x1: an -x2 side's rate (two readers: process and whole are their sums) / its one-process side's\n"
    )
    ok = True
    for r in results:
        ok = ok and r.ok
        print(f"{r.side} #{r.repetition + 1}: {r.check.text(r.records)}" + ("" if not r.error else " (run FAILED)"))
    return 0 if ok else 1


def results_data(
    args: argparse.Namespace, machine: dict[str, Any], results: Sequence[Result], code: int | None
) -> dict[str, Any]:
    def safe(row: dict[str, Any]) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}

    return {
        "kind": "stream-processor",
        "config": {
            "records": args.records,
            "record_bytes": 10 + args.value_bytes,
            "partitions": args.partitions,
            "topic": args.topic,
            "repetitions": args.repetitions,
            "sides": args.sides,
            "max_batch": args.max_batch,
            "checkpoint_interval_ms": args.checkpoint_interval_ms,
            "read_path": args.read_path,
            "quix": {"version": args.quix_version, "python": args.quix_python, **args.quix_settings},
            "faust_records": args.faust_records if FAUST in args.sides else None,
        },
        "machine": machine,
        "summary": [safe(asdict(s)) for s in summaries(results, args.sides)],
        "runs": [safe({**asdict(r), "rate": r.rate}) for r in results],
        "complete": code is not None,
        "exit_code": code,
    }


# --- the command ----------------------------------------------------------------------------------


def default_quix_python() -> str:
    """This interpreter when quixstreams imports here, else ``<cache root>/quix-venv``'s."""
    if importlib.util.find_spec("quixstreams") is not None:
        return sys.executable
    from sluicegate.cache_dir import cache_root

    return str(cache_root() / QUIX_VENV_NAME / "bin" / "python")


def quix_version(python: str) -> str:
    probe = subprocess.run(
        [python, "-c", "import quixstreams; print(quixstreams.__version__)"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise SystemExit(
            f"quixstreams does not import with {python}. Make its venv once:\n"
            f"  python3.11 -m venv {Path(python).parent.parent}\n"
            f'  {Path(python).parent}/python -m pip install "quixstreams=={QUIX_VERSION}"\n'
            f"or pass --quix-python, or --sides without quix"
        )
    return probe.stdout.strip()


def read_path() -> str:
    forced = os.environ.get("SLUICEGATE_KAFKA_READ_PATH")
    if forced:
        return forced
    return "native" if importlib.util.find_spec("sluicegate._native") is not None else "python"


def quix_settings(defaults: bool, overrides: Sequence[str]) -> dict[str, Any]:
    """``QUIX_SETTINGS`` (or Quix's defaults) with ``--quix-setting`` overrides applied."""
    settings: dict[str, Any] = {
        "commit_interval": 5.0 if defaults else QUIX_SETTINGS["commit_interval"],
        "producer_extra_config": {} if defaults else dict(QUIX_SETTINGS["producer_extra_config"]),
        "consumer_extra_config": {} if defaults else dict(QUIX_SETTINGS["consumer_extra_config"]),
    }
    for text in overrides:
        key, sep, value = text.partition("=")
        if not sep:
            raise ValueError(f"--quix-setting takes KEY=VALUE, not {text!r}")
        if key == "commit_interval":
            settings["commit_interval"] = float(value)
        elif key.startswith(("producer.", "consumer.")):
            client, _, name = key.partition(".")
            settings[f"{client}_extra_config"][name] = value
        else:
            raise ValueError(f"--quix-setting {key}: expected commit_interval, producer.KEY or consumer.KEY")
    return settings


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the input topic")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the input and output topics")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes of each value (keys are 10 bytes)")
    parser.add_argument("--repetitions", type=int, default=3, help="runs of every side; the sides alternate")
    parser.add_argument(
        "--sides",
        default=",".join(DEFAULT_SIDES),
        help=f"comma-separated subset of {', '.join(ALL_SIDES)} (faust and the -x2 sides only when named)",
    )
    parser.add_argument("--faust-records", type=int, default=20_000, help="the faust side's input (its own topic)")
    parser.add_argument("--max-batch", type=int, default=10_000, help="the sluicegate readers' --max-batch")
    parser.add_argument(
        "--checkpoint-interval-ms", type=int, default=2000, help="the sluicegate readers' --checkpoint-interval-ms"
    )
    parser.add_argument(
        "--quix-python", default="", help="the interpreter of the quix side (default: see the module docstring)"
    )
    parser.add_argument(
        "--quix-defaults",
        action="store_true",
        help="run Quix with its own defaults (commit_interval 5 s, no extra client settings) instead of QUIX_SETTINGS",
    )
    parser.add_argument(
        "--quix-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one Quix setting: commit_interval=S, producer.<librdkafka key>=V or consumer.<key>=V "
        "(repeatable)",
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""),
        help="an existing broker (default: $KAFKA_BOOTSTRAP_SERVERS, else the kept local bench broker)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take")
    parser.add_argument("--results", default="", help="the results JSON (default: benchmarks/results/...)")
    parser.add_argument("--keep-topics", action="store_true", help="keep each run's OUT and control topics")
    parser.add_argument("--keep-logs", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    try:
        args.quix_settings = quix_settings(args.quix_defaults, args.quix_setting)
    except ValueError as exc:
        parser.error(str(exc))
    if bad := [s for s in args.sides if s not in ALL_SIDES]:
        parser.error(f"unknown side {bad[0]!r}: --sides is a subset of {', '.join(ALL_SIDES)}")
    if args.repetitions < 1 or args.records < 1 or args.faust_records < 1:
        parser.error("--repetitions, --records and --faust-records are at least 1")
    if args.value_bytes < 10:
        parser.error("--value-bytes is at least 10 (a value starts with its key's digits)")
    return args


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] in ("--quix-child", "--faust-child"):
        spec = json.loads(sys.argv[2])
        return quix_child(spec) if sys.argv[1] == "--quix-child" else faust_child(spec)
    args = parse_args()
    sys.path.insert(0, str(BENCH_DIR))
    from kafka_clients import bench_broker, default_topic, fill_topic, filler  # type: ignore[import-not-found, unused-ignore]
    from kafka_source import listening_pid  # type: ignore[import-not-found, unused-ignore]

    args.topic = default_topic(args.records, args.partitions, args.value_bytes)
    args.faust_topic = default_topic(args.faust_records, args.partitions, args.value_bytes)
    args.read_path = read_path()
    args.value_tail = filler(args.value_bytes)
    args.quix_version = ""
    if QUIX in args.sides:
        args.quix_python = args.quix_python or default_quix_python()
        args.quix_version = quix_version(args.quix_python)
    workdir = Path(tempfile.mkdtemp(prefix="sluicegate-stream-bench-"))
    (workdir / "benchfns.py").write_text(FUNCTIONS, encoding="utf-8")
    machine: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "when": _now().isoformat(),
    }
    stamp = _now().strftime("%Y%m%dT%H%M%SZ")
    name = f"stream-processor-{args.records}r-{10 + args.value_bytes}b-{args.partitions}p-{stamp}.json"
    results_path = Path(args.results) if args.results else RESULTS_DIR / name
    results: list[Result] = []
    print(f"results go to {results_path} (rewritten after every run)", flush=True)
    with bench_broker(args.bootstrap_servers) as bootstrap:
        args.broker_pid = listening_pid(bootstrap)
        print(
            f"Kafka {bootstrap} (broker pid {args.broker_pid or 'not on this machine'}); work directory {workdir}; "
            f"load average {machine['load_average'][0]:.1f}",
            flush=True,
        )
        print(f"sluicegate kafka read path: {args.read_path}", flush=True)
        if QUIX in args.sides:
            print(f"quix: quixstreams {args.quix_version} with {args.quix_python}", flush=True)
        fill_topic(bootstrap, args.topic, args.records, args.partitions, args.value_bytes)
        if FAUST in args.sides:
            fill_topic(bootstrap, args.faust_topic, args.faust_records, args.partitions, args.value_bytes)
        total = args.repetitions * len(args.sides)
        n = 0
        for repetition in range(args.repetitions):
            turn = repetition % len(args.sides)
            for side in args.sides[turn:] + args.sides[:turn]:
                n += 1
                print(f"\n[{n}/{total}] repetition {repetition + 1}: {side}", flush=True)
                result = run_one(side, repetition, args, bootstrap, workdir)
                print(run_line(result), flush=True)
                results.append(result)
                _save(results_data(args, machine, results, None), results_path)
    machine["load_average_end"] = list(os.getloadavg())
    code = report(results, summaries(results, args.sides), args)
    _save(results_data(args, machine, results, code), results_path)
    print(f"results saved to {results_path}")
    if args.keep_logs or code != 0:
        print(f"logs kept in {workdir}")
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return code


def _now() -> datetime:
    return datetime.now(UTC)


def _save(data: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
