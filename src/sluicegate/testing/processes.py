"""Real processes for integration tests: the coordinator and reader hosts run as
`python -m sluicegate ...` subprocesses, so failure tests can SIGKILL them.

Also the few read-only helpers those tests share: the JSON lines a reader wrote
(``output_records``, ``value_counts``), committed records of a topic
(``read_topic``, ``readers_messages``) and polling on a condition instead of
sleeping (``poll_until``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

# -- processes ----------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    args: list[str] = field(default_factory=list)

    def kill_group(self, wait_s: float = 10.0) -> None:
        """SIGKILL the process and everything it started (its session: a Spark job's JVM
        and Python workers), and wait for it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(wait_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def lines_with(self, text: str) -> list[str]:
        return [line for line in self.log().splitlines() if text in line]

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def _check_log(self, text: str) -> bool:
        if text in self.log():
            return True
        if self.popen.poll() is not None and text not in self.log():
            raise AssertionError(
                f"{self.name} exited with {self.popen.returncode} before logging {text!r}:\n{self.tail()}"
            )
        return False

    def wait_for_log(self, text: str, timeout_s: float = 60.0, poll_s: float = 0.1) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._check_log(text):
                return
            time.sleep(poll_s)
        raise AssertionError(f"{self.name} did not log {text!r} within {timeout_s} s:\n{self.tail()}")

    async def wait_for_log_async(self, text: str, timeout_s: float = 60.0, poll_s: float = 0.1) -> None:
        """As wait_for_log, without blocking the event loop (for tests that run Kafka clients)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._check_log(text):
                return
            await asyncio.sleep(poll_s)
        raise AssertionError(f"{self.name} did not log {text!r} within {timeout_s} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def pause(self, group: bool = False) -> None:
        """SIGSTOP: the process keeps its connections and state and gets no CPU, as one
        starved or frozen (a VM paused, a long GC) would. ``group``: everything it started
        too (its session: a Spark job's JVM and Python workers)."""
        self._signal(signal.SIGSTOP, group)

    def resume(self, group: bool = False) -> None:
        """SIGCONT after ``pause`` (with the same ``group``): it goes on where it stood."""
        self._signal(signal.SIGCONT, group)

    def _signal(self, signum: signal.Signals, group: bool) -> None:
        if self.popen.poll() is not None:
            return
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signum)
        else:
            self.popen.send_signal(signum)

    def request_stop(self) -> None:
        """SIGTERM without waiting: a reader host stops gracefully (final checkpoint, ReaderLeaving)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def terminate(self, timeout_s: float = 20.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        return self.popen.returncode

    def wait(self, timeout_s: float) -> int:
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout_s} s:\n{self.tail()}") from None

    async def wait_async(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while self.popen.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} still running after {timeout_s} s:\n{self.tail()}")
            await asyncio.sleep(0.1)
        return self.popen.returncode


def wait_all(procs: Iterable[Proc], timeout_s: float) -> list[int]:
    """Exit codes of ``procs``, all within one shared deadline."""
    deadline = time.monotonic() + timeout_s
    return [proc.wait(max(0.1, deadline - time.monotonic())) for proc in procs]


class ProcessGroup:
    """Starts sluicegate sub-commands with logs in a directory; stops them all at the end."""

    def __init__(self, log_dir: Path, bootstrap: str) -> None:
        self.log_dir = log_dir
        self.bootstrap = bootstrap
        self.procs: list[Proc] = []

    def _env(self, without: Sequence[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=self.bootstrap, PYTHONUNBUFFERED="1", COLUMNS="200")
        # Readers started here rely on the coordinators their test deploys, so that a test of
        # a takeover sees the worker it expects take over; a test of a reader that coordinates
        # its source itself passes --coordinator auto (or embedded), which wins.
        env.setdefault("SLUICEGATE_READER_COORDINATOR", "external")
        env.update(extra or {})
        for name in without:
            env.pop(name, None)
        return env

    def start(
        self,
        name: str,
        args: Sequence[str],
        without_env: Sequence[str] = (),
        *,
        module: str = "sluicegate",
        env: Mapping[str, str] | None = None,
    ) -> Proc:
        """Start ``python -m MODULE ARGS`` (``sluicegate`` by default) with ``env`` added to
        the environment; ``without_env`` names variables it must not inherit."""
        log_path = self.log_dir / f"{name}.log"
        handle = log_path.open("ab")
        popen = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=self._env(without_env, env),
            start_new_session=True,
        )
        handle.close()
        proc = Proc(name, popen, log_path, list(args))
        self.procs.append(proc)
        return proc

    def run(self, name: str, args: Sequence[str], timeout_s: float = 60.0, without_env: Sequence[str] = ()) -> Proc:
        """Start a command and wait for it to exit (for commands expected to fail fast)."""
        proc = self.start(name, args, without_env)
        proc.wait(timeout_s)
        return proc

    @staticmethod
    def coordinator_args(source: str, max_parallelism: int, options: dict[str, str], *extra: str) -> list[str]:
        args = ["coordinator", "--source", source, "--connector", "sequence", "--max-parallelism", str(max_parallelism)]
        for key, value in options.items():
            args += ["--option", f"{key}={value}"]
        return [*args, *extra]

    def coordinator(
        self, source: str, max_parallelism: int, options: dict[str, str], *extra: str, wait_serving: bool = True
    ) -> Proc:
        args = self.coordinator_args(source, max_parallelism, options, *extra)
        proc = self.start(f"coordinator-{source}-{len(self.procs)}", args)
        if wait_serving:
            proc.wait_for_log("is serving", timeout_s=90)
        return proc

    @staticmethod
    def reader_args(source: str, subtask: int, options: dict[str, str], output: Path | str, *extra: str) -> list[str]:
        """``output``: a Path is written as jsonl:PATH, a string is passed to --output as is."""
        target = f"jsonl:{output}" if isinstance(output, Path) else output
        args = ["reader", "--source", source, "--subtask", str(subtask), "--connector", "sequence", "--output", target]
        args += ["--output-format", "envelope"]  # the checks read the split id of each record
        for key, value in options.items():
            args += ["--option", f"{key}={value}"]
        return [*args, *extra]

    def reader(self, source: str, subtask: int, options: dict[str, str], output: Path | str, *extra: str) -> Proc:
        args = self.reader_args(source, subtask, options, output, *extra)
        return self.start(f"reader-{source}-{subtask}-{len(self.procs)}", args)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate(timeout_s=15)

    def describe(self, lines: int = 15) -> str:
        """The last log lines of every process, for a failure message."""
        return "\n".join(f"--- {p.name} (exit {p.returncode}) ---\n{p.tail(lines)}" for p in self.procs)


# -- reader outputs -------------------------------------------------------------


def output_records(*paths: Path) -> list[dict[str, Any]]:
    """The JSON objects ({"subtask", "split_id", "value", "event_time_ms"}) of jsonl outputs:
    their complete lines. A reader may be writing while a test looks, and the line it is
    writing is not a record yet (a test read one half-written line as corrupt JSON)."""
    records: list[dict[str, Any]] = []
    for path in paths:
        if path.exists():
            data = path.read_bytes()
            complete = data[: data.rfind(b"\n") + 1]
            records += [orjson.loads(line) for line in complete.splitlines() if line.strip()]
    return records


def value_counts(*paths: Path) -> Counter[int]:
    return Counter(record["value"] for record in output_records(*paths))


# -- Kafka ----------------------------------------------------------------------


@dataclass(frozen=True)
class TopicRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]

    def json(self) -> Any:
        assert self.value is not None
        return orjson.loads(self.value)


async def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[TopicRecord]:
    """Every committed record of ``topic`` (all partitions) up to its end offsets now."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic)
        assert partitions, f"topic {topic} does not exist"
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[TopicRecord] = []
        deadline = time.monotonic() + timeout_s
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, f"could not read {topic} to its end within {timeout_s} s"
            batches = await consumer.getmany(timeout_ms=200)
            for tp, messages in batches.items():
                out += [
                    TopicRecord(tp.partition, m.offset, m.key, m.value, dict(m.headers or ()))
                    for m in messages
                    if m.offset < ends[tp]
                ]
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


async def readers_messages(bootstrap: str, source: str, ns: str = "sluicegate") -> list[dict[str, Any]]:
    """The coordinator's messages on NS.S.readers as JSON envelopes, in cseq order
    (the coordinator's own order across partitions)."""
    records = await read_topic(bootstrap, f"{ns}.{source}.readers")
    messages = [record.json() for record in records]
    return sorted(messages, key=lambda m: m["cseq"])


async def poll_until(condition: Callable[[], Awaitable[Any]], timeout_s: float, what: str, poll_s: float = 0.2) -> Any:
    """Await ``condition()`` until it returns something truthy (returned); fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(poll_s)
