"""The replication flags of the command line, one definition for `sluicegate topics
apply` and `sluicegate coordinator` (the rules: sluicegate.kafka.replication)."""

from __future__ import annotations

from typing import Annotated

import typer

from sluicegate.kafka.replication import CLI_NAMES, ReplicationPolicy

__all__ = ["AllowUnreplicatedOption", "MinInsyncOption", "ReplicationFactorOption", "cli_replication"]

ReplicationFactorOption = Annotated[
    int | None,
    typer.Option(
        CLI_NAMES.factor,
        help="Replicas of each new control topic (default: the cluster's default.replication.factor)",
    ),
]
MinInsyncOption = Annotated[
    int | None,
    typer.Option(
        CLI_NAMES.min_insync,
        help="min.insync.replicas of new control topics (default: 2 from 3 replicas on, else the broker's)",
    ),
]
AllowUnreplicatedOption = Annotated[
    bool,
    typer.Option(
        CLI_NAMES.allow_unreplicated,
        help="Allow control topics with one replica on a cluster of 3 or more brokers",
    ),
]


def cli_replication(
    factor: int | None,
    min_insync: int | None,
    allow_unreplicated: bool,
    base: ReplicationPolicy | None = None,
) -> ReplicationPolicy:
    """The policy of the flags, each flag given overriding ``base`` (a sources.toml's);
    errors name the flags. Raises ConfigError."""
    base = base or ReplicationPolicy()
    return ReplicationPolicy(
        factor=factor if factor is not None else base.factor,
        min_insync=min_insync if min_insync is not None else base.min_insync,
        allow_unreplicated=allow_unreplicated or base.allow_unreplicated,
        names=CLI_NAMES,
    )
