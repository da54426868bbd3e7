"""ctypes wrapper of libscb.so: ``CRangeReader.read`` is ``RangeReader.read`` (sluicegate_connectors/kafka/ranges.py)
with the records going from librdkafka into Arrow buffers in C, one ArrowArray per batch
through the Arrow C Data Interface: no Python object per record.

A prototype for measurement (issue 18, design B), not part of the product: build it with
``build.sh`` first. Gaps next to ``RangeReader``: headers are not read (the column is all
null, as the Python path's is when no record has headers), no data-loss handling
(``fail_on_data_loss=false``), librdkafka's log goes to stderr (the logger / error_cb
callbacks are not set).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

HERE = Path(__file__).resolve().parent
ERRLEN = 1024
#: confluent-kafka settings that are Python objects (log routing), not librdkafka properties
PYTHON_ONLY = {"logger", "error_cb", "stats_cb", "throttle_cb", "oauth_cb", "on_commit"}


class ArrowArray(ctypes.Structure):
    _fields_ = [
        ("length", ctypes.c_int64),
        ("null_count", ctypes.c_int64),
        ("offset", ctypes.c_int64),
        ("n_buffers", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("buffers", ctypes.c_void_p),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


class ArrowSchema(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_char_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("consume_ns", ctypes.c_int64),
        ("build_ns", ctypes.c_int64),
        ("consume_calls", ctypes.c_int64),
        ("messages", ctypes.c_int64),
    ]


def load(variant: str = "wheel") -> ctypes.CDLL:
    """libscb.so (linked to confluent-kafka's librdkafka) or libscb-debian.so (Debian's)."""
    if variant == "wheel":
        # the same librdkafka the Python path uses: import confluent_kafka first so that its
        # copy is the one already mapped (the .so's rpath points at the same file anyway)
        import confluent_kafka  # noqa: F401

        path = HERE / "libscb.so"
    else:
        path = HERE / "libscb-debian.so"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: run {HERE / 'build.sh'} first")
    lib = ctypes.CDLL(str(path))
    lib.scb_librdkafka_version.restype = ctypes.c_char_p
    lib.scb_export_schema.argtypes = [ctypes.POINTER(ArrowSchema)]
    lib.scb_new.restype = ctypes.c_void_p
    lib.scb_new.argtypes = [
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.scb_assign.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_int32,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.scb_unassign.argtypes = [ctypes.c_void_p]
    lib.scb_next_batch.restype = ctypes.c_int64
    lib.scb_next_batch.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int,
        ctypes.POINTER(ArrowArray),
        ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(Stats),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.scb_destroy.argtypes = [ctypes.c_void_p]
    return lib


def _setting(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class Breakdown:
    consume_s: float = 0.0
    build_s: float = 0.0
    import_s: float = 0.0  # _import_from_c + the topic/partition/headers columns, in Python
    consume_calls: int = 0
    messages: int = 0


class CRangeReader:
    """One librdkafka consumer (kept, as ``shared_consumer``) reading ranges into Arrow in C."""

    def __init__(self, config: dict[str, Any], variant: str = "wheel", chunk: int = 1000) -> None:
        self.lib = load(variant)
        self.librdkafka_version = self.lib.scb_librdkafka_version().decode()
        settings = {k: _setting(v) for k, v in config.items() if k not in PYTHON_ONLY and not callable(v)}
        keys = (ctypes.c_char_p * len(settings))(*[k.encode() for k in settings])
        vals = (ctypes.c_char_p * len(settings))(*[v.encode() for v in settings.values()])
        err = ctypes.create_string_buffer(ERRLEN)
        self._r = self.lib.scb_new(keys, vals, len(settings), chunk, err, ERRLEN)
        if not self._r:
            raise RuntimeError(f"scb_new: {err.value.decode()}")
        c_schema = ArrowSchema()
        if self.lib.scb_export_schema(ctypes.byref(c_schema)) != 0:
            raise MemoryError("scb_export_schema")
        self.c_schema = pa.Schema._import_from_c(ctypes.addressof(c_schema))
        self.stats = Stats()
        self.import_s = 0.0

    @classmethod
    def for_options(cls, options: Any, variant: str = "wheel", drop: tuple[str, ...] = ()) -> CRangeReader:
        """The consumer ``shared_consumer(options)`` would make (fetch.wait.max.ms=10 unless set),
        less the ``drop`` settings (Debian's librdkafka 2.0.2 has no fetch.queue.backoff.ms)."""
        config = {"fetch.wait.max.ms": 10, **options.consumer_config()}
        return cls({k: v for k, v in config.items() if k not in drop}, variant)

    def breakdown(self) -> Breakdown:
        s = self.stats
        return Breakdown(s.consume_ns / 1e9, s.build_ns / 1e9, self.import_s, s.consume_calls, s.messages)

    def reset_stats(self) -> None:
        self.stats = Stats()
        self.import_s = 0.0

    def read(self, split: Any, start: int, end: int, max_rows: int, timeout_ms: int = 60_000) -> Iterator[Any]:
        """Arrow record batches of ``arrow_schema()`` (ranges.py), at most ``max_rows`` rows each."""
        from sluicegate_connectors.kafka.ranges import arrow_schema

        if end <= start:
            return
        import time

        schema = arrow_schema()
        headers_type = schema.field("headers").type
        topic = pa.scalar(split.topic, pa.string())
        partition = pa.scalar(split.partition, pa.int32())
        err = ctypes.create_string_buffer(ERRLEN)
        lib, r = self.lib, self._r
        if lib.scb_assign(r, split.topic.encode(), split.partition, start, end, err, ERRLEN) != 0:
            raise RuntimeError(err.value.decode())
        position = ctypes.c_int64(start)
        try:
            while True:
                c_array = ArrowArray()
                n = lib.scb_next_batch(
                    r, max_rows, timeout_ms, ctypes.byref(c_array), ctypes.byref(position), ctypes.byref(self.stats),
                    err, ERRLEN,
                )  # fmt: skip
                if n == 0:
                    return
                if n == -2:
                    raise TimeoutError(f"{split.split_id}: {err.value.decode()}")
                if n < 0:
                    raise RuntimeError(f"{split.split_id}: {err.value.decode()}")
                t0 = time.perf_counter()
                part = pa.RecordBatch._import_from_c(ctypes.addressof(c_array), self.c_schema)
                batch = pa.RecordBatch.from_arrays(
                    [
                        part.column(0),
                        part.column(1),
                        pa.repeat(topic, n),
                        pa.repeat(partition, n),
                        part.column(2),
                        part.column(3),
                        part.column(4),
                        pa.nulls(n, headers_type),
                    ],
                    schema=schema,
                )
                self.import_s += time.perf_counter() - t0
                yield batch
        finally:
            lib.scb_unassign(r)

    def close(self) -> None:
        if self._r:
            self.lib.scb_destroy(self._r)
            self._r = None


if os.environ.get("SCB_SELFTEST"):  # pragma: no cover - a quick look: SCB_SELFTEST=1 python scb.py
    print(load().scb_librdkafka_version().decode())
