"""Data and process helpers for the ``kafka`` connector's tests over real Kafka
(test_kafka_readers.py, test_kafka_recovery.py): topics of known content, writers,
the OUT reader and the exactly-once check, coordinator and reader processes."""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from local_http import wait_until
from processes import Proc, ProcessGroup, support_pythonpath

from sluicegate.audit import AuditSummary
from sluicegate.audit.commands import run_audit
from sluicegate.audit.invariants import AuditResult
from sluicegate_connectors.kafka.split import partition_owner_key

COORDINATOR_TIMEOUTS = ("--session-timeout-ms", "3000", "--reader-departure-timeout-ms", "30000")
FAST_CHECKPOINTS = ("--checkpoint-interval-ms", "300", "--heartbeat-interval-ms", "300")
"""A reader that checkpoints and heartbeats every 300 ms: tests see progress at once."""
SHORT_SESSION = ("--session-timeout-ms", "3000")
"""A killed process is declared gone after 3 s instead of 10 s."""
READER_TIMING = (*FAST_CHECKPOINTS, *SHORT_SESSION)
KEEP_FOR_EVER = {"retention.ms": "-1", "retention.bytes": "-1"}
"""Retention would delete records with old CreateTime timestamps at once: keep everything."""
SEED_ENV = "SLUICEGATE_KAFKA_SEED"


# -- the data cluster ---------------------------------------------------------------------


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, **config: str) -> None:
    """Create ``name`` (auto-creation is off) and wait until its metadata shows every partition."""
    create_replicated_topic(bootstrap, name, partitions, 1, config)


def create_replicated_topic(
    bootstrap: str, name: str, partitions: int, replicas: int, config: Mapping[str, str]
) -> None:
    """``create_topic`` with ``replicas`` replicas of each partition (a cluster's topic)."""
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replicas, config={**KEEP_FOR_EVER, **config})]
    )
    for future in futures.values():
        future.result(30)
    deadline = time.monotonic() + 30
    while True:
        topic = client.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        assert time.monotonic() < deadline, f"topic {name} has no metadata 30 s after its creation"
        time.sleep(0.1)


def delete_topic(bootstrap: str, name: str) -> None:
    client = admin(bootstrap)
    for future in client.delete_topics([name], operation_timeout=30).values():
        future.result(30)


Expected = dict[tuple[str, int, int], tuple[str | None, str | None]]
"""(topic, partition, offset) -> (key, value) of every committed input record."""


class DataWriter:
    """Produces records of known content to a topic and remembers where each one landed
    (its delivery report), so that the expectation never assumes offsets."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, **config: Any) -> None:
        self.topic = topic
        self.partitions = partitions
        self.expected: Expected = {}
        self._next = [0] * partitions
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 20,
                "batch.num.messages": 10_000,
                "queue.buffering.max.messages": 1_000_000,
                **config,
            }
        )
        self._pending: list[tuple[str, int, int, str | None, str | None]] = []
        self._failed: list[str] = []

    def _report(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self._failed.append(str(error))
            return
        key, value = message.key(), message.value()
        self._pending.append(
            (
                message.topic(),
                message.partition(),
                message.offset(),
                None if key is None else key.decode(),
                None if value is None else value.decode(),
            )
        )

    def record(self, partition: int, n: int) -> tuple[str, str]:
        """The content of the n-th record written to ``partition``."""
        crc = zlib.crc32(f"{self.topic}/{partition}/{n}".encode())
        return f"k{partition}-{n}", f"v{partition}-{n}-{crc:08x}"

    def produce(self, per_partition: int, key: Callable[[int, int], str | None] | None = None) -> int:
        """``per_partition`` more records in each partition; returns how many were written."""
        for n in range(per_partition):
            for partition in range(self.partitions):
                i = self._next[partition] + n
                k, v = self.record(partition, i)
                if key is not None:
                    k = key(partition, i)  # type: ignore[assignment]
                self._send(partition, k, v)
        for partition in range(self.partitions):
            self._next[partition] += per_partition
        return per_partition * self.partitions

    def _send(self, partition: int, key: str | None, value: str | None) -> None:
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    key=None if key is None else key.encode(),
                    value=None if value is None else value.encode(),
                    partition=partition,
                    on_delivery=self._report,
                )
                return
            except BufferError:
                self._producer.poll(0.05)

    def flush(self, keep: bool = True) -> None:
        """Wait for every delivery; ``keep``: the records count as committed input."""
        assert self._producer.flush(60) == 0, "records still undelivered after 60 s"
        assert not self._failed, f"deliveries failed: {self._failed[:3]}"
        if keep:
            for topic, partition, offset, key, value in self._pending:
                self.expected[(topic, partition, offset)] = (key, value)
        self._pending.clear()


class TransactionalWriter(DataWriter):
    """A DataWriter whose batches are transactions; an aborted one is not expected."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(bootstrap, topic, partitions, **{"transactional.id": f"{topic}.writer"})
        self._producer.init_transactions(30)

    def transaction(self, per_partition: int, commit: bool) -> None:
        self._producer.begin_transaction()
        self.produce(per_partition)
        self._producer.flush(60)
        if commit:
            self._producer.commit_transaction(30)
        else:
            self._producer.abort_transaction(30)
        self.flush(keep=commit)


class BackgroundWriter:
    """Keeps producing to a DataWriter's topic from a thread (``per_tick`` records per
    partition every ``tick_s``) until ``stop``, which flushes: then ``writer.expected``
    holds everything written."""

    def __init__(self, writer: DataWriter, per_tick: int = 10, tick_s: float = 0.05) -> None:
        self.writer = writer
        self._per_tick = per_tick
        self._tick_s = tick_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="background-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.writer.produce(self._per_tick)
            self.writer._producer.poll(0)
            self._stop.wait(self._tick_s)

    def stop(self) -> Expected:
        self._stop.set()
        self._thread.join(10)
        self.writer.flush()
        return self.writer.expected


class OutputReader:
    """Reads OUT ``read_committed`` from the beginning. ``drain`` reads on incrementally
    (a partition is at its end when its last event was the end-of-partition one);
    ``read_all`` reads the whole topic again with a fresh consumer, for the final check."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.rows: list[dict[str, Any]] = []
        self._consumer, self._partitions = self._open()
        self._at_end: set[int] = set()

    def _open(self) -> tuple[Any, int]:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "sluicegate-test-unused",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
            }
        )
        partitions = len(consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions)
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(partitions)])
        return consumer, partitions

    def _read(self, consumer: Any, partitions: int, at_end: set[int], timeout_s: float) -> list[dict[str, Any]]:
        new: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        first = True
        while first or len(at_end) < partitions:
            first = False
            assert time.monotonic() < deadline, f"could not read {self.topic} to its end in {timeout_s} s"
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, f"reading {self.topic}: {error}"
                    at_end.add(message.partition())
                    continue
                at_end.discard(message.partition())
                new.append(orjson.loads(message.value()))
        return new

    def drain(self, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """The rows committed since the last drain (also appended to ``rows``)."""
        new = self._read(self._consumer, self._partitions, self._at_end, timeout_s)
        self.rows += new
        return new

    def read_all(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Every committed row of OUT now, read again from the beginning (also kept as ``rows``)."""
        consumer, partitions = self._open()
        try:
            self.rows = self._read(consumer, partitions, set(), timeout_s)
        finally:
            consumer.close()
        return self.rows

    def wait_for(
        self,
        count: int,
        timeout_s: float,
        procs: Sequence[Proc] = (),
        what: str = "",
        matching: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Drain until ``rows`` holds at least ``count`` rows (of those ``matching``, when
        given: a topic written all along must not stand in for one that lags); fail early
        if a process died."""
        deadline = time.monotonic() + timeout_s
        while (held := len(self.rows) if matching is None else sum(map(matching, self.rows))) < count:
            for proc in procs:
                code = proc.returncode
                assert code is None, f"{proc.name} exited with {code} while waiting:\n{proc.tail()}"
            assert time.monotonic() < deadline, (
                f"{self.topic} has {held} of {count} rows after {timeout_s} s {what}\n"
                + "\n".join(f"--- {p.name}\n{p.tail(8)}" for p in procs)
            )
            if not self.drain():
                time.sleep(0.2)

    def close(self) -> None:
        self._consumer.close()


def check_exactly_once(rows: Iterable[dict[str, Any]], expected: Expected) -> Counter[tuple[str, int, int]]:
    """Every expected record once with its key and value, nothing else; the copies per record."""
    copies: Counter[tuple[str, int, int]] = Counter()
    wrong: list[str] = []
    for row in rows:
        value = row["value"]
        where = (value["topic"], value["partition"], value["offset"])
        copies[where] += 1
        if row["split_id"] != f"{value['topic']}-{value['partition']}":
            wrong.append(f"{where}: split_id {row['split_id']}")
        content = expected.get(where)
        if content is not None and content != (value["key"], value["value"]):
            wrong.append(f"{where}: {(value['key'], value['value'])} instead of {content}")
        if row["event_time_ms"] != value["timestamp"]:
            wrong.append(f"{where}: event time {row['event_time_ms']} is not the timestamp {value['timestamp']}")
    missing = sorted(expected.keys() - copies.keys())
    foreign = sorted(copies.keys() - expected.keys())
    twice = sorted(k for k, n in copies.items() if n > 1)
    problems = []
    if missing:
        problems.append(f"{len(missing)} records never written, e.g. {missing[:5]}")
    if foreign:
        problems.append(f"{len(foreign)} records that are not committed input, e.g. {foreign[:5]}")
    if twice:
        problems.append(f"{len(twice)} records written more than once, e.g. {twice[:5]}")
    if wrong:
        problems.append(f"{len(wrong)} records with the wrong content, e.g. {wrong[:5]}")
    assert not problems, "the output is not exactly the input:\n" + "\n".join(problems)
    return copies


# -- processes ------------------------------------------------------------------------------


def kafka_options(
    bootstrap: str, *, topics: str | None = None, pattern: str | None = None, **more: str
) -> dict[str, str]:
    options = {"bootstrap_servers": bootstrap}
    if topics is not None:
        options["topics"] = topics
    if pattern is not None:
        options["topic_pattern"] = pattern
    return {**options, **more}


def option_args(options: Mapping[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


def coordinator_args(source: str, max_parallelism: int, options: Mapping[str, str], *extra: str) -> list[str]:
    return [
        *("coordinator", "--source", source, "--connector", "kafka", "--max-parallelism", str(max_parallelism)),
        *option_args(options),
        *extra,
    ]


def reader_args(
    source: str, subtask: int, options: Mapping[str, str], out_topic: str, *extra: str, process: str | None = None
) -> list[str]:
    """Records go to OUT as the JSON envelope the checks read: written by the host
    (``--output-format envelope``) or, with ``process``, by that function of
    tests/support/record_functions.py (``as_envelope``) over the records themselves."""
    written = ("--output-format", "envelope") if process is None else ("--process", f"record_functions:{process}")
    return [
        *("reader", "--source", source, "--subtask", str(subtask), "--connector", "kafka"),
        *("--output", f"kafka:{out_topic}", *written),
        *option_args(options),
        *extra,
    ]


def start_coordinator(
    procs: ProcessGroup, source: str, max_parallelism: int, options: Mapping[str, str], *extra: str
) -> Proc:
    proc = procs.start(f"coordinator-{len(procs.procs)}", coordinator_args(source, max_parallelism, options, *extra))
    proc.wait_for_log("is serving", timeout_s=90)
    return proc


def start_reader(
    procs: ProcessGroup,
    source: str,
    subtask: int,
    options: Mapping[str, str],
    out_topic: str,
    *extra: str,
    process: str | None = None,
) -> Proc:
    args = reader_args(source, subtask, options, out_topic, *(extra or READER_TIMING), process=process)
    return procs.start(f"reader-{subtask}-{len(procs.procs)}", args, env={"PYTHONPATH": support_pythonpath()})


def hash_owner(topic: str, partition: int, parallelism: int) -> int:
    """The subtask the sticky assigner gives ``topic-partition`` (Flink's Kafka rule)."""
    return int(partition_owner_key(_TopicPartition(topic, partition))) % parallelism


@dataclass(frozen=True)
class _TopicPartition:
    topic: str
    partition: int


OWNERSHIP_SETTLE_S = 15.0
"""How long a change of readers may take to show in ownership once the readers have
registered (a grace delay, a checkpoint of each owner, on a loaded machine)."""


async def owned_by_subtask(bootstrap: str, source: str) -> dict[int, int]:
    """Ownership as the audit rebuilds it from the control topics (only subtasks owning
    some). Not checked for violations: read while the coordinator commits, the partitions'
    ends may cut one of its transactions (each partition's last stable offset moves on its
    own); the audit after everything stopped is the check."""
    result = await run_audit(bootstrap, source)
    return {s.subtask: s.owned for s in result.summary.subtasks if s.owned}


def wait_owned(bootstrap: str, source: str, expected: Mapping[int, int], readers: Iterable[Proc]) -> set[int]:
    """Poll (synchronously) until each subtask owns as many splits as ``expected`` says."""
    deadline = time.monotonic() + OWNERSHIP_SETTLE_S
    owned: dict[int, int] = {}
    while time.monotonic() < deadline:
        for reader in readers:
            assert reader.returncode is None, f"{reader.name} exited:\n{reader.tail()}"
        owned = asyncio.run(owned_by_subtask(bootstrap, source))
        if owned == dict(expected):
            return set(owned)
        time.sleep(0.3)
    raise AssertionError(
        f"ownership {owned}, expected {dict(expected)} within {OWNERSHIP_SETTLE_S} s\n"
        + "\n".join(f"--- {r.name}\n{r.tail(6)}" for r in readers)
    )


def audit_ok(bootstrap: str, source: str) -> AuditSummary:
    return _summary_if_ok(asyncio.run(run_audit(bootstrap, source)))


def audit_ok_once_epochs_are(bootstrap: str, source: str, epochs: list[int], timeout_s: float = 30.0) -> AuditSummary:
    """The audit once it shows ``epochs``: a coordinator's answers to readers that left may
    commit after the readers exited (they can end on an earlier epoch's NoMoreSplits)."""

    def showing() -> AuditResult | None:
        result = asyncio.run(run_audit(bootstrap, source))
        return result if result.summary.epochs == epochs else None

    return _summary_if_ok(wait_until(showing, timeout_s, f"epochs {epochs} in the audit of {source}"))


def _summary_if_ok(result: AuditResult) -> AuditSummary:
    shown = "\n".join(f"  {v.kind.value} at {v.location}: {v.message}" for v in result.violations[:10])
    assert result.ok, f"the audit found {len(result.violations)} violation(s):\n{shown}"
    return result.summary


def readers_messages(bootstrap: str, source: str) -> list[dict[str, Any]]:
    """The coordinator's messages on NS.S.readers as JSON envelopes, in cseq order."""
    from test_takeover import readers_topic

    return readers_topic(bootstrap, source)


def of_type(messages: Iterable[dict[str, Any]], type_: str, subtask: int | None = None) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] == type_ and (subtask is None or m["subtask"] == subtask)]


def split_ids(message: dict[str, Any]) -> set[str]:
    body = message["body"]
    return {s["split_id"] for s in body["splits"]} if "splits" in body else set(body["split_ids"])


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Any:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        yield group
    finally:
        group.stop_all()


# -- 1: a topic copied exactly once through reader SIGKILLs -----------------------------------

PARTITIONS = 8
RECORDS = 200_000
READERS = 4
KILLS = 5


class LiveCopy:
    """A topic that a producer writes all along (``partitions`` partitions, 200 records
    each first), a coordinator of ``slots`` subtasks for a kafka source over it (its
    assigner's grace delay ``grace_ms``, if given; ``coordinator_args`` added to its command
    line), and OUT (4 partitions), read as readers copy into it. ``finish`` checks the copy;
    ``close`` in a ``finally``."""

    def __init__(
        self,
        procs: ProcessGroup,
        bootstrap: str,
        source: str,
        *,
        slots: int,
        partitions: int,
        grace_ms: int | None = None,
        coordinator_args: Sequence[str] = (),
    ) -> None:
        self.data, self.out = f"{source}.in", f"{source}.out"
        create_topic(bootstrap, self.data, partitions)
        create_topic(bootstrap, self.out, 4)
        writer = DataWriter(bootstrap, self.data, partitions)
        writer.produce(200)
        writer.flush()
        grace = {} if grace_ms is None else {"assignment_grace_ms": str(grace_ms)}
        self.options = kafka_options(bootstrap, topics=self.data, **grace)
        self.coordinator = start_coordinator(procs, source, slots, self.options, *coordinator_args)
        self.background = BackgroundWriter(writer)
        self.output = OutputReader(bootstrap, self.out)

    def finish(self, readers: Sequence[Proc]) -> list[dict[str, Any]]:
        """Stop the producer; once OUT caught up, it holds every input record exactly
        once (checked): its rows."""
        expected = self.background.stop()
        self.output.wait_for(len(expected), 60, readers, "(waiting for the copy to catch up)")
        time.sleep(1.0)  # a late duplicate would show
        rows = self.output.read_all()
        check_exactly_once(rows, expected)
        return rows

    def close(self) -> None:
        self.output.close()
        self.background.stop()


def stop_readers(readers: Sequence[Proc], procs: ProcessGroup) -> None:
    """Readers still running, stopped gracefully: each exits 0."""
    for reader in readers:
        assert reader.returncode is None, reader.tail()
        reader.request_stop()
    assert [reader.wait(30) for reader in readers] == [0] * len(readers), procs.describe()
