"""The kit's one real run: ``sluicegate coordinator`` and ``sluicegate reader`` processes
over Kafka, reading into a ``kafka:`` output topic (transactional, exactly once).

A reader is SIGKILLed once records are committed and started again; then the
coordinator is SIGKILLed and started again. The output topic must then hold every
record exactly once (``row_key``), and the audit of the control topics must pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluicegate.audit.commands import run_audit
from sluicegate.testing.checks import assert_exactly_once
from sluicegate.testing.processes import Proc, ProcessGroup

READER_TIMING = ("--checkpoint-interval-ms", "300", "--heartbeat-interval-ms", "300", "--session-timeout-ms", "3000")
READER_STAYS = ("--no-exit-when-finished",)
"""A bounded source's readers stay registered once done, so the SIGKILL always meets a
live process (and the restarted one restores a finished checkpoint)."""
COORDINATOR_TIMING = ("--session-timeout-ms", "3000", "--reader-departure-timeout-ms", "30000")
OUTPUT_PARTITIONS = 2


@dataclass(frozen=True)
class RealRunPlan:
    """What the kit (kit.py) hands a real run: the connector, its options, the records
    written and how to tell one from another."""

    connector: str
    source: str
    """The source's name (also the prefix of the output topic's)."""
    parallelism: int
    options: Mapping[str, str]
    expected: list[Hashable]
    """A key of every record written, for the exactly-once check."""
    row_key: Callable[[Mapping[str, Any]], Hashable]
    """The key of an output row (an envelope's JSON)."""
    records_timeout_s: float = 120.0
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables the coordinator and readers need."""


def real_run(plan: RealRunPlan, bootstrap: str, log_dir: Path) -> None:
    expected = plan.expected
    source = plan.source
    out = f"{source}.kit-out"
    _create_topic(bootstrap, out, OUTPUT_PARTITIONS)
    group = ProcessGroup(log_dir, bootstrap)
    extra_env = dict(plan.env)
    option_args = [arg for key, value in plan.options.items() for arg in ("--option", f"{key}={value}")]
    connector = ("--connector", plan.connector)

    def coordinator() -> Proc:
        args = ["coordinator", "--source", source, *connector, "--max-parallelism", str(plan.parallelism)]
        proc = group.start(f"coordinator-{len(group.procs)}", [*args, *option_args, *COORDINATOR_TIMING], env=extra_env)
        proc.wait_for_log("is serving", timeout_s=90)
        return proc

    def reader(subtask: int) -> Proc:
        args = ["reader", "--source", source, "--subtask", str(subtask), *connector, "--output", f"kafka:{out}"]
        args += ["--output-format", "envelope"]  # the checks read the split id of each record
        return group.start(
            f"reader-{subtask}-{len(group.procs)}", [*args, *option_args, *READER_TIMING, *READER_STAYS], env=extra_env
        )

    output = _OutputTopic(bootstrap, out)
    try:
        coord = coordinator()
        readers = {s: reader(s) for s in range(plan.parallelism)}
        output.wait_for(1, plan.records_timeout_s, group)
        assert readers[0].returncode is None, f"reader 0 exited with {readers[0].returncode} before the SIGKILL"
        readers[0].kill()  # SIGKILL: records read since its last checkpoint are aborted
        readers[0] = reader(0)
        readers[0].wait_for_log("registered as attempt", timeout_s=60)
        coord.kill()
        coord = coordinator()
        output.wait_for(len(expected), plan.records_timeout_s, group)
        time.sleep(1.5)  # a few more checkpoints: a late duplicate would show now
        rows = output.read_all()
    except AssertionError as exc:
        raise AssertionError(f"{plan.connector}, real run: {exc}\n{group.describe()}") from None
    finally:
        output.close()
        group.stop_all()
    keys: list[Hashable] = [plan.row_key(row) for row in rows]
    assert_exactly_once(keys, expected, f"{plan.connector}, real run with a reader and the coordinator killed")
    result = asyncio.run(run_audit(bootstrap, source))
    shown = "\n".join(f"  {v.kind.value} at {v.location}: {v.message}" for v in result.violations[:10])
    assert result.ok, f"{plan.connector}, real run: the audit found {len(result.violations)} violation(s):\n{shown}"


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30).values():
        future.result(30)


class _OutputTopic:
    """The rows committed to the output topic (read_committed), read on incrementally."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.count = 0
        self._consumer = self._open()

    def _open(self) -> Any:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "sluicegate-kit-unused",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(OUTPUT_PARTITIONS)])
        return consumer

    def _rows(self, consumer: Any, until_eof: bool, timeout_s: float) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            messages = consumer.consume(num_messages=10_000, timeout=0.2)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                    continue
                at_end.discard(message.partition())
                rows.append(orjson.loads(message.value()))
            if not messages and (not until_eof or len(at_end) == OUTPUT_PARTITIONS):
                break
        return rows

    def wait_for(self, count: int, timeout_s: float, group: ProcessGroup) -> None:
        deadline = time.monotonic() + timeout_s
        while self.count < count:
            dead = [p for p in group.procs if p.returncode not in (None, 0, -9)]
            assert not dead, f"{dead[0].name} exited with {dead[0].returncode}"
            assert time.monotonic() < deadline, f"{self.count} of {count} records in the output after {timeout_s} s"
            self.count += len(self._rows(self._consumer, until_eof=False, timeout_s=1.0))

    def read_all(self) -> list[dict[str, Any]]:
        consumer = self._open()
        try:
            return self._rows(consumer, until_eof=True, timeout_s=60.0)
        finally:
            consumer.close()

    def close(self) -> None:
        self._consumer.close()
