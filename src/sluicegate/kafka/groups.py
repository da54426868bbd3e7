"""How many live members Kafka consumer groups have (DescribeGroups, by librdkafka's admin
client: aiokafka 0.14 cannot decode Kafka 3.9's DescribeGroups answers)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from sluicegate.kafka.security import KafkaSecurity

__all__ = ["GroupMembers", "group_members"]

_NOT_AUTHORIZED = (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED)


@dataclass(frozen=True)
class GroupMembers:
    """One group: its live members, or why they are not known (``members`` None)."""

    group: str
    members: int | None
    #: The client may not describe the group (an ACL): asking again changes nothing.
    not_authorized: bool = False
    error: str = ""


def _describe(
    bootstrap: str, groups: Sequence[str], security: KafkaSecurity | None, timeout_s: float
) -> list[GroupMembers]:
    config = {
        "bootstrap.servers": bootstrap,
        "log_level": 2,  # the answer says what failed; librdkafka's connection errors are noise here
        **(security.librdkafka_config() if security is not None else {}),
    }
    admin = AdminClient(config)
    futures = admin.describe_consumer_groups(list(groups), request_timeout=timeout_s)
    out: list[GroupMembers] = []
    for group in groups:
        try:
            description = futures[group].result(timeout=timeout_s + 1)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            denied = error is not None and error.code() in _NOT_AUTHORIZED
            out.append(GroupMembers(group, None, not_authorized=denied, error=str(exc)))
        except Exception as exc:  # a timeout of the future: the broker did not answer
            out.append(GroupMembers(group, None, error=f"{type(exc).__name__} {exc}".strip()))
        else:
            out.append(GroupMembers(group, len(description.members)))
    return out


async def group_members(
    bootstrap: str, groups: Sequence[str], security: KafkaSecurity | None = None, timeout_s: float = 5.0
) -> list[GroupMembers]:
    """The live members of each of ``groups`` (0 for a group nobody is in, or that does
    not exist); never raises for one group's error, which its entry carries."""
    return await asyncio.to_thread(_describe, bootstrap, groups, security, timeout_s)
