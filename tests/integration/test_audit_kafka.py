"""The audit against a real broker: a CoordinatorCore's output written the way the
coordinator writes it (one Kafka transaction per step, inbox offsets from the
broker), an aborted transaction that must stay invisible, then a violation."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest
import typer
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from typer.testing import CliRunner

from sluicegate.audit import ViolationKind, topic_names
from sluicegate.audit.commands import audit_command, run_audit
from sluicegate.audit.kafka_source import MissingTopicsError, read_control_topics
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.core import CoordinatorCore, Effects
from sluicegate.protocol import (
    AddSplits,
    Body,
    CheckpointAck,
    Direction,
    Envelope,
    Heartbeat,
    ReaderRegistered,
    ReaderRegistration,
    RequestSplit,
    SplitsFinished,
    SplitsReleased,
    decode,
    encode,
    encode_key,
    envelope,
)
from sluicegate.testing.core_harness import fences_done_at_once
from sluicegate_connectors.sequence import SequenceSource

pytestmark = pytest.mark.kafka

PARALLELISM = 4
SPLITS = 20


async def create_topics(bootstrap: str, source: str) -> tuple[str, str]:
    inbox, readers = topic_names(source)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(inbox, num_partitions=1, replication_factor=1),
                NewTopic(readers, num_partitions=PARALLELISM, replication_factor=1),
            ]
        )
    finally:
        await admin.close()
    return inbox, readers


class KafkaRun:
    """Drives a CoordinatorCore like its host does: reader records go to the inbox
    first (their broker offsets feed the core), each step's output is one transaction."""

    def __init__(self, bootstrap: str, source: str, inbox_topic: str, readers_topic: str) -> None:
        self.bootstrap = bootstrap
        self.source_name = source
        self.inbox_topic = inbox_topic
        self.readers_topic = readers_topic
        self.source = SequenceSource.from_options({"splits": str(SPLITS), "records_per_split": "5"})
        self.config = CoordinatorConfig(source, PARALLELISM, session_timeout_ms=10_000)
        self.core: CoordinatorCore[Any] = CoordinatorCore(self.source, self.config, epoch=1)
        self.epoch = 1
        self.now = 1_000
        self.inbox_offsets: list[int] = []
        self.committed: list[tuple[int, int]] = []
        """(partition, offset) of every committed readers-topic record."""
        self.last_inbox_offset: int | None = None
        self.attempt: dict[int, int | None] = dict.fromkeys(range(PARALLELISM))
        self.seq: dict[int, int] = dict.fromkeys(range(PARALLELISM), 0)
        self.held: dict[int, dict[str, dict[str, Any]]] = {s: {} for s in range(PARALLELISM)}
        self.epoch_seen = 0
        self.inbox_producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"audit-test-{uuid.uuid4()}")

    async def __aenter__(self) -> KafkaRun:
        await self.inbox_producer.start()
        await self.producer.start()
        await self._commit(self.core.start(self.now))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()
        await self.inbox_producer.stop()

    async def _commit(self, effects: Effects) -> None:
        if not effects.messages:
            return
        futures = []
        async with self.producer.transaction():
            for env in effects.messages:
                futures.append(
                    await self.producer.send(
                        self.readers_topic,
                        encode(env),
                        key=encode_key(env.subtask),
                        partition=env.subtask,
                    )
                )
        for env, future in zip(effects.messages, futures, strict=True):
            meta = await future
            self.committed.append((meta.partition, meta.offset))
            self._reader_sees(env)

    def _reader_sees(self, env: Envelope) -> None:
        s, body = env.subtask, env.body
        self.epoch_seen = max(self.epoch_seen, env.epoch)
        if isinstance(body, ReaderRegistered):
            self.attempt[s] = body.attempt
        elif env.attempt != self.attempt[s]:
            return
        elif isinstance(body, AddSplits):
            self.seq[s] = max(self.seq[s], body.seq)
            for split in body.splits:
                self.held[s][split["split_id"]] = dict(split)
        elif isinstance(body, SplitsReleased):
            for sid in body.split_ids:
                self.held[s].pop(sid, None)
            if body.failed_attempt == self.attempt[s]:
                self.attempt[s] = None
                self.held[s].clear()

    async def send(self, subtask: int, body: Body, attempt: int | None = None) -> None:
        if attempt is None and not isinstance(body, ReaderRegistration):
            attempt = self.attempt[subtask]
        env = envelope(
            body,
            source=self.source_name,
            subtask=subtask,
            attempt=attempt,
            epoch=self.epoch_seen,
            ts=self.now,
        )
        raw = encode(env)
        meta = await self.inbox_producer.send_and_wait(self.inbox_topic, raw, key=encode_key(subtask), partition=0)
        self.inbox_offsets.append(meta.offset)
        self.last_inbox_offset = meta.offset
        decoded = decode(raw, Direction.TO_COORDINATOR)
        await self._commit(self.core.on_message(decoded, meta.offset, self.now))

    async def advance(self, ms: int) -> None:
        self.now += ms
        await self._commit(fences_done_at_once(self.core, self.core.tick(self.now), self.now))

    async def restart(self) -> None:
        snapshot = orjson.loads(orjson.dumps(self.core.snapshot()))
        self.epoch += 1
        self.core = CoordinatorCore(self.source, self.config, epoch=self.epoch, snapshot=snapshot)
        await self._commit(self.core.start(self.now))

    async def register(self, subtask: int) -> None:
        await self.send(subtask, ReaderRegistration(str(uuid.uuid4()), "host", [], None))

    async def ack(self, subtask: int, checkpoint_id: int) -> None:
        splits = list(self.held[subtask].values())
        await self.send(subtask, CheckpointAck(checkpoint_id, self.seq[subtask], splits))

    async def finish(self, subtask: int, count: int | None = None) -> None:
        ids = sorted(self.held[subtask])[:count]
        for sid in ids:
            self.held[subtask].pop(sid)
        await self.send(subtask, SplitsFinished(ids))

    async def aborted_bogus_add_splits(self) -> int:
        """An AddSplits that would break every rule, in a transaction that is aborted."""
        bogus = envelope(
            AddSplits(1, [{"split_id": "seq-00000", "start": 0, "end": 5, "position": 0}]),
            source=self.source_name,
            subtask=0,
            attempt=99,
            epoch=0,
            ts=self.now,
            cseq=1,
            inbox_offset=0,
        )
        await self.producer.begin_transaction()
        future = await self.producer.send(self.readers_topic, encode(bogus), key=encode_key(0), partition=0)
        meta = await future
        await self.producer.abort_transaction()
        return int(meta.offset)

    async def commit_raw(self, env: Envelope) -> tuple[int, int]:
        async with self.producer.transaction():
            future = await self.producer.send(
                self.readers_topic, encode(env), key=encode_key(env.subtask), partition=env.subtask
            )
        meta = await future
        return meta.partition, meta.offset


async def write_history(run: KafkaRun) -> int:
    """Registrations, acks, a fence, an aborted transaction, a session timeout, a
    coordinator restart, and every split finished. Returns the aborted record's offset."""
    for s in range(PARALLELISM):
        await run.register(s)
    aborted_offset = await run.aborted_bogus_add_splits()
    for s in range(PARALLELISM):
        await run.send(s, Heartbeat(1_000 + s, False))
    await run.advance(500)
    for s in range(PARALLELISM):
        await run.ack(s, 1)
    await run.finish(0, 2)
    old = run.attempt[1]
    await run.register(1)
    await run.send(1, Heartbeat(9_000, False), attempt=old)  # fenced
    for _ in range(6):  # subtask 3 stays silent and times out
        await run.advance(2_000)
        for s in (0, 1, 2):
            await run.send(s, Heartbeat(run.now, False))
    await run.restart()
    await run.register(3)
    for _ in range(8):
        for s in range(PARALLELISM):
            if run.held[s]:
                await run.finish(s)
            else:
                await run.send(s, RequestSplit(None))
        await run.advance(1_000)
    return aborted_offset


async def test_audit_of_a_committed_history_then_a_violation(kafka_bootstrap: str, unique_source: str) -> None:
    inbox_topic, readers_topic = await create_topics(kafka_bootstrap, unique_source)
    async with KafkaRun(kafka_bootstrap, unique_source, inbox_topic, readers_topic) as run:
        aborted_offset = await write_history(run)

        inbox, readers = await read_control_topics(kafka_bootstrap, unique_source)
        assert [o for o, _ in inbox] == run.inbox_offsets
        assert sorted((p, o) for p, o, _ in readers) == sorted(run.committed)
        assert (0, aborted_offset) not in {(p, o) for p, o, _ in readers}

        result = await run_audit(kafka_bootstrap, unique_source, "sluicegate")
        assert result.ok, [str(v) for v in result.violations]
        summary = result.summary
        assert summary.splits_assigned == SPLITS
        assert summary.splits_finished == SPLITS
        assert summary.splits_owned == 0
        assert summary.inbox_records == len(run.inbox_offsets)
        assert summary.readers_records == len(run.committed)
        assert summary.undecodable_total == 0
        assert summary.epochs == [1, 2]
        assert summary.fenced_messages >= 1
        assert "session-timeout" in summary.released_by_reason
        assert summary.messages_by_type["readers:NoMoreSplits"] >= 1

        # now a coordinator bug: subtask 2 is sent a seq it already had
        assert run.attempt[2] is not None
        bad = envelope(
            AddSplits(run.seq[2], [{"split_id": "extra", "start": 0, "end": 1, "position": 0}]),
            source=unique_source,
            subtask=2,
            attempt=run.attempt[2],
            epoch=run.epoch,
            ts=run.now,
            cseq=run.core.cseq + 1,
            inbox_offset=run.last_inbox_offset,
        )
        partition, offset = await run.commit_raw(bad)

    result = await run_audit(kafka_bootstrap, unique_source, "sluicegate")
    assert not result.ok
    first = result.first_violation
    assert first is not None
    assert first.kind is ViolationKind.SEQ_REUSED
    assert (first.location.topic, first.location.partition, first.location.offset) == (
        readers_topic,
        partition,
        offset,
    )
    assert f"partition {partition} offset {offset}" in str(first)


async def test_missing_topics_are_named(kafka_bootstrap: str, unique_source: str) -> None:
    with pytest.raises(MissingTopicsError) as info:
        await read_control_topics(kafka_bootstrap, unique_source)
    inbox_topic, readers_topic = topic_names(unique_source)
    assert inbox_topic in str(info.value) and readers_topic in str(info.value)


def test_audit_command_exit_codes(kafka_bootstrap: str, unique_source: str) -> None:
    app = typer.Typer()
    app.command("audit")(audit_command)
    app.command("noop")(lambda: None)  # keep "audit" a subcommand
    runner = CliRunner()

    missing = runner.invoke(app, ["audit", "--source", unique_source, "-b", kafka_bootstrap])
    assert missing.exit_code == 2
    assert topic_names(unique_source)[0] in missing.output

    async def write() -> tuple[int, int]:
        inbox_topic, readers_topic = await create_topics(kafka_bootstrap, unique_source)
        async with KafkaRun(kafka_bootstrap, unique_source, inbox_topic, readers_topic) as run:
            for s in range(PARALLELISM):
                await run.register(s)
            await run.send(0, Heartbeat(5, False))
            await run.advance(100)
            ok_json = runner_json(runner, app, unique_source, kafka_bootstrap)
            assert ok_json["ok"] is True
            assert ok_json["summary"]["splits_assigned"] == SPLITS
            bad = envelope(
                ReaderRegistered("x", 1),  # attempt 1 again: attempts must increase
                source=unique_source,
                subtask=3,
                attempt=1,
                epoch=1,
                ts=run.now,
                cseq=run.core.cseq + 1,
                inbox_offset=run.last_inbox_offset,
            )
            return await run.commit_raw(bad)

    partition, offset = asyncio.run(write())
    failed = runner.invoke(app, ["audit", "--source", unique_source, "-b", kafka_bootstrap])
    assert failed.exit_code == 1, failed.output
    assert f"partition {partition} offset {offset}" in failed.output
    as_json = runner.invoke(app, ["audit", "--source", unique_source, "-b", kafka_bootstrap, "--json"])
    assert as_json.exit_code == 1
    data = orjson.loads(as_json.stdout)
    assert data["ok"] is False
    assert (data["violations"][0]["partition"], data["violations"][0]["offset"]) == (
        partition,
        offset,
    )


def runner_json(runner: CliRunner, app: typer.Typer, source: str, bootstrap: str) -> Any:
    """Run ``audit --json`` in a worker thread (the caller's event loop is busy)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = pool.submit(runner.invoke, app, ["audit", "--source", source, "-b", bootstrap, "--json"]).result()
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)
