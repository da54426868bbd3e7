"""What a source's dead-letter topic holds, read to its end."""

from __future__ import annotations

import time


def dead_letters(bootstrap: str, source: str) -> list[dict[str, str]]:
    """The headers of every record of the source's dead-letter topic."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from sluicegate.protocol.topics import ControlTopics

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "sluicegate-test-unused", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(ControlTopics.for_source(source).dead_letter, 0, 0)])
    found: list[dict[str, str]] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for message in consumer.consume(100, timeout=0.5):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    return found
                found.append({k: v.decode() for k, v in message.headers() or []})
    finally:
        consumer.close()
    raise AssertionError("could not read the dead-letter topic to its end")
