"""How many live members Kafka consumer groups have (DescribeGroups, by librdkafka's admin
client: aiokafka 0.14 cannot decode Kafka 3.9's DescribeGroups answers).

Asked in a child process (``python -m sluicegate.kafka.groups``, the question on its
stdin, the answer a JSON line on its stdout): librdkafka aborts the whole process when the
connection to a group's coordinator drops under a DescribeGroups request
(``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed``,
librdkafka issue 4605, open; the fix, PR 5397, not released). A broker SIGKILLed under a
reader that asked so killed the reader with SIGABRT (issue 49). A child that dies makes
the answer "not known", which its callers already treat as "ask again later"."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

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
    bootstrap: str, groups: Sequence[str], security: KafkaSecurity | _Config | None, timeout_s: float
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


PROBE = [sys.executable, "-m", "sluicegate.kafka.groups"]
"""The child that asks (a test may put another in its place)."""
PROBE_START_S = 30.0
"""A Python start and confluent-kafka's import, on a loaded machine, beyond the question's
own timeout."""


async def group_members(
    bootstrap: str, groups: Sequence[str], security: KafkaSecurity | None = None, timeout_s: float = 5.0
) -> list[GroupMembers]:
    """The live members of each of ``groups`` (0 for a group nobody is in, or that does
    not exist); never raises for one group's error, which its entry carries."""
    question = {"bootstrap": bootstrap, "groups": list(groups), "timeout_s": timeout_s}
    if security is not None:
        question["config"] = security.librdkafka_config()  # secrets on stdin, never on argv
    child = await asyncio.create_subprocess_exec(
        *PROBE, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(json.dumps(question).encode()), timeout_s + PROBE_START_S)
    except TimeoutError:
        child.kill()
        await child.wait()
        return _unknown(groups, f"the group probe gave no answer in {timeout_s + PROBE_START_S:.0f} s")
    if child.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return _unknown(groups, f"the group probe exited with {child.returncode} ({last[0]})")
    return [GroupMembers(**answer) for answer in json.loads(out)]


def _unknown(groups: Sequence[str], why: str) -> list[GroupMembers]:
    return [GroupMembers(group, None, error=why) for group in groups]


def _probe() -> None:
    """The child: one question on stdin, the answers as one JSON list on stdout."""
    question = json.load(sys.stdin)
    security = _Config(question.get("config", {}))
    answers = _describe(question["bootstrap"], question["groups"], security, float(question["timeout_s"]))
    json.dump([asdict(a) for a in answers], sys.stdout)


@dataclass(frozen=True)
class _Config:
    """The parent's librdkafka security settings, as ``_describe`` asks them of a
    KafkaSecurity."""

    config: dict[str, str]

    def librdkafka_config(self) -> dict[str, str]:
        return self.config


if __name__ == "__main__":
    _probe()
