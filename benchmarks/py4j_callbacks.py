"""What a call from the JVM into the driver's Python costs, by the size of its argument,
before and after ``CallbackNoDelay`` (what ``register(spark)`` applies for readPath=jvm).

    .venv/bin/python benchmarks/py4j_callbacks.py

Every planner call of the JVM read path is such a call, and carries an offset (a few KB
per hundred splits). Py4J writes a command through an 8 KB buffer; one longer than that
leaves as a full segment and a short tail, which Nagle's algorithm holds until the first
is acknowledged, and Linux delays that acknowledgement by up to 40 ms. In one session
(local[1], the JVM read path's jar in ``spark.jars``): 50 calls of a Python
``java.util.function.Function`` from the JVM per argument size, with Py4J's sockets as
they come, then the same after ``CallbackNoDelay.apply``; prints the median and the
slowest call of each.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

SIZES = (1_000, 4_000, 8_000, 10_000, 30_000, 100_000)
CALLS = 50


class Length:
    """A Python object the JVM calls: ``apply(s)`` returns ``len(s)`` as a string."""

    def apply(self, argument: str) -> str:
        return str(len(argument))

    class Java:
        implements = ["java.util.function.Function"]


def timed_calls(gateway: Any, size: int) -> list[float]:
    """ms per call of ``Optional.of(s).map(Length())`` from the JVM, ``s`` of ``size`` chars."""
    holder = gateway.jvm.java.util.Optional.of("x" * size)  # the argument crosses once, here
    function = Length()
    times = []
    for _ in range(CALLS):
        started = time.perf_counter()
        holder.map(function).get()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> int:
    from pyspark.java_gateway import ensure_callback_server_started
    from pyspark.sql import SparkSession

    from sluicegate.spark.jvm_classpath import jvm_read_path_jars

    jars = jvm_read_path_jars()
    if not jars:
        print("the JVM read path's jar is not built: make install")
        return 1
    spark = SparkSession.builder.master("local[1]").config("spark.jars", ",".join(jars)).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    gateway: Any = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    try:
        results: dict[str, dict[int, list[float]]] = {"as they come": {}, "CallbackNoDelay": {}}
        for size in SIZES:
            results["as they come"][size] = timed_calls(gateway, size)
        if not gateway.jvm.sluicegate.spark.jvm.CallbackNoDelay.apply(gateway.java_gateway_server):
            print("CallbackNoDelay did not apply (another Py4J)")
            return 1
        for size in SIZES:
            results["CallbackNoDelay"][size] = timed_calls(gateway, size)
    finally:
        spark.stop()
    print(f"\nms per call from the JVM into Python, {CALLS} calls each: median (slowest)\n")
    print(f"{'argument':>10} {'as they come':>20} {'CallbackNoDelay':>20}")
    for size in SIZES:
        cells = [results[k][size] for k in ("as they come", "CallbackNoDelay")]
        text = [f"{statistics.median(c):8.2f} ({max(c):6.1f})" for c in cells]
        print(f"{size:>8} B {text[0]:>20} {text[1]:>20}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
