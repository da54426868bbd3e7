"""A kafka source's lag in Kafka's own tools (issue 49 item 5, group_commits.py): with
``commit_offsets_to_group``, what a reader's durable checkpoints hold is committed to that
consumer group, and ``kafka-consumer-groups.sh --describe`` (run from the jars) shows
the source's positions and lag; the group is never read back."""

from __future__ import annotations

import pytest
from kafka_data import DataWriter, create_topic, kafka_options, start_coordinator, start_reader
from processes import ProcessGroup

from sluicegate.devtools.broker.tools import CONSUMER_GROUP_COMMAND, run_kafka_tool

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def _described(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(current offset, log end offset, lag) by partition, as kafka-consumer-groups.sh says."""
    done = run_kafka_tool(CONSUMER_GROUP_COMMAND, ["--bootstrap-server", bootstrap, "--describe", "--group", group])
    assert done.returncode == 0, done.stdout + done.stderr
    rows: dict[tuple[str, int], tuple[int, int, int]] = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group and cells[2].isdigit():
            rows[(cells[1], int(cells[2]))] = (int(cells[3]), int(cells[4]), int(cells[5]))
    return rows


def test_a_kafka_source_shows_its_positions_and_lag_in_kafka_consumer_groups(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    source = unique_source
    data, out = f"{source}.in", f"{source}.out"
    create_topic(kafka_bootstrap, data, 2)
    create_topic(kafka_bootstrap, out, 2)
    writer = DataWriter(kafka_bootstrap, data, 2)
    writer.produce(300)
    writer.flush()
    group = f"{source}.lag"
    options = kafka_options(kafka_bootstrap, topics=data, stopping_offsets="latest", commit_offsets_to_group=group)
    start_coordinator(procs, source, 1, options)
    reader = start_reader(procs, source, 0, options, out, "--checkpoint-interval-ms", "500")
    assert reader.wait(90) == 0, reader.tail()

    # Read to the end: every partition at its end, no lag.
    assert _described(kafka_bootstrap, group) == {(data, 0): (300, 300, 0), (data, 1): (300, 300, 0)}
    # Written after: the group shows it as lag, as for any consumer.
    writer.produce(50)
    writer.flush()
    assert _described(kafka_bootstrap, group) == {(data, 0): (300, 350, 50), (data, 1): (300, 350, 50)}
