"""How a reader host keeps contact with its coordinator: one model, one set of
defaults and rules, for the standalone host and the Spark source alike.

- ``heartbeat_interval_ms``: how often each subtask says it is alive;
- ``session_timeout_ms``: the coordinator's session timeout; a host that could send
  nothing for longer fences itself (the coordinator has failed the attempt by then);
- ``topic_wait_timeout_s``: how long to wait at start for the source's control topics
  (its coordinator or ``sluicegate topics apply`` creates them) and a reader's output
  topic; then the host fails saying which is missing and who creates it. A source that
  was never set up is more often a typo or a missing step than a coordinator on its way,
  so the default is short; raise it where readers start before their coordinator
  (None: for ever);
- ``kafka_wait_s``: how long a starting host retries a Kafka that has never answered
  before it fails naming its bootstrap setting (from a fresh process such a Kafka is
  more often a wrong address than an outage).

And the rules derived from them, written here once for both hosts:

- ``delivery_timeout_s``: how long a round of heartbeats may take to be delivered
  before the host moves on (while the broker is down a send waits for ever, and the
  contact check must still run in time): half a session timeout, at least one interval;
- ``lost_contact(silent_s)``: whether a host that could send nothing for ``silent_s``
  must fence itself (longer than the session timeout: the coordinator failed the
  attempt by then);
- ``refusal_patience_s``: how long a registration refused because another attempt
  holds the subtask is retried before the holder counts as another live reader (a
  session timeout and two heartbeats: by then the coordinator has timed out an attempt
  of a process that died).

Each host names the settings its own way (``--heartbeat-interval-ms`` on the command
line, ``heartbeatIntervalMs`` as a Spark option); errors name them as the user wrote
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import checked_int
from sluicegate.protocol.timing import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS

KAFKA_WAIT_S = 15.0
TOPIC_WAIT_S = 15.0


@dataclass(frozen=True)
class TimingNames:
    heartbeat_interval_ms: str
    session_timeout_ms: str
    topic_wait_timeout_s: str
    kafka_wait_s: str


CLI_NAMES = TimingNames("--heartbeat-interval-ms", "--session-timeout-ms", "--topic-wait-timeout-s", "--kafka-wait-s")
SPARK_NAMES = TimingNames("heartbeatIntervalMs", "sessionTimeoutMs", "topicWaitTimeoutS", "kafkaWaitS")


class HasTiming(Protocol):
    """A host's settings: the four contact settings under the names ReaderTiming has."""

    @property
    def heartbeat_interval_ms(self) -> int: ...
    @property
    def session_timeout_ms(self) -> int: ...
    @property
    def topic_wait_timeout_s(self) -> float | None: ...
    @property
    def kafka_wait_s(self) -> float: ...


@dataclass(frozen=True)
class ReaderTiming:
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    topic_wait_timeout_s: float | None = TOPIC_WAIT_S
    kafka_wait_s: float = KAFKA_WAIT_S

    @classmethod
    def of(cls, settings: HasTiming) -> ReaderTiming:
        """The timing of a host's settings (ReaderSettings, DriverSettings)."""
        return cls(
            settings.heartbeat_interval_ms,
            settings.session_timeout_ms,
            settings.topic_wait_timeout_s,
            settings.kafka_wait_s,
        )

    def check(self, names: TimingNames) -> ReaderTiming:
        """This timing, or ConfigError naming the first bad setting."""
        checked_int(names.heartbeat_interval_ms, self.heartbeat_interval_ms, 10)
        checked_int(names.session_timeout_ms, self.session_timeout_ms, 100)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                names.heartbeat_interval_ms,
                f"must be below the session timeout ({self.session_timeout_ms} ms), got {self.heartbeat_interval_ms}",
            )
        if self.topic_wait_timeout_s is not None and self.topic_wait_timeout_s < 0:
            raise ConfigError(names.topic_wait_timeout_s, f"must be >= 0, got {self.topic_wait_timeout_s}")
        if self.kafka_wait_s <= 0:
            raise ConfigError(names.kafka_wait_s, f"must be > 0, got {self.kafka_wait_s:g}")
        return self

    @property
    def delivery_timeout_s(self) -> float:
        return max(self.heartbeat_interval_ms, self.session_timeout_ms / 2) / 1000

    def lost_contact(self, silent_s: float) -> bool:
        return silent_s * 1000 > self.session_timeout_ms

    @property
    def refusal_patience_s(self) -> float:
        return (self.session_timeout_ms + 2 * self.heartbeat_interval_ms) / 1000
