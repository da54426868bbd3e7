"""A local Apache Kafka cluster of several KRaft nodes, from the same jars as the single
broker (``local.py``): what production runs, for the tests of replication and broker loss.

Every node is broker and controller (a quorum of ``nodes`` voters), the cluster's own
topics (consumer offsets, transaction state) and new topics by default are replicated
``min(3, nodes)`` times, and ``min.insync.replicas`` is left at Kafka's default (1), as
on many real clusters. Nodes are JVMs compiled with C1 only and small heaps: a test
cluster lives for minutes on a machine of two cores.

``start()`` chooses every port first (the quorum names them all), launches every node,
then waits for each (a node answers only once a majority of controllers runs) and for
the metadata to list them all (a node is listed once the controller unfences it, a
moment after it answers). ``kill`` SIGKILLs one node (its data stays), ``restart``
starts it again from its data and waits the same way.

Layout: ``<run_dir>/node-<id>/`` is one node's run directory (``local.py``).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from sluicegate.devtools.broker.local import (
    BrokerError,
    ClusterMember,
    Echo,
    LocalKafkaBroker,
    free_port,
    new_cluster_id,
    run_coroutine,
    stderr_echo,
)
from sluicegate.kafka.topics import TopicApplyError, cluster_facts

__all__ = ["LocalKafkaCluster"]


@dataclass
class LocalKafkaCluster:
    """``nodes`` local Kafka nodes forming one cluster; ``bootstrap`` lists them all."""

    run_dir: Path
    nodes: int = 3
    heap: str = "384m"
    quick_jit: bool = True
    #: Linux only: a node gets SIGTERM when the thread that started it dies (test sessions;
    #: so ``restart`` a node from a thread that lives as long as the cluster).
    die_with_parent: bool = False
    echo: Echo = stderr_echo
    _brokers: dict[int, LocalKafkaBroker] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise BrokerError(f"a cluster needs at least one node, got {self.nodes}")
        self.run_dir = Path(self.run_dir).expanduser().resolve()

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._brokers)

    @property
    def bootstrap(self) -> str:
        """Every node's address, as a client's ``bootstrap.servers``."""
        return ",".join(self.address(node) for node in self.node_ids)

    def address(self, node: int) -> str:
        port = self.broker(node).port
        assert port is not None
        return f"127.0.0.1:{port}"

    def broker(self, node: int) -> LocalKafkaBroker:
        try:
            return self._brokers[node]
        except KeyError:
            raise BrokerError(f"the cluster has no node {node} (nodes: {self.node_ids})") from None

    def node_of(self, address: str) -> int:
        """The node id serving ``127.0.0.1:PORT``."""
        for node in self.node_ids:
            if self.address(node) == address:
                return node
        raise BrokerError(f"no node of the cluster is at {address}")

    # --- lifecycle ---------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> str:
        """Start every node and return the bootstrap once each answers."""
        if self._brokers:
            raise BrokerError(f"the cluster in {self.run_dir} was started already")
        taken: set[int] = set()

        def port() -> int:
            chosen = free_port(frozenset(taken))
            taken.add(chosen)
            return chosen

        ids = list(range(1, self.nodes + 1))
        broker_ports = {node: port() for node in ids}
        voters = tuple((node, port()) for node in ids)
        cluster_id = new_cluster_id()
        for node in ids:
            member = ClusterMember(node, voters, cluster_id, replication=min(3, self.nodes))
            self._brokers[node] = LocalKafkaBroker(
                run_dir=self.run_dir / f"node-{node}",
                keep=True,  # a killed node restarts from its data; stop() removes it all
                heap=self.heap,
                quick_jit=self.quick_jit,
                port=broker_ports[node],
                die_with_parent=self.die_with_parent,
                echo=self.echo,
                member=member,
            )
        started = time.monotonic()
        try:
            for node in ids:
                self._brokers[node].start(timeout_s, wait=False)
            for node in ids:
                self._brokers[node].wait_ready(max(1.0, timeout_s - (time.monotonic() - started)))
            self._wait_listed(started + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.echo(f"cluster of {self.nodes} nodes ready at {self.bootstrap} in {time.monotonic() - started:.1f}s")
        return self.bootstrap

    def kill(self, node: int) -> None:
        """SIGKILL one node; the others carry on (and elect new leaders once the
        controller fences it, ``broker.session.timeout.ms`` later)."""
        self.echo(f"killing node {node} ({self.address(node)})")
        self.broker(node).kill()

    def restart(self, node: int, timeout_s: float = 60.0) -> None:
        """Start a killed node again from its data, on its ports; returns once the cluster
        lists it."""
        started = time.monotonic()
        self.broker(node).start(timeout_s)
        self._wait_listed(started + timeout_s)

    def _wait_listed(self, deadline: float) -> None:
        # Each answer comes from one broker, and brokers hear of an unfenced one at
        # different moments: several answers in a row must list them all.
        in_a_row = 0
        while True:
            try:
                listed = run_coroutine(lambda: cluster_facts(self.bootstrap)).brokers
            except TopicApplyError:
                listed = ()
            in_a_row = in_a_row + 1 if len(listed) == len(self._brokers) else 0
            if in_a_row >= 2 * len(self._brokers):
                return
            if time.monotonic() > deadline:
                raise BrokerError(f"the cluster lists brokers {list(listed)} of {self.node_ids} after the start")
            time.sleep(0.2)

    def running(self, node: int) -> bool:
        return self.broker(node).status().running

    def stop(self) -> None:
        """Stop every node and remove the cluster's data. SIGKILL: the data goes anyway, and
        the last nodes of a cluster shut down gracefully only after a long wait for the
        controlled shutdown that no quorum is left to grant."""
        errors: list[str] = []
        for node in sorted(self._brokers):
            broker = self._brokers[node]
            try:
                if broker.status().running:
                    broker.kill()
                broker.stop()
            except BrokerError as exc:
                errors.append(str(exc))
        self._brokers.clear()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if errors:
            raise BrokerError("; ".join(errors))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
