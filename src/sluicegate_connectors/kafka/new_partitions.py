"""Partitions a planning host (Spark's driver) finds in the data cluster before the
coordinator's discovery has assigned them: a topic created for ``subscribe_pattern``,
partitions added to a topic of ``topics``.

Spark's own Kafka source lists its topics at every trigger, so a batch planned after a
topic was created reads it. Here the coordinator's enumerator discovers them (every
``partition_discovery_interval_ms``) and assigns them to the query's subtasks, so a
planning round could come between the topic's creation and its assignment and plan a
batch without it: ``processAllAvailable`` would return with the new topic unread. The
planner waits for the partitions named here instead (``inputs_to_come``), but only for a
while from when it first saw each: a discovery that never assigns one (a deployed
coordinator's longer interval, a subtask that is not registered) costs one bounded
wait, said once, never every round. Only partitions that appear after the first look
count: the ones there already are the first batch's (the planner's settling), or
another host's (a named source's standalone readers own splits this query does not).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .cluster import TopicPartitionKey

log = logging.getLogger("sluicegate.connectors.kafka")

SLACK_S = 10.0
"""On top of the discovery interval: the discovery's requests and the assignment's way
through the control topic to the driver. Four queries' coordinators on 2 busy cores took
3-4 s from a partition's creation to its assignment (Spark's suite port): a wait that
ends too early plans a batch without the partition, one that lasts is paid only when a
coordinator never assigns it."""
LONGEST_INTERVAL_S = 5.0
"""A longer discovery interval is waited for this long only: the user chose to find new
partitions late, and planning waits hold every other partition's records back."""


class NewPartitions:
    def __init__(self, discovery_interval_ms: int) -> None:
        self.wait_s = min(discovery_interval_ms / 1000, LONGEST_INTERVAL_S) + SLACK_S
        """How long a partition found unassigned is waited for."""
        self._before: frozenset[TopicPartitionKey] | None = None
        """The partitions of the first look: none of them is new."""
        self._since: dict[TopicPartitionKey, float] = {}
        """Each partition listed and not assigned: when it was first seen so."""
        self._said: set[TopicPartitionKey] = set()

    def seen(self, listed: Iterable[TopicPartitionKey], assigned: Iterable[TopicPartitionKey], now_s: float) -> None:
        """One planning round's look: the cluster's partitions of the subscription and the
        ones the query's subtasks own."""
        present = frozenset(listed)
        if self._before is None:
            self._before = present
        unassigned = present - self._before - set(assigned)
        self._since = {key: self._since.get(key, now_s) for key in unassigned}
        self._said &= unassigned

    def awaited(self, now_s: float) -> list[str]:
        """The partitions to wait for before planning, by name; one waited for too long is
        said once and planned without."""
        awaited: list[str] = []
        for key, since in sorted(self._since.items()):
            name = f"{key[0]}-{key[1]}"
            if now_s - since < self.wait_s:
                awaited.append(name)
            elif key not in self._said:
                self._said.add(key)
                log.info(
                    "%s is in the data cluster but not assigned to the query's subtasks %.1f s after planning "
                    "found it: planning goes on without it until the coordinator's discovery assigns it",
                    name,
                    self.wait_s,
                )
        return awaited
