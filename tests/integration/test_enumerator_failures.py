"""An enumerator that raises part-way through a step, over real Kafka: nothing of the
step is committed, that source alone restarts from its last commit and is offered the
record again, and a source beside it on the same worker is not disturbed."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
from aiokafka import AIOKafkaProducer
from processes import poll_until, readers_messages

from sluicegate.api import SplitEnumeratorContext
from sluicegate.connectors import load_source
from sluicegate.coordinator import source_runner
from sluicegate.coordinator.faust_app import SourceRunners
from sluicegate.coordinator.settings import CoordinatorSettings, SourceSettings
from sluicegate.coordinator.source_runner import RunnerState
from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol import ReaderRegistration, encode, envelope
from sluicegate.protocol.topics import topic_specs
from sluicegate_connectors.sequence import SequenceSource

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(90)]


class _FlakySource(SequenceSource):  # (mypy sees the installed connectors as Any)
    """``sequence`` whose enumerator hands a new reader its splits and then raises: the
    first time only (in any incarnation), as a transient bug would."""

    raised: ClassVar[bool] = False

    def create_enumerator(self, context: SplitEnumeratorContext[Any]) -> Any:
        return self._flaky(super().create_enumerator(context))

    def restore_enumerator(self, context: SplitEnumeratorContext[Any], checkpoint: Any) -> Any:
        return self._flaky(super().restore_enumerator(context, checkpoint))

    @staticmethod
    def _flaky(enumerator: Any) -> Any:
        add_reader = enumerator.add_reader

        def add_reader_then_raise_once(subtask: int) -> None:
            add_reader(subtask)
            if not _FlakySource.raised:
                _FlakySource.raised = True
                raise RuntimeError("a transient enumerator bug")

        enumerator.add_reader = add_reader_then_raise_once
        return enumerator


async def test_a_raising_step_is_not_committed_and_only_its_source_restarts(
    kafka_bootstrap: str, unique_source: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    flaky, steady = f"{unique_source}-flaky", f"{unique_source}-steady"
    steady_options = {"splits": "4", "records_per_split": "10"}
    flaky_options = {"splits": "4", "records_per_split": "11"}  # how the loader below tells them apart

    def loading(connector: str, opts: Mapping[str, str]) -> Any:
        return _FlakySource.from_options(opts) if opts == flaky_options else load_source(connector, opts)

    monkeypatch.setattr(source_runner, "load_source", loading)
    for name in (flaky, steady):
        await apply_topics(kafka_bootstrap, topic_specs("sluicegate", name, 2))
    settings = CoordinatorSettings(
        sources=(
            SourceSettings(source=flaky, connector="sequence", max_parallelism=2, options=flaky_options),
            SourceSettings(source=steady, connector="sequence", max_parallelism=2, options=steady_options),
        ),
        bootstrap_servers=kafka_bootstrap,
    )
    caplog.set_level(logging.ERROR, logger="sluicegate.coordinator")
    runners = SourceRunners(settings)
    runners.assigned = {flaky, steady}
    for name in (flaky, steady):
        runners._start(name)
    try:
        steady_runner = runners.runners[steady]
        await poll_until(lambda: _active(runners, flaky, steady), 30, "both coordinators serving")
        first_flaky_runner = runners.runners[flaky]
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            for name in (flaky, steady):
                await producer.send_and_wait(
                    f"sluicegate.{name}.coordinator", _registration(name), key=b"0", partition=0
                )
        finally:
            await producer.stop()

        async def restarted_and_assigned() -> list[dict[str, Any]]:
            runner = runners.runners.get(flaky)
            if runner is None or runner is first_flaky_runner or runner.state is not RunnerState.ACTIVE:
                return []
            return [m for m in await readers_messages(kafka_bootstrap, flaky) if m["type"] == "AddSplits"]

        added = await poll_until(restarted_and_assigned, 30, "the flaky source restarted and its reader given splits")
        messages = await readers_messages(kafka_bootstrap, flaky)
        registered = [m for m in messages if m["type"] == "ReaderRegistered"]
        # The failed step's ReaderRegistered and AddSplits were never committed: one of each.
        assert len(registered) == 1 and registered[0]["body"]["attempt"] == 1
        assert len(added) == 1 and added[0]["attempt"] == 1
        assert {s["split_id"] for s in added[0]["body"]["splits"]}, "no splits handed out"
        # The source beside it kept its runner and served its own reader.
        assert runners.runners[steady] is steady_runner and steady_runner.state is RunnerState.ACTIVE
        steady_added = [m for m in await readers_messages(kafka_bootstrap, steady) if m["type"] == "AddSplits"]
        assert steady_added
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(
            "RuntimeError: a transient enumerator bug" in e
            and "while handling ReaderRegistration from subtask 0" in e
            and "restarting its coordinator from the last commit in 1 s" in e
            for e in errors
        ), errors
    finally:
        for runner in list(runners.runners.values()):
            await runner.stop()


async def _active(runners: SourceRunners, *names: str) -> bool:
    return all(n in runners.runners and runners.runners[n].state is RunnerState.ACTIVE for n in names)


def _registration(source: str) -> bytes:
    body = ReaderRegistration(
        incarnation=str(uuid.uuid4()), location="test", reported_splits=[], restored_checkpoint_id=None
    )
    return encode(envelope(body, source=source, subtask=0, attempt=None, epoch=0, ts=int(time.time() * 1000)))
