"""The aiokafka clients every part of sluicegate builds, with the settings each role needs.

Every consumer reads ``read_committed`` (the control topics are written in
transactions) and never joins a group (partitions are assigned); every producer
is idempotent with ``acks=all``. Every client authenticates with the process's
KafkaSecurity (security.py) unless given other settings.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from sluicegate.kafka.security import KafkaSecurity, current_security


def security_settings(security: KafkaSecurity | None = None) -> dict[str, Any]:
    """aiokafka keyword arguments of ``security`` (default: the process's settings)."""
    return (security or current_security()).aiokafka_settings()


def control_consumer(
    bootstrap_servers: str, client_id: str, security: KafkaSecurity | None = None, **settings: Any
) -> AIOKafkaConsumer:
    """A read_committed consumer without a group: the caller assigns and seeks.
    ``settings`` add aiokafka settings or override these (larger fetches for big state
    records; ``isolation_level="read_uncommitted"`` for the log end offsets)."""
    chosen: dict[str, Any] = {"isolation_level": "read_committed", "auto_offset_reset": "earliest", **settings}
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        client_id=client_id,
        group_id=None,
        enable_auto_commit=False,
        **security_settings(security),
        **chosen,
    )


def plain_producer(bootstrap_servers: str, client_id: str, security: KafkaSecurity | None = None) -> AIOKafkaProducer:
    """For records that need no transaction (heartbeats, registrations, dead letters)."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        client_id=client_id,
        enable_idempotence=True,
        acks="all",
        linger_ms=0,
        **security_settings(security),
    )


TXN_BATCH_BYTES = 512 * 1024


def transactional_producer(
    bootstrap_servers: str,
    transactional_id: str,
    transaction_timeout_ms: int,
    security: KafkaSecurity | None = None,
    client_id: str | None = None,
) -> AIOKafkaProducer:
    """Starting it (init_transactions) fences any earlier producer of ``transactional_id``.
    ``client_id``: who it is in the broker's logs (default: ``<transactional_id>.txn``)."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        client_id=client_id or f"{transactional_id}.txn",
        transactional_id=transactional_id,
        enable_idempotence=True,
        acks="all",
        transaction_timeout_ms=transaction_timeout_ms,
        # A reader's records go out in batches it builds itself (reader/output.py): room for
        # thousands of records per request, under the broker's default 1 MiB message limit.
        max_batch_size=TXN_BATCH_BYTES,
        **security_settings(security),
    )


def end_offsets_consumer(
    bootstrap_servers: str, client_id: str, security: KafkaSecurity | None = None
) -> AIOKafkaConsumer:
    """A read_uncommitted consumer for end offsets only: the log end, records of
    transactions still open included (a read_committed consumer's end is the last stable
    offset, which stops before them)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        client_id=client_id,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_uncommitted",
        **security_settings(security),
    )
