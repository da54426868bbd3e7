"""The ``kafka`` enumerator: discovers partitions and hands them out through a SplitAssigner.

Discovery asks the data cluster for the partitions of the selected topics and
resolves the starting (and, bounded, stopping) offsets of partitions it has not
seen. The blocking part runs off the coordinator loop (``context.call_async``);
its result is applied on the loop. Discovery is a chain of one-shot calls, each
scheduled by the previous one's handler: every ``partition_discovery_interval_ms``
when discovery is on, and until the first success when it is off or the source is
bounded (a failed discovery is retried after ``RETRY_MS``).

- Partitions found at the first discovery start at ``starting_offsets``; partitions
  added later start at their earliest offset, so nothing written to them is missed.
- A partition missing from two discoveries in a row was deleted: a pending split
  of it is dropped, and the live readers are told (a ``partitions_removed`` source
  event) so that its owner ends it with a warning.
- Bounded (``stopping_offsets`` not ``none``): once every partition of the first
  discovery has been read to its stop offset, each reader gets NoMoreSplits.

The checkpoint holds the pending splits, every partition ever seen (so a restored
enumerator never re-adds a partition that was finished) and whether the first
discovery happened. The source supports reassignment on recovery (FLIP-537):
splits reported by restarting readers come back through ``add_splits_back`` and
the assigner redistributes them; with the default sticky assigner each goes back
to its owner if that reader registers within the grace delay.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sluicegate.api import SplitDistributor, SplitEnumerator, SplitEnumeratorContext
from sluicegate.api.retries import repeated_failure_level

from .cluster import DataCluster, TopicPartitionKey
from .options import KafkaOptions
from .positions import starting_offsets, stopping_offsets
from .split import KafkaPartitionSplit, KafkaSplitCodec, split_id_of

log = logging.getLogger("sluicegate.connectors.kafka")

RETRY_MS = 5_000
REMOVED_EVENT = "partitions_removed"


@dataclass(frozen=True)
class Discovery:
    """What one discovery found (computed off the loop)."""

    present: frozenset[TopicPartitionKey]
    new_splits: tuple[KafkaPartitionSplit, ...]
    first: bool


class KafkaEnumerator(SplitEnumerator[KafkaPartitionSplit]):
    def __init__(
        self,
        context: SplitEnumeratorContext[KafkaPartitionSplit],
        options: KafkaOptions,
        cluster: DataCluster,
        pending: list[KafkaPartitionSplit] | None = None,
        known: set[TopicPartitionKey] | None = None,
        first_done: bool = False,
        removed: set[TopicPartitionKey] | None = None,
    ) -> None:
        self._context = context
        self._options = options
        self._cluster = cluster
        self._codec = KafkaSplitCodec()
        self._distributor = SplitDistributor(
            context, options.assigner(), all_discovered=lambda: self._bounded and self._first_done
        )
        self._distributor.add_splits(pending or [])
        self._known: frozenset[TopicPartitionKey] = frozenset(known or ())
        """Every partition ever discovered. Replaced (never mutated) on the loop: the
        discovery thread reads it."""
        self._first_done = first_done
        self._missing_once: set[TopicPartitionKey] = set()
        self._removed: set[TopicPartitionKey] = set(removed or ())
        """Deleted partitions already announced (they stay in ``_known``)."""
        self._failures = 0
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        self._schedule_discovery(0)
        self._distribute()

    def close(self) -> None:
        self._closed = True

    @property
    def _bounded(self) -> bool:
        return self._options.stopping.bounded

    def _schedule_discovery(self, delay_ms: int) -> None:
        self._context.call_async(self._discover, self._on_discovered, initial_delay_ms=delay_ms)

    # -- discovery (off the loop) --------------------------------------------------

    def _discover(self) -> Discovery:
        known, first = self._known, not self._first_done
        found = self._cluster.partitions()
        present = frozenset((t, p) for t, n in found.items() for p in range(n) if self._options.selects(t, p))
        new = sorted(present - known)
        if new and not first and self._bounded:
            # A bounded read is the partitions of the first discovery, up to their stop
            # offsets; a restored enumerator (a coordinator failover) discovers once more
            # and must not add later partitions, which would have no stop offset.
            log.info("bounded source: %d partitions created after the first discovery are not read", len(new))
            new = []
        if first:
            missing = [t for t in self._options.topics if t not in found]
            if missing:
                log.warning("topics %s do not exist (yet) on %s", missing, self._options.bootstrap_servers)
            absent = sorted((self._options.assign or frozenset()) - present)
            if absent:
                log.warning(
                    "assigned partitions %s do not exist (yet) on %s",
                    ", ".join(split_id_of(t, p) for t, p in absent),
                    self._options.bootstrap_servers,
                )
        starts = starting_offsets(self._cluster, self._options, new, first)
        stops = stopping_offsets(self._cluster, self._options, new) if first and self._bounded else {}
        splits = tuple(KafkaPartitionSplit(t, p, starts[(t, p)], stops.get((t, p))) for t, p in new)
        return Discovery(present, splits, first)

    # -- applying a discovery (on the loop) -------------------------------------------

    def _on_discovered(self, found: Discovery | None, error: BaseException | None) -> None:
        if self._closed:
            return
        if error is not None or found is None:
            self._failures += 1
            self._context.metrics.counter("discovery_failures")
            log.log(
                repeated_failure_level(self._failures),
                "partition discovery failed (%d in a row), retrying in %d s: %s",
                self._failures,
                RETRY_MS // 1000,
                error,
            )
            self._schedule_discovery(RETRY_MS)
            return
        self._failures = 0
        fresh = [s for s in found.new_splits if (s.topic, s.partition) not in self._known]
        readable = [s for s in fresh if not s.finished]
        self._known = self._known | {(s.topic, s.partition) for s in fresh}
        if fresh:
            log.info(
                "discovered %d partitions (%s)%s",
                len(fresh),
                ", ".join(s.split_id for s in fresh[:8]) + (" ..." if len(fresh) > 8 else ""),
                f"; {len(fresh) - len(readable)} already at their stop offset" if len(readable) < len(fresh) else "",
            )
            self._context.metrics.counter("partitions_discovered", len(fresh))
        self._distributor.add_splits(readable)
        self._forget_removed(found.present)
        self._context.metrics.gauge("partitions", len(found.present))
        self._first_done = True
        interval = self._options.partition_discovery_interval_ms
        if interval > 0 and not self._bounded:
            self._schedule_discovery(interval)
        self._distribute()

    def _forget_removed(self, present: frozenset[TopicPartitionKey]) -> None:
        self._removed -= present
        missing = {k for k in self._known if k not in present} - self._removed
        gone = missing & self._missing_once
        self._missing_once = missing - gone
        if not gone:
            return
        self._removed |= gone
        ids = sorted(split_id_of(t, p) for t, p in gone)
        dropped = self._distributor.assigner.remove(ids)
        log.warning("partitions deleted from the data cluster: %s (%d were not assigned yet)", ids, len(dropped))
        self._context.metrics.counter("partitions_removed", len(gone))
        for subtask in self._context.registered_readers():
            self._context.send_event_to_source_reader(subtask, {"type": REMOVED_EVENT, "split_ids": ids})

    # -- events -----------------------------------------------------------------------

    def add_reader(self, subtask: int) -> None:
        self._distribute()

    def add_splits_back(self, splits: list[KafkaPartitionSplit], subtask: int) -> None:
        # A split of a deleted partition comes back when its reader was down at the
        # announcement; assigned again it would never end (a consumer assigned to a
        # deleted partition gets no error), so it ends here.
        deleted = [s.split_id for s in splits if (s.topic, s.partition) in self._removed]
        if deleted:
            log.warning("splits of deleted partitions came back from subtask %d and end: %s", subtask, deleted)
        self._distributor.add_splits([s for s in splits if (s.topic, s.partition) not in self._removed])
        self._distribute()

    def handle_split_request(self, subtask: int, hostname: str | None) -> None:
        self._distribute(requester=subtask)

    def _distribute(self, requester: int | None = None) -> None:
        self._distributor.distribute(requester)

    # -- checkpoint -------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return {
            "pending": [self._codec.to_wire(s) for s in self._distributor.assigner.pending],
            "known": sorted([t, p] for t, p in self._known),
            "first_done": self._first_done,
            "removed": sorted([t, p] for t, p in self._removed),
        }

    @classmethod
    def restore(
        cls,
        context: SplitEnumeratorContext[KafkaPartitionSplit],
        options: KafkaOptions,
        cluster: DataCluster,
        state: Any,
    ) -> KafkaEnumerator:
        codec = KafkaSplitCodec()
        return cls(
            context,
            options,
            cluster,
            pending=[codec.from_wire(s) for s in state.get("pending", [])],
            known={(str(t), int(p)) for t, p in state.get("known", [])},
            first_done=bool(state.get("first_done", False)),
            removed={(str(t), int(p)) for t, p in state.get("removed", [])},
        )
