"""The broker dies: SIGKILLed mid-run, down for longer than every timeout that matters,
then brought back on the same data directory and port. Nothing else is restarted.

On a broker of its own (the session's broker is shared by the other tests):

- source A: a coordinator and three standalone readers writing to ``kafka:OUT``
  (transactional: data, checkpoint and ack commit together);
- source B: the windowed Spark job (``python -m sluicegate.spark.job``, local mode),
  whose driver talks to B's coordinator while its executors read.

The broker is killed once both have committed work, and stays down until the Spark
driver has fenced its subtasks (nothing could be sent for longer than its session
timeout, 10 s) and for longer than the readers' transaction timeout (15 s here, set
with ``--transaction-timeout-ms``), so that the broker, back, aborts the transactions
the readers had open, fencing their producers, and the coordinators fail every attempt
they did not hear from for a session timeout. Those are the timeouts that decide what
happens; the 82 s of the outage first tried by hand exercise nothing more, so the
outage here is the transaction timeout plus 2 s (event-driven for the fence). Then every value of
A is in OUT exactly once (read_committed), B's window table is exact, no process
died, and the audit of both sources is clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from processes import Proc, ProcessGroup, read_topic

from sluicegate.audit.commands import run_audit
from sluicegate.devtools.broker.local import LocalKafkaBroker
from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol.topics import TopicSpec

log = logging.getLogger("sluicegate.tests.outage")

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420), pytest.mark.spark]

READERS = 3
READER_OPTIONS = {"splits": "6", "records_per_split": "1000", "rate": "50"}
READER_TOTAL = 6 * 1000
"""Three readers at 50 records/s each for two splits: 40 s of reading, most of it after
the outage."""
SPARK_PARALLELISM = 2
SPARK_OPTIONS = {"splits": "8", "records_per_split": "10000"}
SPARK_TOTAL = 8 * 10000
SPARK_RECORDS_PER_TRIGGER = 4000
"""20 batches: on a fast machine the job must still be reading when the readers, started
after its second batch, have committed work and the broker is killed."""
TRANSACTION_TIMEOUT_S = 15.0
"""The readers' checkpoint transaction timeout (``--transaction-timeout-ms``; by default a
minute, reader/host.py): what the outage must outlast. The default made this test wait 62 s
for the same behaviour."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalKafkaBroker]:
    own = LocalKafkaBroker(run_dir=tmp_path / "broker", keep=True, die_with_parent=True, echo=log.info)
    own.start(timeout_s=180)
    yield own
    own.stop()


def _start_spark_job(group: ProcessGroup, source: str, tmp_path: Path) -> Proc:
    args = [
        "--source", source,
        "--output", str(tmp_path / "windows"),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--parallelism", str(SPARK_PARALLELISM),
        "--max-records-per-trigger", str(SPARK_RECORDS_PER_TRIGGER),
        "--progress-interval", "1",
        "--check",
        "--quiet",
    ]  # fmt: skip
    for key, value in SPARK_OPTIONS.items():
        args += ["--option", f"{key}={value}"]
    return group.start("spark-job", args, module="sluicegate.spark.job")


def _kill_broker(broker: LocalKafkaBroker) -> int:
    pid = broker.status().pid
    assert pid is not None, "the test's broker is not running"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, "the broker outlived SIGKILL"
        time.sleep(0.05)
    return pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(")", 1)[1].split()[0] != "Z"
    return True


def _restart_broker(run_dir: Path, port: int, controller_port: int) -> str:
    """The broker again on the same data directory and ports (the killed broker's
    connections leave its port in TIME_WAIT: the broker module binds with SO_REUSEADDR)."""
    again = LocalKafkaBroker(
        run_dir=run_dir, port=port, controller_port=controller_port, keep=True, die_with_parent=True, echo=log.info
    )
    return again.start(timeout_s=180)


def _committed_values(bootstrap: str, topic: str) -> Counter[int]:
    records = asyncio.run(read_topic(bootstrap, topic, timeout_s=60))
    return Counter(orjson.loads(r.value)["value"] for r in records if r.value is not None)


def _batches_done(job: Proc) -> int:
    """How many batches the job reports done (it prints the last batch id)."""
    ids = [int(b) for b in re.findall(r"progress batch=(-?\d+) ", job.log())]
    return max(ids, default=-1) + 1


def _wait(condition: Any, timeout_s: float, what: str, group: ProcessGroup) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}\n{group.describe()}"
        time.sleep(0.25)


def test_everything_rides_out_a_broker_outage_exactly_once(
    broker: LocalKafkaBroker, tmp_path: Path, unique_source: str
) -> None:
    bootstrap = broker.bootstrap
    status = broker.status()
    assert bootstrap and status.port and status.controller_port
    readers_source, spark_source, out_topic = f"{unique_source}-a", f"{unique_source}-b", f"{unique_source}-out"
    asyncio.run(apply_topics(bootstrap, [TopicSpec(out_topic, partitions=3)]))

    group = ProcessGroup(tmp_path, bootstrap)
    try:
        coordinators = [
            group.coordinator(readers_source, READERS, READER_OPTIONS),
            group.coordinator(spark_source, SPARK_PARALLELISM, SPARK_OPTIONS),
        ]
        job = _start_spark_job(group, spark_source, tmp_path)
        # the readers are rate-limited (40 s of reading): start them once Spark (slower to
        # start, much slower on a loaded machine) has committed work, so the outage lands
        # while they read
        _wait(lambda: _batches_done(job) >= 2, 180, "Spark batches", group)
        readers = [
            group.start(
                f"reader-{k}",
                ProcessGroup.reader_args(
                    readers_source,
                    k,
                    READER_OPTIONS,
                    f"kafka:{out_topic}",
                    "--transaction-timeout-ms",
                    str(int(TRANSACTION_TIMEOUT_S * 1000)),
                ),
            )
            for k in range(READERS)
        ]

        # both have committed work before the kill, and each reader has checkpointed once, so
        # its next transaction is open when the broker dies
        _wait(lambda: sum(_committed_values(bootstrap, out_topic).values()) > 0, 120, "committed output", group)
        _wait(lambda: all(r.lines_with("checkpoint 1:") for r in readers), 120, "each reader's checkpoint", group)
        assert all(r.returncode is None for r in readers), "a reader finished before the outage"
        assert job.returncode is None, f"the Spark job finished before the outage:\n{job.tail()}"
        killed_at = time.monotonic()
        _kill_broker(broker)

        # down until every host fenced itself and past the transaction timeout
        _wait(lambda: "fenced" in job.log(), 120, "the Spark driver to fence its subtasks", group)
        remaining = killed_at + TRANSACTION_TIMEOUT_S + 2 - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        for proc in [*readers, job]:
            assert proc.returncode is None, f"{proc.name} died during the outage:\n{proc.tail(40)}"
        _restart_broker(broker.run_dir, status.port, status.controller_port)
        log.warning("broker down for %.0f s", time.monotonic() - killed_at)

        for reader in readers:
            assert reader.wait(240) == 0, reader.tail(60)
        # a reader whose transaction was open when the broker died finds it aborted (the
        # outage outlasts the transaction timeout) and goes back to its last checkpoint; one
        # caught between a commit and its next record has nothing open: at least one did
        again = [r.name for r in readers if r.lines_with("registering again")]
        assert again, "no reader went back to its checkpoint:\n" + "\n".join(r.tail(20) for r in readers)
        assert job.wait(240) == 0, job.tail(60)
        counts = _committed_values(bootstrap, out_topic)
        assert set(counts) == set(range(READER_TOTAL)), f"{READER_TOTAL - len(counts)} values missing"
        assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:10]
        result = orjson.loads(job.lines_with("RESULT ")[-1].split("RESULT ", 1)[1])
        assert result["ok"], result
        assert (result["count"], result["sum"]) == (SPARK_TOTAL, SPARK_TOTAL * (SPARK_TOTAL - 1) // 2)
        for coordinator in coordinators:
            assert coordinator.returncode is None, f"{coordinator.name} died:\n{coordinator.tail(40)}"
        for source, splits in ((readers_source, 6), (spark_source, 8)):
            audit = asyncio.run(run_audit(bootstrap, source))
            assert audit.ok, f"audit of {source}: {audit.first_violation}"
            assert audit.summary.splits_finished == splits
            assert audit.summary.splits_owned == 0
    finally:
        for proc in group.procs:
            if proc.popen.poll() is None:
                proc.kill_group()
