"""A broker outage must read as a few lines a minute, not aiokafka's thousands."""

from __future__ import annotations

import logging

from sluicegate.kafka.log_repeats import RepeatFilter, quiet_repeats


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def passed(filter_: RepeatFilter, name: str, msg: str, *args: object, level: int = logging.ERROR) -> str | None:
    record = logging.LogRecord(name, level, __file__, 1, msg, args, None)
    return record.getMessage() if filter_.filter(record) else None


def test_a_repeated_pattern_passes_once_a_window_with_the_count_held_back() -> None:
    clock = Clock()
    repeats = RepeatFilter(window_s=30, clock=clock)
    shown = []
    for i in range(1000):  # one connection attempt every 60 ms for a minute, to two nodes
        clock.now = i * 0.06
        line = passed(repeats, "aiokafka.conn", "Unable connect to node with id %s: %s", i % 2, "refused")
        if line is not None:
            shown.append(line)
    assert shown == [
        "Unable connect to node with id 0: refused",
        "Unable connect to node with id 0: refused (499 more like this in the last 30 s)",
    ]


def test_other_patterns_levels_and_loggers_are_not_held_back() -> None:
    clock = Clock()
    repeats = RepeatFilter(clock=clock)
    assert passed(repeats, "aiokafka.conn", "Unable connect to node %s", 1) is not None
    assert passed(repeats, "aiokafka.conn", "Unable connect to node %s", 2) is None  # same pattern
    assert passed(repeats, "aiokafka.conn", "Unable connect to node %s", 2, level=logging.WARNING) is not None
    assert passed(repeats, "aiokafka.client", "Unable connect to node %s", 2) is not None
    assert passed(repeats, "aiokafka.conn", "Connection reset") is not None
    for _ in range(5):
        assert passed(repeats, "sluicegate.reader", "checkpoint %d committed", 1) is not None


def test_quiet_repeats_filters_child_loggers_through_the_handlers() -> None:
    parent = logging.getLogger("aiokafka")
    handler = logging.Handler()
    seen: list[str] = []
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    parent.addHandler(handler)
    try:
        quiet_repeats(parent)
        quiet_repeats(parent)  # once is enough
        assert sum(isinstance(f, RepeatFilter) for f in handler.filters) == 1
        for _ in range(100):
            logging.getLogger("aiokafka.conn").error("Unable connect to node %s", 1)
        assert seen == ["Unable connect to node 1"]
    finally:
        parent.removeHandler(handler)
