"""A reader written from docs/protocol.md alone: how to plug any reader into sluicegate.

``ForeignReader`` below uses aiokafka, orjson and jsonschema and nothing of the
sluicegate package except the JSON Schema files in src/sluicegate_topics/schemas, which it loads
by path (a reader in another language would do the same). It checks every record it
receives and every record it sends against ``envelope.schema.json`` and the schema
of the message type. What it does, in protocol order:

1. capture the end offset of partition ``s`` of ``NS.S.readers`` (read_committed),
   then send ``ReaderRegistration`` (attempt null) to ``NS.S.coordinator``, keyed by
   the subtask as a decimal string, and read its partition from that offset;
2. wait for the ``ReaderRegistered`` naming its incarnation: that is its attempt;
   from then on it ignores records for other attempts and from older epochs;
3. apply ``AddSplits`` / ``NoMoreSplits`` / ``ReleaseRequest`` in ``seq`` order
   (partition order is seq order; a seq at or below the applied one is skipped);
4. "read" each split from its ``position`` to its ``end`` (the sequence connector's
   split fields), report finished splits with ``SplitsFinished``, then acknowledge
   with ``CheckpointAck(applied_seq, remaining splits with positions)``, the splits a
   ``ReleaseRequest`` asked for moved to ``returned`` (it reads them no more). (A real
   reader acknowledges only once its output and state are durable);
5. heartbeat every ``heartbeat_interval_s`` and send ``RequestSplit`` when idle;
6. after ``NoMoreSplits`` with every split finished, send ``ReaderLeaving([])``.

A ``SplitsReleased`` with its own attempt as ``failed_attempt``, or a newer
registration of its subtask, means it was fenced; this small reader then stops
(a real one would drop its splits and register again).

The test runs it as subtask 0 of a bounded 2-subtask source next to a normal
sluicegate reader process (subtask 1); together they must read every value exactly
once, and the audit must find nothing wrong.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parents[2] / "src" / "sluicegate_topics" / "schemas"
PROTOCOL_VERSION = 2


class Fenced(Exception):
    """The coordinator failed this attempt."""


class Schemas:
    """The protocol's JSON Schemas, loaded by path."""

    def __init__(self, root: Path = SCHEMAS) -> None:
        self.envelope = Draft202012Validator(json.loads((root / "envelope.schema.json").read_text()))
        self.bodies = {
            (direction, path.name.removesuffix(".schema.json")): Draft202012Validator(json.loads(path.read_text()))
            for direction in ("to-coordinator", "to-reader")
            for path in (root / direction).glob("*.schema.json")
        }

    def check(self, direction: str, record: dict[str, Any]) -> None:
        """Raise jsonschema.ValidationError unless ``record`` is a valid message in ``direction``."""
        self.envelope.validate(record)
        self.bodies[(direction, record["type"])].validate(record["body"])


class ForeignReader:
    def __init__(
        self, bootstrap: str, source: str, subtask: int, ns: str = "sluicegate", heartbeat_interval_s: float = 0.5
    ) -> None:
        self.bootstrap = bootstrap
        self.source = source
        self.subtask = subtask
        self.inbox = f"{ns}.{source}.coordinator"
        self.readers = TopicPartition(f"{ns}.{source}.readers", subtask)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.schemas = Schemas()
        self.incarnation = str(uuid.uuid4())
        self.attempt: int | None = None
        self.epoch = 0
        """The highest coordinator epoch seen."""
        self.applied_seq = 0
        self.splits: dict[str, dict[str, Any]] = {}
        """Owned splits as on the wire: split_id, start, end, position."""
        self.releasing: set[str] = set()
        """Asked back by a ReleaseRequest: returned with the next CheckpointAck."""
        self.no_more_splits = False
        self.checkpoint_id = 0
        self.last_request_s = 0.0
        self.output: list[int] = []
        """The values read (the sink of this reader)."""
        self.received: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self._producer: AIOKafkaProducer | None = None

    # -- the wire -------------------------------------------------------------

    async def send(self, type_: str, body: dict[str, Any]) -> None:
        record = {
            "v": PROTOCOL_VERSION,
            "type": type_,
            "source": self.source,
            "subtask": self.subtask,
            "attempt": self.attempt if type_ != "ReaderRegistration" else None,
            "epoch": self.epoch,
            "ts": int(time.time() * 1000),
            "body": body,
        }
        self.schemas.check("to-coordinator", record)
        assert self._producer is not None
        await self._producer.send_and_wait(
            self.inbox, orjson.dumps(record), key=str(self.subtask).encode(), partition=0
        )
        self.sent.append(record)

    def on_record(self, raw: bytes) -> None:
        record = orjson.loads(raw)
        self.schemas.check("to-reader", record)
        self.received.append(record)
        if record["source"] != self.source or record["subtask"] != self.subtask or record["epoch"] < self.epoch:
            return
        self.epoch = record["epoch"]
        body = record["body"]
        if record["type"] == "ReaderRegistered":
            if body["incarnation"] == self.incarnation and self.attempt is None:
                self.attempt = body["attempt"]  # reported no splits, so nothing to drop
            elif self.attempt is not None and body["attempt"] > self.attempt:
                raise Fenced(f"incarnation {body['incarnation']} registered as attempt {body['attempt']}")
            return
        if self.attempt is None or record["attempt"] != self.attempt:
            return  # for another attempt of this subtask
        if record["type"] in ("AddSplits", "NoMoreSplits", "ReleaseRequest"):
            if body["seq"] <= self.applied_seq:
                return
            self.applied_seq = body["seq"]
            if record["type"] == "AddSplits":
                self.splits.update({split["split_id"]: dict(split) for split in body["splits"]})
            elif record["type"] == "ReleaseRequest":
                self.releasing.update(sid for sid in body["split_ids"] if sid in self.splits)
            else:
                self.no_more_splits = True
        elif record["type"] == "SplitsReleased" and body["failed_attempt"] == self.attempt:
            raise Fenced(f"attempt {self.attempt} failed: {body['reason']}")
        # WatermarkAnnouncement and SourceEvent: nothing to do for this reader

    # -- the work -------------------------------------------------------------

    async def read_a_little(self, batch: int = 100) -> None:
        """Read up to ``batch`` values of every owned split, then report and acknowledge."""
        if not self.splits:
            return
        finished = []
        for split_id, split in list(self.splits.items()):
            stop = min(split["end"], split["position"] + batch)
            self.output.extend(range(split["position"], stop))
            split["position"] = stop
            if stop >= split["end"]:
                finished.append(split_id)
                del self.splits[split_id]
        if finished:
            await self.send("SplitsFinished", {"split_ids": finished})
        returned = [self.splits.pop(sid) for sid in sorted(self.releasing) if sid in self.splits]
        self.releasing.clear()
        self.checkpoint_id += 1
        await self.send(
            "CheckpointAck",
            {
                "checkpoint_id": self.checkpoint_id,
                "applied_seq": self.applied_seq,
                "splits": list(self.splits.values()),
                "returned": returned,
            },
        )

    async def heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_s)
            if self.attempt is not None:
                await self.send("Heartbeat", {"watermark": None, "idle": not self.splits})

    @staticmethod
    async def stop_heartbeats(task: asyncio.Task[None]) -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def run(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=0)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False, isolation_level="read_committed"
        )
        await self._producer.start()
        await consumer.start()
        heartbeats = asyncio.create_task(self.heartbeats())
        try:
            consumer.assign([self.readers])
            consumer.seek(self.readers, (await consumer.end_offsets([self.readers]))[self.readers])
            await self.send(
                "ReaderRegistration",
                {
                    "incarnation": self.incarnation,
                    "location": socket.gethostname(),
                    "reported_splits": [],
                    "restored_checkpoint_id": None,
                },
            )
            while not (self.no_more_splits and not self.splits):
                batch = await consumer.getmany(self.readers, timeout_ms=100)
                for message in batch.get(self.readers, []):
                    self.on_record(message.value)
                if self.attempt is None:
                    continue
                await self.read_a_little()
                if not self.splits and not self.no_more_splits and time.monotonic() - self.last_request_s >= 1:
                    self.last_request_s = time.monotonic()
                    await self.send("RequestSplit", {"hostname": socket.gethostname()})
            await self.stop_heartbeats(heartbeats)  # nothing from this attempt after it left
            await self.send("ReaderLeaving", {"splits": []})
        finally:
            await self.stop_heartbeats(heartbeats)
            await consumer.stop()
            await self._producer.stop()


# -- the test: the harness around the foreign reader uses sluicegate -------------------

from processes import ProcessGroup, value_counts  # noqa: E402

from sluicegate.audit.commands import run_audit  # noqa: E402

SESSION = ("--session-timeout-ms", "3000")


@pytest.mark.kafka
@pytest.mark.timeout(120)
async def test_a_reader_written_from_the_protocol_alone_shares_a_source(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    splits, per_split = 10, 300
    options = {"splits": str(splits), "records_per_split": str(per_split)}
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        group.coordinator(unique_source, 2, options, *SESSION, "--reader-departure-timeout-ms", "5000")
        out = tmp_path / "reader-1.jsonl"
        normal = group.reader(
            unique_source, 1, {**options, "rate": "1000"}, out,
            *SESSION, "--checkpoint-interval-ms", "500", "--heartbeat-interval-ms", "500",
        )  # fmt: skip
        await normal.wait_for_log_async("registered as attempt 1", timeout_s=30)  # takes its fair share, 5 splits
        foreign = ForeignReader(kafka_bootstrap, unique_source, subtask=0)
        await asyncio.wait_for(foreign.run(), timeout=60)
        assert await normal.wait_async(60) == 0, normal.tail()
    finally:
        group.stop_all()

    assert foreign.attempt == 1
    types = Counter(r["type"] for r in foreign.received if r["attempt"] == foreign.attempt)
    assert types["ReaderRegistered"] == 1 and types["AddSplits"] >= 1 and types["NoMoreSplits"] == 1
    sent = Counter(r["type"] for r in foreign.sent)
    assert sent["SplitsFinished"] >= 1 and sent["CheckpointAck"] >= 1 and sent["ReaderLeaving"] == 1
    assert sent["Heartbeat"] >= 1 and sent["RequestSplit"] >= 1
    assert foreign.output, "the foreign reader was given no split"
    assert value_counts(out), "the sluicegate reader was given no split"

    counts = Counter(foreign.output) + value_counts(out)
    assert set(counts) == set(range(splits * per_split))
    assert max(counts.values()) == 1

    result = await run_audit(kafka_bootstrap, unique_source)
    assert result.ok, "\n".join(map(str, result.violations[:10]))
    summary = result.summary
    assert summary.splits_finished == splits and summary.splits_owned == 0
    assert summary.undecodable_total == 0
    by_subtask = {s.subtask: s for s in summary.subtasks}
    # (a split may have moved between the two readers part-way: cooperative rebalancing)
    finished = sum(len(r["body"]["split_ids"]) for r in foreign.sent if r["type"] == "SplitsFinished")
    assert by_subtask[0].attempts == 1 and by_subtask[0].finished == finished
    # nothing of the foreign reader was fenced (the sluicegate reader's last Heartbeat may race its ReaderLeaving)
    assert by_subtask[0].fenced_messages == 0
