"""A local single-node Kafka broker (KRaft) run from Maven Central jars: `sluicegate broker`."""

from sluicegate.devtools.broker.local import (
    KAFKA_VERSION,
    BrokerError,
    BrokerStatus,
    LocalKafkaBroker,
    default_run_dir,
    ensure_kafka_artifacts,
    local_kafka,
    probe_broker,
)

__all__ = [
    "KAFKA_VERSION",
    "BrokerError",
    "BrokerStatus",
    "LocalKafkaBroker",
    "default_run_dir",
    "ensure_kafka_artifacts",
    "local_kafka",
    "probe_broker",
]
