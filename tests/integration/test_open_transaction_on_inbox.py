"""A transaction left open on the coordinator's inbox (a reader SIGKILLed between sending
its checkpoint's ack and committing) holds every record after it, the live readers'
heartbeats included, until the broker aborts it: the coordinator must not time the live
readers out meanwhile. Found by the full suite: both readers of a recovery test were
failed 3 s after one of them was killed mid-checkpoint. Real processes, real Kafka."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from kafka_data import READER_TIMING, SHORT_SESSION
from processes import ProcessGroup

from sluicegate.protocol.topics import ControlTopics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

OPTIONS = {"splits": "2", "records_per_split": "unbounded", "rate": "200"}


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    yield group
    group.stop_all()


async def test_live_readers_outlast_a_transaction_left_open_on_the_inbox(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    procs.coordinator(unique_source, 2, OPTIONS, *SHORT_SESSION)
    reader = procs.reader(unique_source, 0, OPTIONS, tmp_path / "out.jsonl", *READER_TIMING)
    await reader.wait_for_log_async("checkpoint 3:", timeout_s=60)
    # what a reader of subtask 1 killed mid-checkpoint leaves: an open transaction on the inbox
    dead = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"sluicegate.{unique_source}.reader-1")
    await dead.start()
    try:
        await dead.begin_transaction()
        await (await dead.send(ControlTopics.for_source(unique_source).coordinator, b"an ack never committed"))
        held_from = time.monotonic()
        while time.monotonic() - held_from < 10.0:  # three session timeouts
            assert "fenced" not in reader.log(), f"a live reader was failed while the inbox was held:\n{reader.tail()}"
            time.sleep(0.5)
        await dead.abort_transaction()  # the broker's abort at the transaction timeout, sooner
    finally:
        await dead.stop()
    last = max(int(n) for n in re.findall(r"checkpoint (\d+):", reader.log()))
    await reader.wait_for_log_async(f"checkpoint {last + 5}:", timeout_s=30)  # reads on
    assert "fenced" not in reader.log(), reader.tail()
