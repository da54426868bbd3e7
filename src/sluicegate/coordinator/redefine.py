"""Changing what a source is, on purpose (``sluicegate source redefine``).

A coordinator, reader or Spark query that brings another definition than the committed one
is refused (protocol/definition.py). To change it, this takes the coordinator's
transactional id, which fences the coordinator serving the old definition (as a
takeover does), and in one transaction rewrites the committed ``definition`` state part
and writes a ``SourceRedefined`` record to the inbox, so that the control log holds the
change and the audit shows it. Coordinators started with the new definition then serve
the source from its state; those with the old one are refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from sluicegate.coordinator.state_store import StateWriter, read_state
from sluicegate.kafka.clients import security_settings
from sluicegate.protocol.codec import encode, encode_key
from sluicegate.protocol.definition import SourceDefinition
from sluicegate.protocol.messages import SOURCE_WIDE, SourceRedefined, envelope
from sluicegate.protocol.names import coordinator_transactional_id
from sluicegate.protocol.topics import ControlTopics


class RedefineError(RuntimeError):
    """The source cannot be redefined (it has no committed state yet)."""


@dataclass(frozen=True)
class Redefinition:
    source: str
    previous: SourceDefinition | None
    definition: SourceDefinition

    @property
    def changed(self) -> bool:
        return self.previous is None or self.previous.fingerprint != self.definition.fingerprint


async def redefine_source(bootstrap: str, namespace: str, source: str, definition: SourceDefinition) -> Redefinition:
    topics = ControlTopics.for_source(source, namespace)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=coordinator_transactional_id(namespace, source),
        enable_idempotence=True,
        **security_settings(),
    )
    await producer.start()  # init_transactions: the serving coordinator is fenced from here on
    try:
        stored = await read_state(bootstrap, topics.coordinator_state, source)
        if stored is None:
            raise RedefineError(
                f"source {source} has no committed state in namespace {namespace}: "
                "start a coordinator with the definition you want instead"
            )
        previous_json = stored.parts.get("definition")
        previous = SourceDefinition.from_json(previous_json) if previous_json is not None else None
        result = Redefinition(source, previous, definition)
        if not result.changed:
            return result
        records = StateWriter.restored(source, stored).encode({"definition": definition.to_json()})
        record = envelope(
            SourceRedefined(definition=definition.to_json(), previous=previous_json),
            source=source,
            subtask=SOURCE_WIDE,
            attempt=None,
            epoch=0,
            ts=int(time.time() * 1000),
        )
        async with producer.transaction():
            for key, value in records:
                await producer.send(topics.coordinator_state, value, key=key, partition=0)
            await producer.send(topics.coordinator, encode(record), key=encode_key(SOURCE_WIDE), partition=0)
        return result
    finally:
        await producer.stop()
