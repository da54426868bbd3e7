"""Kafka's default partitioner over a column of keys: murmur2 of the key, positive,
modulo the partition count (the Java client's rule, so a record lands where any other
producer would put it).

Native (``sluicegate._native.key_partitions``, native/src/partitioner.rs) when built:
in Python, murmur2 costs ~4.6 µs a key, more than everything else of writing a record;
else aiokafka's murmur2, key by key. tests/unit/test_partitioner.py holds both to the
same answers.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from aiokafka.partitioner import murmur2


def python_key_partitions(keys: pa.Array, partitions: int) -> list[int | None]:
    return [None if key is None else (murmur2(key) & 0x7FFFFFFF) % partitions for key in keys.to_pylist()]


def native_key_partitions(keys: pa.Array, partitions: int) -> list[int | None]:
    from sluicegate._native import key_partitions

    result: list[int | None] = key_partitions(keys.cast(pa.binary()), partitions).to_pylist()
    return result


def _chosen() -> Callable[[pa.Array, int], list[int | None]]:
    try:
        from sluicegate._native import LIBRDKAFKA_VERSION  # noqa: F401
    except ImportError:
        return python_key_partitions
    return native_key_partitions


key_partitions = _chosen()
"""The partition of each key (None for a null key), on the native path when it is built."""
