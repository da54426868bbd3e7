"""A replicated cluster as production runs it, losing one member at a time (issue 49 item 4).

Over the 3-node KRaft cluster (tests/support/kafka_cluster.py): a topic of replication
factor 3 and min.insync.replicas 2 that a producer writes at a steady rate, copied into an
output topic exactly once by three readers (one at ``--coordinator auto``, two
``external``) of a source two deployed coordinator workers serve. In turn, each put back
before the next:

1. SIGKILL of the broker leading the source's ``coordinator-state`` partition (from the
   metadata), with a ``topics apply`` of the source run while it is down;
2. SIGKILL of the broker coordinating a reader's transactions (FindCoordinator of its
   transactional id);
3. SIGKILL of the active coordinator worker (from its /health).

After each, the worker group's /health shows the source active within the takeover
time, and a worker, never the auto reader, serves it once things settle. The output's
stall (the longest gap between arrivals in a ``read_committed`` consumer) is printed
beside a plain consumer group's on the input over the same window (its slowest
partition: the one whose leader died), the issue's goal being at most 1 s more; not
asserted, a timing. At the end every input record is in the output once and the audit
of the control topics is clean.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli_run import run_sluicegate
from kafka_cluster import kafka_cluster, partition_leader, transaction_coordinator, wait_fenced
from kafka_data import (
    FAST_CHECKPOINTS,
    BackgroundWriter,
    DataWriter,
    OutputReader,
    audit_ok,
    check_exactly_once,
    coordinator_args,
    create_replicated_topic,
    kafka_options,
    start_reader,
    stop_readers,
)
from local_http import free_port, http_get, wait_until
from processes import Proc, ProcessGroup, support_pythonpath
from stalls import ArrivalClock, wait_flowing

from sluicegate.devtools.broker.cluster import LocalKafkaCluster
from sluicegate.protocol.names import reader_transactional_id
from sluicegate.protocol.topics import ControlTopics, topic_specs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]

__all__ = ["kafka_cluster"]

NAMESPACE = "sluicegate"
READERS = 3
INPUT_PARTITIONS = 6
REPLICATED = {"min.insync.replicas": "2"}
TAKEOVER_S = 12.0
"""The takeover time: the Faust session (6 s) after which a rebalance hands the source on
at the latest, a restore, and room for a loaded machine of two cores."""
SETTLE_S = 60.0
"""How long a kill may take to be over: the controller fences a dead broker after 9 s
(broker.session.timeout.ms), then clients find the new leaders."""


@dataclass(frozen=True)
class Stall:
    """What one kill cost, over the window from the kill until things flowed again after
    the killed process was back."""

    kill: str
    output_s: float
    plain_slowest_partition_s: float
    plain_topic_s: float
    takeovers: int
    """Coordinators that started serving in the window (the standby taking over)."""
    registrations: int
    """Readers that registered again in the window (timed out by the coordinator)."""

    def line(self) -> str:
        more = self.output_s - self.plain_slowest_partition_s
        return (
            f"{self.kill}: output stalled {self.output_s:.1f} s, a plain consumer's slowest partition "
            f"{self.plain_slowest_partition_s:.1f} s (its whole topic {self.plain_topic_s:.1f} s): {more:+.1f} s; "
            f"{self.takeovers} takeover(s), {self.registrations} reader(s) registered again"
        )


# -- the deployed workers -----------------------------------------------------------------


def health(port: int) -> dict[str, Any] | None:
    status, _, body = http_get(port, "/health")
    return orjson.loads(body) if status in (200, 503) else None


def active_workers(ports: Sequence[int], source: str) -> list[int] | None:
    """The indexes of the workers whose /health lists ``source`` active; None while one
    does not answer."""
    answers = [health(port) for port in ports]
    if any(a is None for a in answers):
        return None
    return [i for i, a in enumerate(answers) if a is not None and source in a["active_sources"]]


def wait_one_active(ports: Sequence[int], source: str, timeout_s: float) -> int:
    """The one worker serving ``source``, once every worker answers and two looks in a row
    agree (a takeover's two sides may both list it for a moment)."""

    def settled() -> list[int] | None:
        first = active_workers(ports, source)
        if first is None or len(first) != 1:
            return None
        time.sleep(0.5)
        return first if active_workers(ports, source) == first else None

    (index,) = wait_until(settled, timeout_s, f"one worker serving {source}")
    return index


def wait_some_active(ports: Sequence[int], source: str, since: float) -> float:
    """Seconds from ``since`` until a worker that answers lists ``source`` active (a dead
    one cannot): the worker group's /health within the takeover time."""

    def listed() -> bool:
        answers = [health(port) for port in ports]
        return any(a is not None and source in a["active_sources"] for a in answers)

    left = TAKEOVER_S - (time.monotonic() - since)
    wait_until(lambda: listed() or None, max(0.0, left), f"a worker serving {source} within {TAKEOVER_S} s")
    return time.monotonic() - since


def start_worker(group: ProcessGroup, source: str, options: dict[str, str], port: int) -> Proc:
    args = coordinator_args(source, READERS, options, "--web-port", str(port))
    return group.start(f"worker-{port}", args, env={"PYTHONPATH": support_pythonpath()})


# -- the test -------------------------------------------------------------------------------


@dataclass
class Copy:
    """Everything running: the cluster, the workers, the readers and the two clocks."""

    cluster: LocalKafkaCluster
    group: ProcessGroup
    source: str
    options: dict[str, str]
    ports: list[int]
    workers: list[Proc]
    readers: list[Proc]
    output: ArrivalClock
    plain: ArrivalClock

    @property
    def procs(self) -> list[Proc]:
        return [*self.workers, *self.readers]

    def registrations(self) -> int:
        return sum(reader.log().count("registered as attempt") for reader in self.readers)

    def servings(self) -> int:
        """How many times a worker, killed ones too, started serving the source (a restarted
        worker appends to its predecessor's log)."""
        logs = {p.log_path for p in self.group.procs if p.name.startswith("worker-")}
        return sum(path.read_text(errors="replace").count(") is serving") for path in logs)

    def measure(
        self, kill: str, killed_at: float, put_back: Callable[[], None], while_down: Callable[[], None] = lambda: None
    ) -> Stall:
        """After a kill: the source active on a worker within the takeover time,
        ``while_down()``, the streams flowing again, the killed process put back
        (``put_back()``) and flowing once more: the stalls over all of that."""
        served, registered = self.servings(), self.registrations()
        took = wait_some_active(self.ports, self.source, killed_at)
        while_down()
        wait_flowing(self.output, self.plain, killed_at, SETTLE_S, self.readers)
        put_back()
        end = wait_flowing(self.output, self.plain, time.monotonic(), SETTLE_S, self.procs)
        wait_one_active(self.ports, self.source, TAKEOVER_S)
        whole, _ = self.output.longest_gap(killed_at, end)
        plain_whole, plain_slowest = self.plain.longest_gap(killed_at, end)
        stall = Stall(
            kill, whole, plain_slowest, plain_whole, self.servings() - served, self.registrations() - registered
        )
        print(f"{stall.line()} (a worker listed the source active {took:.1f} s after the kill)")
        return stall


@contextmanager
def running_copy(cluster: LocalKafkaCluster, source: str, tmp_path: Path) -> Iterator[tuple[Copy, BackgroundWriter]]:
    bootstrap = cluster.bootstrap
    data, out = f"{source}.in", f"{source}.out"
    create_replicated_topic(bootstrap, data, INPUT_PARTITIONS, 3, REPLICATED)
    create_replicated_topic(bootstrap, out, 4, 3, REPLICATED)
    writer = DataWriter(bootstrap, data, INPUT_PARTITIONS)
    writer.produce(100)
    writer.flush()
    group = ProcessGroup(tmp_path, bootstrap)
    background = BackgroundWriter(writer, per_tick=2, tick_s=0.05)  # 240 records/s
    clocks: list[ArrivalClock] = []
    try:
        options = kafka_options(bootstrap, topics=data)
        ports = [free_port(), free_port()]
        workers = [start_worker(group, source, options, port) for port in ports]
        wait_one_active(ports, source, 90)
        readers = [
            start_reader(group, source, k, options, out, *FAST_CHECKPOINTS, "--coordinator", mode)
            for k, mode in enumerate(["auto", "external", "external"])
        ]
        clocks += [
            ArrivalClock.committed(bootstrap, out),
            ArrivalClock.group_member(bootstrap, data, f"{source}.plain"),
        ]
        copy = Copy(cluster, group, source, options, ports, workers, readers, *clocks)
        wait_flowing(copy.output, copy.plain, time.monotonic(), 90, copy.procs)
        yield copy, background
    finally:
        background.stop()
        for clock in clocks:
            clock.close()
        group.stop_all()


def test_exactly_once_while_brokers_and_the_active_worker_die_in_turn(
    kafka_cluster: LocalKafkaCluster, unique_source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, cluster = unique_source, kafka_cluster
    topics = ControlTopics.for_source(source, NAMESPACE)
    began = time.monotonic()
    with running_copy(cluster, source, tmp_path) as (copy, background):
        stalls = [
            kill_state_leader(copy, topics.coordinator_state),
            kill_transaction_coordinator(copy, topics.coordinator_state),
            kill_active_worker(copy),
        ]
        expected = background.stop()
        output = OutputReader(cluster.bootstrap, f"{source}.out")
        try:
            output.wait_for(len(expected), 90, copy.procs, "(waiting for the copy to catch up)")
        finally:
            output.close()
        stop_readers(copy.readers, copy.group)
        check_exactly_once(output.read_all(), expected)
        assert ") is serving" not in copy.readers[0].log(), "the auto reader took the source from the workers"
    summary = audit_ok(cluster.bootstrap, source)
    with capsys.disabled():  # the figures of every run, in make test's output too
        print(f"\ncluster failover: {len(expected)} records copied exactly once, epochs {summary.epochs}, "
              f"{time.monotonic() - began:.0f} s")  # fmt: skip
        print("\n".join(f"  {s.line()}" for s in stalls))


def kill_state_leader(copy: Copy, state_topic: str) -> Stall:
    victim = partition_leader(copy.cluster.bootstrap, state_topic)
    killed_at = time.monotonic()
    copy.cluster.kill(victim)

    def apply() -> None:
        # The path every coordinator's start takes, while the broker is down and still
        # listed (before the controller fences it): it must get through, not exit 1.
        code, took, said = run_sluicegate("topics", "apply", "--source", copy.source, "--max-parallelism",
                                          str(READERS), "--bootstrap-servers", copy.cluster.bootstrap)  # fmt: skip
        assert code == 0, said
        # every control topic: 3 replicas, min ISR 2
        assert said.count("│ 3 │ 2 │") == len(topic_specs(NAMESPACE, copy.source, READERS)), said
        print(f"topics apply with broker {victim} down: exit 0 in {took:.1f} s")

    def put_back() -> None:
        wait_fenced(copy.cluster, victim)
        copy.cluster.restart(victim)

    return copy.measure(f"broker {victim} (leader of {state_topic})", killed_at, put_back, apply)


def kill_transaction_coordinator(copy: Copy, state_topic: str) -> Stall:
    """The broker coordinating a reader's transactions; where the readers' ids are spread,
    one that does not also lead the state topic (that kill was the first)."""
    bootstrap = copy.cluster.bootstrap
    state_leader = partition_leader(bootstrap, state_topic)
    coordinators = {
        k: transaction_coordinator(bootstrap, reader_transactional_id(NAMESPACE, copy.source, k))
        for k in range(READERS)
    }
    subtask = next((k for k, node in coordinators.items() if node != state_leader), 0)
    victim = coordinators[subtask]
    killed_at = time.monotonic()
    copy.cluster.kill(victim)

    def put_back() -> None:
        wait_fenced(copy.cluster, victim)
        copy.cluster.restart(victim)

    what = f"broker {victim} (transaction coordinator of reader {subtask}; readers' {coordinators})"
    return copy.measure(what, killed_at, put_back)


def kill_active_worker(copy: Copy) -> Stall:
    active = wait_one_active(copy.ports, copy.source, TAKEOVER_S)
    killed_at = time.monotonic()
    copy.workers[active].kill()

    def put_back() -> None:
        copy.workers[active] = start_worker(copy.group, copy.source, copy.options, copy.ports[active])
        wait_until(lambda: health(copy.ports[active]), 60, "the restarted worker's /health")

    return copy.measure(f"worker {active} (the active coordinator)", killed_at, put_back)
