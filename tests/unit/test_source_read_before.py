"""A fresh Spark query of a named source warns that it continues where the source stands
only when the source was read before (issue 51 item 4: it warned when only a coordinator
had started, which creates the control topics and reads nothing). ``read_before`` judges
the committed state a coordinator leaves; here a real CoordinatorCore's."""

from __future__ import annotations

from typing import Any

import orjson
from core_harness import CoreHarness, sequence_source

from sluicegate.coordinator.embedded import read_before


def committed(h: CoreHarness) -> dict[str, Any]:
    parts: dict[str, Any] = orjson.loads(orjson.dumps(h.core.snapshot()))  # it is stored as JSON
    return parts


def test_a_source_is_read_before_once_a_reader_acknowledged_a_checkpoint() -> None:
    h = CoreHarness(sequence_source(splits=4), max_parallelism=2)
    h.start()
    assert not read_before(committed(h)), "a coordinator alone reads nothing"
    h.register(0)
    assert h.owned(0), "the reader holds splits, and has read none of them yet"
    assert not read_before(committed(h))
    h.ack(0)
    assert read_before(committed(h))
    h.leave(0)
    assert read_before(committed(h)), "its positions stay the source's after it left"
