"""A transaction left open on the coordinator's inbox (a reader SIGKILLed between sending
its checkpoint's ack and committing) holds every record after it, the live readers'
heartbeats included, until it ends: the coordinator must not time the live readers out
meanwhile (found by the full suite: both readers of a recovery test were failed 3 s after
one of them was killed mid-checkpoint), and it ends the transaction itself after a session
timeout by fencing the reader that opened it (coordinator/open_transaction.py), where the
broker would take its transaction timeout (60 s and more). Real processes, real Kafka."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from kafka_data import READER_TIMING, SHORT_SESSION
from processes import ProcessGroup

from sluicegate.protocol.codec import encode_key
from sluicegate.protocol.names import reader_transactional_id
from sluicegate.protocol.topics import ControlTopics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

OPTIONS = {"splits": "2", "records_per_split": "unbounded", "rate": "200"}


@pytest.fixture
def procs(tmp_path: Path, kafka_bootstrap: str) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    yield group
    group.stop_all()


async def test_live_readers_outlast_a_transaction_left_open_on_the_inbox_which_the_coordinator_ends(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    coordinator = procs.coordinator(unique_source, 2, OPTIONS, *SHORT_SESSION)
    reader = procs.reader(unique_source, 0, OPTIONS, tmp_path / "out.jsonl", *READER_TIMING)
    await reader.wait_for_log_async("checkpoint 3:", timeout_s=60)
    # what a reader of subtask 1 killed mid-checkpoint leaves: an open transaction on the inbox
    holder = reader_transactional_id("sluicegate", unique_source, 1)
    dead = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=holder)
    await dead.start()
    try:
        await dead.begin_transaction()
        inbox = ControlTopics.for_source(unique_source).coordinator
        await (await dead.send(inbox, b"an ack never committed", key=encode_key(1)))
        held_from = time.monotonic()
        ended = "ended the transaction that held the inbox"
        while not coordinator.lines_with(ended):
            assert "fenced" not in reader.log(), f"a live reader was failed while the inbox was held:\n{reader.tail()}"
            assert time.monotonic() - held_from < 20.0, f"the transaction was not ended:\n{coordinator.tail()}"
            await asyncio.sleep(0.2)
        ended_after_s = time.monotonic() - held_from
        assert coordinator.lines_with(f"fencing {holder} to end it"), coordinator.tail()
        with pytest.raises(KafkaError):  # its producer was fenced: the zombie cannot commit
            await dead.commit_transaction()
    finally:
        await dead.stop()
    assert ended_after_s >= 3.0, "not before a session timeout"
    last = max(int(n) for n in re.findall(r"checkpoint (\d+):", reader.log()))
    await reader.wait_for_log_async(f"checkpoint {last + 5}:", timeout_s=30)  # reads on
    assert "fenced" not in reader.log(), reader.tail()
