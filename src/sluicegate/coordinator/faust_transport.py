"""A Faust transport whose consumer reads with isolation.level=read_committed.

Faust's aiokafka consumer reads read_uncommitted unless Faust's own exactly-once
mode is on. Readers commit CheckpointAck together with their state in Kafka
transactions, so the coordinator must never see an ack from an aborted
transaction: that would make it keep splits whose checkpoint never became
durable. Registered as the ``sluicegate://`` broker scheme through the
``faust.transports`` entry point.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka


class _ReadCommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"  # read by the fetcher created in start()
        return consumer


class ReadCommittedConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ReadCommittedConsumerThread:
        return _ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = ReadCommittedConsumer
