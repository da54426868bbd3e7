"""Kafka's default partitioner over a column of keys, on both paths."""

from __future__ import annotations

import pyarrow as pa
import pytest
from aiokafka.partitioner import murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.kafka.partitioner import key_partitions, native_key_partitions, python_key_partitions

PATHS = [python_key_partitions, *([native_key_partitions] if key_partitions is native_key_partitions else [])]
"""The paths this machine has: python always, native where it is built (and then chosen)."""


JAVA_MURMUR2 = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536}
"""Kafka's own test of Utils.murmur2 (UtilsTest), as the Java client's signed ints."""


@pytest.mark.parametrize("path", PATHS)
def test_the_java_clients_partitions(path: object) -> None:
    assert all(murmur2(key) == value & 0xFFFFFFFF for key, value in JAVA_MURMUR2.items())
    keys = [*JAVA_MURMUR2, None]
    expected = [(value & 0x7FFFFFFF) % 7 for value in JAVA_MURMUR2.values()] + [None]
    assert path(pa.array(keys, pa.binary()), 7) == expected  # type: ignore[operator]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=50), st.integers(1, 1000))
def test_both_paths_agree_with_murmur2(keys: list[bytes | None], partitions: int) -> None:
    expected = [None if k is None else (murmur2(k) & 0x7FFFFFFF) % partitions for k in keys]
    for path in PATHS:
        assert path(pa.array(keys, pa.binary()), partitions) == expected


def test_the_native_path_is_built_where_cargo_is() -> None:
    if len(PATHS) == 1:
        pytest.skip("sluicegate._native with key_partitions is not built here")
    assert native_key_partitions in PATHS
