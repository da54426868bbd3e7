"""Where the reading of a partition starts and stops: the offsets that ``starting_offsets``
and ``stopping_offsets`` name, resolved against the data cluster.

One rule for every host: the enumerator resolves them for the partitions it discovers,
and a batch read (``KafkaSource.batch_splits``) for the partitions it reads once.
"""

from __future__ import annotations

from collections.abc import Callable

from .cluster import DataCluster, TopicPartitionKey
from .options import EARLIEST, LATEST, KafkaOptions


def starting_offsets(
    cluster: DataCluster, options: KafkaOptions, partitions: list[TopicPartitionKey], first: bool
) -> dict[TopicPartitionKey, int]:
    """Each partition's first offset to read. ``first``: the partitions of a source's first
    discovery start where ``starting_offsets`` says; partitions found later start at their
    earliest offset, so nothing written to them is missed."""
    starting = options.starting
    if not partitions:
        return {}
    if not first or starting.kind == "earliest":
        return cluster.offsets(partitions, "earliest")
    if starting.kind == "latest":
        return cluster.offsets(partitions, "latest")
    if starting.kind in ("timestamp", "timestamps"):
        return offsets_at_times(cluster, partitions, starting.timestamp_of, "earliest")
    # a JSON map: its offsets, -2/-1 and unlisted partitions resolved
    out = cluster.offsets(partitions, "earliest")
    latest = [k for k in partitions if starting.per_partition.get(k) == LATEST]
    out.update(cluster.offsets(latest, "latest"))
    for key in partitions:
        given = starting.per_partition.get(key, EARLIEST)
        if given >= 0:
            out[key] = given
    return out


def stopping_offsets(
    cluster: DataCluster, options: KafkaOptions, partitions: list[TopicPartitionKey]
) -> dict[TopicPartitionKey, int]:
    """Each partition's stop offset (exclusive) of a bounded source."""
    stopping = options.stopping
    if stopping.kind == "timestamp":
        return offsets_at_times(cluster, partitions, lambda _: stopping.timestamp_ms, "latest")
    if stopping.kind == "timestamps":
        return offsets_at_times(cluster, partitions, stopping.per_partition.get, "latest")
    out = cluster.offsets(partitions, "latest")
    for key, given in stopping.per_partition.items():
        if key in out and given >= 0:
            out[key] = given
    return out


def offsets_at_times(
    cluster: DataCluster,
    partitions: list[TopicPartitionKey],
    timestamp_of: Callable[[TopicPartitionKey], int | None],
    unlisted: str,
) -> dict[TopicPartitionKey, int]:
    """Each partition's first offset at or after its timestamp (its end where there is no
    such record); a partition with no timestamp at ``unlisted`` (earliest or latest)."""
    by_time: dict[int, list[TopicPartitionKey]] = {}
    for key in partitions:
        ms = timestamp_of(key)
        if ms is not None:
            by_time.setdefault(ms, []).append(key)
    out = cluster.offsets([k for k in partitions if timestamp_of(k) is None], unlisted)
    for ms, keys in by_time.items():
        out.update(cluster.offsets(keys, ms))
    return out
