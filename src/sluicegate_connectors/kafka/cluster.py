"""Metadata and offsets of the data cluster, through librdkafka's admin client.

Blocking calls: the enumerator runs them off the coordinator loop
(``context.call_async``), the Spark driver while it plans a batch. Offsets are
asked for ``read_committed``, so a partition's end is its last stable offset:
a reader never waits for records of an open transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .options import KafkaOptions

log = logging.getLogger("sluicegate.connectors.kafka")

TopicPartitionKey = tuple[str, int]


class DataClusterError(RuntimeError):
    """The data cluster did not answer, or refused; the message says which cluster and why."""


class DataCluster:
    def __init__(self, options: KafkaOptions, timeout_s: float = 10.0) -> None:
        self.options = options
        self.timeout_s = timeout_s
        self._admin: AdminClient | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            config = self.options.client_config()
            self._admin = AdminClient(config)
        return self._admin

    def _fail(self, what: str, exc: BaseException) -> DataClusterError:
        reason = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
        return DataClusterError(f"{what} on the data cluster at {self.options.bootstrap_servers} failed: {reason}")

    def partitions(self) -> dict[str, int]:
        """Topic -> partition count, for the topics the options select that exist."""
        try:
            metadata = self._client().list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._fail("listing topics", exc) from None
        found: dict[str, int] = {}
        for name, topic in metadata.topics.items():
            if topic.error is not None or not self.options.matches(name):
                continue
            found[name] = len(topic.partitions)
        return found

    def existing(self, partitions: Iterable[TopicPartitionKey]) -> set[TopicPartitionKey]:
        """Which of ``partitions`` the cluster's metadata lists (a deleted topic's are gone)."""
        keys = set(partitions)
        try:
            metadata = self._client().list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._fail("listing topics", exc) from None
        listed = {(name, p) for name, topic in metadata.topics.items() if topic.error is None for p in topic.partitions}
        return keys & listed

    def offsets(self, partitions: Iterable[TopicPartitionKey], spec: str | int) -> dict[TopicPartitionKey, int]:
        """Offsets of ``partitions``: ``"earliest"``, ``"latest"`` (the last stable offset),
        or for an int timestamp the first offset whose record timestamp is >= it
        (the latest offset where there is none yet)."""
        keys = list(partitions)
        if not keys:
            return {}
        if isinstance(spec, int):
            found = self._list(keys, OffsetSpec.for_timestamp(spec))
            missing = [k for k, offset in found.items() if offset < 0]
            found.update(self._list(missing, OffsetSpec.latest()) if missing else {})
            return found
        return self._list(keys, OffsetSpec.earliest() if spec == "earliest" else OffsetSpec.latest())

    def first_offsets_at(
        self, partitions: Iterable[TopicPartitionKey], timestamp_ms: int
    ) -> dict[TopicPartitionKey, int | None]:
        """The first offset whose record timestamp is >= ``timestamp_ms`` (None: no such record yet)."""
        found = self._list(list(partitions), OffsetSpec.for_timestamp(timestamp_ms))
        return {k: (offset if offset >= 0 else None) for k, offset in found.items()}

    def _list(self, keys: list[TopicPartitionKey], spec: Any) -> dict[TopicPartitionKey, int]:
        retries = self.options.fetch_offset_retries
        for attempt in range(retries + 1):
            try:
                return self._list_once(keys, spec)
            except KafkaException as exc:
                if _unknown_partition(exc):
                    break
                if attempt == retries or not _worth_asking_again(exc):
                    raise self._fail("listing offsets", exc) from None
                log.debug("listing offsets failed (%s); asking again (%d of %d)", exc, attempt + 1, retries)
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
        # ListOffsets goes by the client's cached metadata, refreshed only every
        # topic.metadata.refresh.interval.ms (5 min): partitions added to a topic since are
        # "unknown" to it until then. A metadata request for the topics refreshes it.
        try:
            for topic in sorted({t for t, _ in keys}):
                self._client().list_topics(topic=topic, timeout=self.timeout_s)
            return self._list_once(keys, spec)
        except KafkaException as exc:
            raise self._fail("listing offsets", exc) from None

    def _list_once(self, keys: list[TopicPartitionKey], spec: Any) -> dict[TopicPartitionKey, int]:
        request = {TopicPartition(t, p): spec for t, p in keys}
        futures = self._client().list_offsets(
            request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=self.timeout_s
        )
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}


def _unknown_partition(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() == KafkaError._UNKNOWN_PARTITION


def _worth_asking_again(exc: KafkaException) -> bool:
    """A retriable broker error (a leader moving, say); not a timeout, which already waited
    its full request timeout and would only wait again."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.retriable() and error.code() != KafkaError._TIMED_OUT
