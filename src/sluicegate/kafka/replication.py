"""How a source's control topics replicate: one policy, the rules written once.

The control topics hold the coordinator's state and every reader's progress; losing a
broker must not lose them, and must not stop them from taking writes (every sluicegate
producer writes with ``acks=all``, so a partition takes writes only while
``min.insync.replicas`` replicas are in sync).

- ``ReplicationPolicy``: what the user asked for (the replication factor and
  ``min.insync.replicas`` of new topics; None: from the cluster), and whether
  unreplicated control topics are allowed on a cluster that could replicate them;
- ``wanted(policy, cluster)``: the factor defaults to the cluster's
  ``default.replication.factor`` and ``min.insync.replicas`` to 2 where the factor is 3
  or more (Kafka's default of 1 acknowledges a write only one broker has);
- ``for_new_topics(policy, cluster)``: that, if topics created now can have it: a factor
  above the live brokers is refused naming them (never created below what was asked),
  and so is a single replica on a cluster of three or more brokers unless allowed;
- ``check_existing``: an existing topic weaker than the policy is a warning naming it,
  what it has and the command that fixes it; one with a single replica on a cluster of
  three or more brokers is refused unless allowed.

Pure: ``sluicegate.kafka.topics`` reads the cluster's facts and applies the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluicegate.api.errors import ConfigError

__all__ = [
    "CLI_NAMES",
    "REPLICATED_CLUSTER_BROKERS",
    "ClusterFacts",
    "Replication",
    "ReplicationError",
    "ReplicationPolicy",
    "ReplicationSettingNames",
    "TooFewBrokersError",
    "check_existing",
    "for_new_topics",
    "wanted",
]

#: From this many live brokers on, a control topic with one replica is refused unless allowed.
REPLICATED_CLUSTER_BROKERS = 3
#: ``min.insync.replicas`` of new topics whose factor is at least 3, unless asked otherwise.
DEFAULT_MIN_INSYNC = 2


class ReplicationError(RuntimeError):
    """The control topics cannot be replicated as asked (or are not replicated at all)."""


class TooFewBrokersError(ReplicationError):
    """Fewer live brokers than the replication factor: for now, perhaps (a broker that is
    restarting, a cluster that just started lists its brokers one by one)."""


@dataclass(frozen=True)
class ReplicationSettingNames:
    """How the host names the three settings, for its errors (a flag, a TOML key, ...)."""

    factor: str = "replication_factor"
    min_insync: str = "min_insync_replicas"
    allow_unreplicated: str = "allow_unreplicated_topics"


CLI_NAMES = ReplicationSettingNames("--replication-factor", "--min-insync-replicas", "--allow-unreplicated")


@dataclass(frozen=True)
class ReplicationPolicy:
    """What the user asked for; None: from the cluster (see the module docstring)."""

    factor: int | None = None
    min_insync: int | None = None
    allow_unreplicated: bool = False
    names: ReplicationSettingNames = ReplicationSettingNames()

    def __post_init__(self) -> None:
        for setting, value in ((self.names.factor, self.factor), (self.names.min_insync, self.min_insync)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(setting, f"must be an integer >= 1, got {value!r}")
        if self.factor is not None and self.min_insync is not None and self.min_insync > self.factor:
            raise ConfigError(
                self.names.min_insync,
                f"is {self.min_insync}, above the replication factor {self.factor}: no write could ever succeed",
            )


@dataclass(frozen=True)
class ClusterFacts:
    """What the cluster says: its live brokers and its defaults for new topics."""

    brokers: tuple[int, ...]
    default_factor: int
    default_min_insync: int

    def describe_brokers(self) -> str:
        ids = ", ".join(str(b) for b in sorted(self.brokers))
        return f"{len(self.brokers)} live broker{'s' if len(self.brokers) != 1 else ''} ({ids})"


@dataclass(frozen=True)
class Replication:
    """What a new control topic gets; ``min_insync`` None leaves it to the broker default."""

    factor: int
    min_insync: int | None

    def topic_config(self) -> dict[str, str]:
        return {} if self.min_insync is None else {"min.insync.replicas": str(self.min_insync)}

    def effective_min_insync(self, cluster: ClusterFacts) -> int:
        return self.min_insync if self.min_insync is not None else cluster.default_min_insync


def _is_unreplicated_on_a_cluster(factor: int, cluster: ClusterFacts, policy: ReplicationPolicy) -> bool:
    return factor == 1 and len(cluster.brokers) >= REPLICATED_CLUSTER_BROKERS and not policy.allow_unreplicated


def wanted(policy: ReplicationPolicy, cluster: ClusterFacts) -> Replication:
    """The replication control topics should have under ``policy`` on ``cluster``."""
    factor = policy.factor if policy.factor is not None else max(1, cluster.default_factor)
    min_insync = policy.min_insync
    if min_insync is None and factor >= 3:
        min_insync = DEFAULT_MIN_INSYNC
    return Replication(factor=factor, min_insync=min_insync)


def for_new_topics(policy: ReplicationPolicy, cluster: ClusterFacts) -> Replication:
    """``wanted``, if the cluster can give it to topics created now; ReplicationError if
    it cannot, or if they would have a single replica where they need not."""
    names = policy.names
    replication = wanted(policy, cluster)
    factor = replication.factor
    if _is_unreplicated_on_a_cluster(factor, cluster, policy):
        where = (
            f"{names.factor} is 1"
            if policy.factor is not None
            else f"the cluster's default.replication.factor is 1 and {names.factor} is not set"
        )
        raise ReplicationError(
            f"control topics would have one replica on a cluster of {cluster.describe_brokers()} ({where}): "
            f"losing one broker would lose the source's state; set {names.factor} "
            f"{min(3, len(cluster.brokers))}, or {names.allow_unreplicated} to create them so anyway"
        )
    if factor > len(cluster.brokers):
        raise TooFewBrokersError(
            f"{names.factor} {factor} needs {factor} brokers, the cluster has {cluster.describe_brokers()}: "
            f"start the missing brokers, or lower {names.factor}"
        )
    if replication.min_insync is not None and replication.min_insync > factor:
        raise ReplicationError(
            f"{names.min_insync} {replication.min_insync} is above the replication factor {factor}: "
            "no write could ever succeed"
        )
    return replication


def check_existing(
    topic: str,
    factor: int,
    min_insync: int,
    wanted: Replication,
    cluster: ClusterFacts,
    policy: ReplicationPolicy,
    bootstrap: str,
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of an existing topic with ``factor`` replicas and
    ``min_insync`` (its effective ``min.insync.replicas``) against ``wanted``."""
    names = policy.names
    if _is_unreplicated_on_a_cluster(factor, cluster, policy):
        return [
            f"topic {topic} has one replica on a cluster of {cluster.describe_brokers()}: losing its broker "
            f"loses the source's state. Add replicas ({_reassign_hint(topic, bootstrap)}), or set "
            f"{names.allow_unreplicated} to run on it anyway"
        ], []
    warnings: list[str] = []
    wanted_min = wanted.effective_min_insync(cluster)
    if factor < wanted.factor:
        warnings.append(
            f"topic {topic} has replication factor {factor} (min.insync.replicas={min_insync}), "
            f"{wanted.factor} wanted: add replicas with {_reassign_hint(topic, bootstrap)}"
        )
    if min_insync < wanted_min and wanted_min <= factor:
        warnings.append(
            f"topic {topic} has min.insync.replicas={min_insync} (replication factor {factor}), "
            f"{wanted_min} wanted: a write one broker has is acknowledged, and lost with that broker; "
            f"fix: {_min_insync_command(topic, wanted_min, bootstrap)}"
        )
    elif factor > 1 and min_insync >= factor:
        warnings.append(
            f"topic {topic} has min.insync.replicas={min_insync} with replication factor {factor}: "
            f"one broker down stops every write to it; fix: "
            f"{_min_insync_command(topic, factor - 1, bootstrap)}"
        )
    return [], warnings


def _min_insync_command(topic: str, value: int, bootstrap: str) -> str:
    return (
        f"`kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
        f"--entity-name {topic} --add-config min.insync.replicas={value}`"
    )


def _reassign_hint(topic: str, bootstrap: str) -> str:
    return (
        f"`kafka-reassign-partitions.sh --bootstrap-server {bootstrap} --execute "
        f"--reassignment-json-file FILE`, FILE listing more replicas for each partition of {topic}"
    )
