"""Readers that coordinate their source themselves (issue 19 item 4, coordinator/embedded.py),
over real Kafka and real processes.

Three standalone readers of a rate-limited bounded source start with ``--coordinator
auto`` and nothing else: no coordinator deployed, no topics created. One of them sets the
source up and serves it. Then a deployed coordinator (``sluicegate coordinator``) starts
and takes the source over, fencing the reader's; then it is SIGKILLed, and a reader takes
the source back once the state topic has stood still for the silence. The readers never
register again, every value is read exactly once, and the audit of the control topics
(three epochs and more, one per handover) is clean. Apart, a reader that brings another
definition of the source is refused at start, naming the option.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from local_http import wait_until
from processes import Proc, ProcessGroup
from test_takeover import audit, audit_failure, expected_values, read_outputs, serving_epochs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

READERS = 3
SPLITS = 12
RECORDS_PER_SPLIT = 100
# 3 readers x 40 records/s read 1,200 values in ~10 s, splits released one per second: the
# handovers land while readers read and the coordinator assigns
OPTIONS = {
    "splits": str(SPLITS),
    "records_per_split": str(RECORDS_PER_SPLIT),
    "rate": "40",
    "release_interval_ms": "1000",
    "splits_per_release": "1",
}
SERVES_NOW = "this process coordinates it now"
STANDS_BY = "another coordinator serves it now; this process stands by"


def registrations(reader: Proc) -> list[int]:
    """The attempts the reader registered as (its own lines, not its coordinator's)."""
    return [int(m) for m in re.findall(r"sluicegate\.reader: registered as attempt (\d+)", reader.log())]


def serving(reader: Proc, source: str) -> bool:
    """Whether ``reader``'s own coordinator serves ``source`` now, by the last word of its log
    (readers that start together may each serve at once: the last to start fences the others)."""
    last = None
    for line in reader.log().splitlines():
        if f"source {source}:" in line and (SERVES_NOW in line or STANDS_BY in line):
            last = line
    return last is not None and SERVES_NOW in last


def test_readers_serve_their_source_until_a_deployed_coordinator_takes_over_and_after_it_dies(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    outputs = [tmp_path / f"reader-{k}.jsonl" for k in range(READERS)]
    auto = ("--coordinator", "auto", "--max-parallelism", str(READERS), "--checkpoint-interval-ms", "500")
    try:
        readers = [group.reader(source, k, OPTIONS, outputs[k], *auto) for k in range(READERS)]
        for reader in readers:
            reader.wait_for_log("sluicegate.reader: registered as attempt 1", timeout_s=60)
        wait_until(lambda: sum(serving(r, source) for r in readers) == 1, 30, "one reader to serve the source")
        for reader in readers:
            reader.wait_for_log("checkpoint 2:", timeout_s=60)

        deployed = group.coordinator(source, READERS, OPTIONS)  # waits until it serves
        epoch = serving_epochs(deployed, source)
        assert epoch and epoch[0] >= 2, deployed.tail()
        wait_until(lambda: not any(serving(r, source) for r in readers), 30, "the readers' coordinator to stand by")

        deployed.kill()
        wait_until(
            lambda: any(re.search(rf"source {source}: no coordinator committed for", r.log()) for r in readers),
            30,
            "a reader to take the source back after the silence",
        )
        for k, reader in enumerate(readers):
            assert reader.wait(120) == 0, f"reader {k}:\n{reader.tail()}"
        for k, reader in enumerate(readers):
            assert registrations(reader) == [1], f"reader {k} registered again:\n{reader.tail()}"
    finally:
        group.stop_all()

    counts = read_outputs(outputs)
    expected = expected_values(SPLITS, RECORDS_PER_SPLIT)
    assert set(counts) == expected, f"{len(expected - set(counts))} values never read"
    duplicated = {key: n for key, n in counts.items() if n > 1}
    assert not duplicated, f"{len(duplicated)} values read twice, e.g. {sorted(duplicated)[:5]}"
    result = audit(kafka_bootstrap, source)
    assert result.ok, audit_failure(result)
    # the deployed one (epoch 2) may have sent nothing to the readers before its kill
    assert result.summary.epochs[0] == 1 and result.summary.epochs[-1] >= 3, result.summary.epochs
    assert result.summary.splits_finished == SPLITS


def test_a_reader_that_brings_another_definition_is_refused_at_start(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    auto = ("--coordinator", "auto", "--max-parallelism", "1")
    try:
        first = group.reader(unique_source, 0, OPTIONS, tmp_path / "first.jsonl", *auto)
        first.wait_for_log("sluicegate.reader: registered as attempt 1", timeout_s=60)
        other = group.reader(unique_source, 0, {**OPTIONS, "splits": "13"}, tmp_path / "other.jsonl", *auto)
        assert other.wait(60) == 2, other.tail()
    finally:
        group.stop_all()
    assert "option splits: 12 (source) vs 13 (given)" in other.log(), other.tail()
