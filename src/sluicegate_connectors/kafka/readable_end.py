"""How far a planning host (Spark's driver) lets a partition be read in a round, and what
an end it finds says about data loss: Spark's rules (KafkaMicroBatchStream,
KafkaOffsetReader), written once for every read path.

- A partition whose end is below the offset the query has read to was deleted and
  created again (or truncated): records may have been missed. A partition that is gone
  from the cluster (its topic deleted): the same. With ``fail_on_data_loss`` (Spark's
  ``failOnDataLoss``, the default) the query fails saying so; without, it is said once and
  the split reads on from the partition's new end (the end returned is below the offset
  read to: the host moves the split back to it), as Spark's source reads on from the end
  it finds. A partition that is gone waits where it is until it is back (Spark forgets it,
  and reads it from its start when it comes back: a partition missing from one metadata
  answer would be read twice).
- A ``Trigger.AvailableNow`` run reads what was there when it began: each partition to
  the end the run's first planning found (``now_ms``, the run's start, is the same for
  every planning of the run), never past it, whatever arrives since. An end that falls
  below it while the run goes on, or a partition that goes, fails the run whatever
  ``fail_on_data_loss`` says, as in Spark.
"""

from __future__ import annotations

import logging

from sluicegate.api.errors import SourceError, option_named

from .cluster import TopicPartitionKey

log = logging.getLogger("sluicegate.connectors.kafka")


class PartitionLostError(SourceError):
    """What a query was reading is no longer in the partition."""


class ReadableEnds:
    def __init__(self, fail_on_data_loss: bool) -> None:
        self.fail_on_data_loss = fail_on_data_loss
        self._run: tuple[int, dict[TopicPartitionKey, int]] = (-1, {})
        """The ends found at the first planning of each partition at one ``now_ms``: an
        AvailableNow run's. Only the last ``now_ms`` is kept (a processing-time stream
        asks at the current time, which never comes again)."""
        self._said: set[tuple[TopicPartitionKey, int, int | None]] = set()

    def end(self, key: TopicPartitionKey, position: int, found: int | None, gone: bool, now_ms: int) -> int:
        """Where the split of ``key`` at ``position`` can be read to now (exclusive): below
        ``position`` only for a partition created again, without fail_on_data_loss.
        ``found``: the partition's last stable offset (None: not known yet); ``gone``: the
        partition is not in the cluster's metadata."""
        run_end = self._run_end(key, found, now_ms)
        name = f"{key[0]}-{key[1]}"
        if gone:
            if run_end is not None:
                raise PartitionLostError(
                    f"{name} is gone from the data cluster (its topic deleted?) during a Trigger.AvailableNow run "
                    "that planned to read it: records may have been missed (Spark's own source fails so too)"
                )
            self._lost(key, position, None, f"{name} is gone from the data cluster (its topic deleted?)")
            return position
        if found is None:
            return position
        if run_end is not None and found < run_end:
            raise PartitionLostError(
                f"{name} ends at offset {found} now, before the end {run_end} this Trigger.AvailableNow run found when "
                "it began (its topic deleted and created again?): records may have been missed (Spark's own source "
                "fails so too)"
            )
        if found < position:
            self._lost(
                key,
                position,
                found,
                f"{name} ends at offset {found}, before offset {position} this query read to (its topic deleted and "
                "created again?)",
            )
            return found
        return found if run_end is None else run_end

    def _run_end(self, key: TopicPartitionKey, found: int | None, now_ms: int) -> int | None:
        at_ms, ends = self._run
        if at_ms != now_ms:
            ends = {}
            self._run = (now_ms, ends)
        if key not in ends and found is not None:
            ends[key] = found
        return ends.get(key)

    def _lost(self, key: TopicPartitionKey, position: int, found: int | None, what: str) -> None:
        """Fails the query, or says once where the split reads on."""
        if self.fail_on_data_loss:
            raise PartitionLostError(
                f"{what}: records may have been missed; set {option_named('fail_on_data_loss', 'false')} to read on"
            )
        if (key, position, found) not in self._said:
            self._said.add((key, position, found))
            where = "waits where it is" if found is None else f"reads on from offset {found}"
            log.warning("data loss: %s; the split %s (fail_on_data_loss=false)", what, where)
