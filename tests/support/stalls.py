"""How long a stream stood still, as its consumers saw it: ``ArrivalClock`` notes when a
topic's records arrive in a consumer of its own thread, and answers the longest gap over a
window (across the topic, or in its slowest partition) and whether the records flow again
(an event a test waits on after a kill, instead of a sleep)."""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from processes import Proc

FLOW_SPAN_S = 3.0
"""A stream flows again once it has had records for this long ..."""
FLOW_GAP_S = 1.5
"""... with no gap longer than this (a checkpoint every 300 ms leaves ~0.3 s between a
reader's transactions; a loaded machine more)."""


class ArrivalClock:
    """The arrival times of ``topic``'s records in one consumer, per partition."""

    def __init__(self, name: str, config: dict[str, Any], subscribe: Callable[[Any], None]) -> None:
        self.name = name
        self._consumer = Consumer(config)
        subscribe(self._consumer)
        self._arrivals: dict[int, list[float]] = {}
        self._everything: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"arrivals-{name}", daemon=True)
        self._thread.start()

    @classmethod
    def committed(cls, bootstrap: str, topic: str) -> ArrivalClock:
        """What a downstream ``read_committed`` consumer of ``topic`` sees from now on."""
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}.arrivals-unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
        }

        def assign(consumer: Any) -> None:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in partitions])

        return cls(f"{topic} (read_committed)", config, assign)

    @classmethod
    def group_member(cls, bootstrap: str, topic: str, group: str) -> ArrivalClock:
        """A plain consumer group member reading ``topic`` from its end: what any Kafka
        application sees of the cluster's failovers."""
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 100,
        }
        return cls(f"{topic} (group {group})", config, lambda consumer: consumer.subscribe([topic]))

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._consumer.consume(num_messages=1000, timeout=0.1)
            now = time.monotonic()
            # Errors (a broker down, a leader moved) are librdkafka's to ride out: they are
            # not arrivals, which is all this counts.
            partitions = {m.partition() for m in batch if m.error() is None}
            if not partitions:
                continue
            with self._lock:
                self._everything.append(now)
                for partition in partitions:
                    self._arrivals.setdefault(partition, []).append(now)

    def _times(self) -> tuple[list[float], list[list[float]]]:
        with self._lock:
            return list(self._everything), [list(t) for t in self._arrivals.values()]

    def longest_gap(self, start: float, end: float) -> tuple[float, float]:
        """The longest time without an arrival within [start, end]: across the topic, and
        in its slowest partition (a partition whose leader died stalls alone)."""
        everything, partitions = self._times()
        return _gap(everything, start, end), max((_gap(t, start, end) for t in partitions), default=end - start)

    def flowing(self, after: float, per_partition: bool) -> bool:
        """Records arrived for the last FLOW_SPAN_S, all after ``after``, without a gap
        longer than FLOW_GAP_S (in every partition seen, with ``per_partition``)."""
        now = time.monotonic()
        start = now - FLOW_SPAN_S
        if start < after:
            return False
        whole, slowest = self.longest_gap(start, now)
        return (slowest if per_partition else whole) < FLOW_GAP_S

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def _gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without one of ``times`` (sorted)."""
    inside = times[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def wait_flowing(
    output: ArrivalClock, plain: ArrivalClock, after: float, timeout_s: float, procs: Sequence[Proc]
) -> float:
    """Wait until the output flows again (across the topic: every reader's transaction
    writes to all its partitions) and so does every partition the plain consumer reads;
    fail early if a process died. Returns the moment it did."""
    deadline = time.monotonic() + timeout_s
    while not (output.flowing(after, per_partition=False) and plain.flowing(after, per_partition=True)):
        for proc in procs:
            assert proc.returncode is None, f"{proc.name} exited with {proc.returncode}:\n{proc.tail()}"
        assert time.monotonic() < deadline, f"{output.name} or {plain.name} still stalled {timeout_s} s on"
        time.sleep(0.2)
    return time.monotonic()
