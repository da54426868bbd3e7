"""Create and check the control topics of a source (``sluicegate topics apply``).

``apply_topics`` creates what is missing and verifies what exists (partition count and
``cleanup.policy`` must match the spec; a mismatch is an error, never silently "fixed").
``wait_for_topics`` is for readers that start before the coordinator created the topics.

Topics are never created through broker auto-creation: existence is checked with an
all-topics metadata request, which cannot auto-create anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, for_code

from sluicegate.kafka.clients import security_settings
from sluicegate.kafka.security import KafkaSecurity
from sluicegate.protocol.topics import TopicSpec

__all__ = [
    "TopicApplyError",
    "TopicInfo",
    "TopicMismatchError",
    "TopicResult",
    "TopicsMissingError",
    "apply_topics",
    "describe_topics",
    "wait_for_topics",
]

log = logging.getLogger("sluicegate.topics")

_TOPIC_ALREADY_EXISTS = 36
_WAIT_HINT = "(created by the coordinator or `sluicegate topics apply`)"


class TopicApplyError(RuntimeError):
    """The topics could not be created or checked."""


class TopicsMissingError(TimeoutError):
    """Topics still missing when a wait for them ran out; ``missing`` names them."""

    def __init__(self, message: str, missing: Sequence[str]) -> None:
        super().__init__(message)
        self.missing = list(missing)


class TopicMismatchError(TopicApplyError):
    """An existing topic differs from its spec in a way that cannot be fixed in place."""

    def __init__(self, problems: Sequence[str], topics: Sequence[str]) -> None:
        super().__init__("; ".join(problems) if len(problems) == 1 else "\n".join(problems))
        self.problems = list(problems)
        self.topics = list(topics)


@dataclass(frozen=True)
class TopicInfo:
    """What the cluster says about one existing topic."""

    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str]

    @property
    def cleanup_policy(self) -> str:
        return self.config.get("cleanup.policy", "")


@dataclass(frozen=True)
class TopicResult:
    """The outcome of applying one TopicSpec."""

    name: str
    partitions: int
    replication_factor: int
    cleanup_policy: str
    created: bool
    #: Differences in other configs (e.g. retention.ms); reported, not changed.
    warnings: tuple[str, ...] = ()

    @property
    def status(self) -> Literal["created", "ok"]:
        return "created" if self.created else "ok"


@contextlib.asynccontextmanager
async def _admin(
    bootstrap: str, request_timeout_ms: int = 30_000, security: KafkaSecurity | None = None
) -> AsyncIterator[Any]:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id="sluicegate-topics",
        request_timeout_ms=request_timeout_ms,
        **security_settings(security),
    )
    try:
        await admin.start()
    except KafkaError as exc:
        with contextlib.suppress(Exception):
            await admin.close()
        raise TopicApplyError(f"cannot reach Kafka at {bootstrap}: {exc!r}") from exc
    try:
        yield admin
    finally:
        await admin.close()


def _policy_set(policy: str) -> frozenset[str]:
    return frozenset(p.strip() for p in policy.split(",") if p.strip())


async def _existing_topics(admin: Any) -> set[str]:
    # Metadata for *all* topics: unlike a request naming topics, it never auto-creates.
    return set(await admin.list_topics())


async def _partition_metadata(admin: Any, names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Partitions (with leaders) of existing topics; a topic not fully ready is left out."""
    if not names:
        return {}
    ready: dict[str, list[dict[str, Any]]] = {}
    for topic in await admin.describe_topics(list(names)):
        partitions = topic.get("partitions") or []
        if topic.get("error_code", 0) != 0 or not partitions:
            continue
        if all(p.get("error_code", 0) == 0 and p.get("leader", -1) >= 0 for p in partitions):
            ready[str(topic["topic"])] = list(partitions)
    return ready


async def _topic_configs(admin: Any, names: Sequence[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
    out: dict[str, dict[str, str]] = {}
    for response in await admin.describe_configs(resources):
        for res in response.to_object()["resources"]:
            if res["error_code"] != 0:
                err = for_code(res["error_code"])
                raise TopicApplyError(
                    f"cannot read the configs of topic {res['resource_name']}: "
                    f"{err.__name__} {res.get('error_message') or ''}".rstrip()
                )
            out[str(res["resource_name"])] = {
                str(e.get("config_names", e.get("config_name"))): str(e["config_value"])
                for e in res["config_entries"]
                if e.get("config_value") is not None
            }
    return out


async def _describe(admin: Any, names: Sequence[str], timeout_s: float) -> dict[str, TopicInfo]:
    """TopicInfo of each name, waiting up to ``timeout_s`` for every partition to have a leader."""
    deadline = time.monotonic() + timeout_s
    while True:
        meta = await _partition_metadata(admin, names)
        missing = [n for n in names if n not in meta]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise TopicApplyError(
                f"topics {', '.join(missing)} exist but their partitions have no leader after {timeout_s:.0f}s"
            )
        await asyncio.sleep(0.2)
    configs = await _topic_configs(admin, names)
    return {
        name: TopicInfo(
            name=name,
            partitions=len(meta[name]),
            replication_factor=max((len(p.get("replicas") or []) for p in meta[name]), default=0),
            config=configs.get(name, {}),
        )
        for name in names
    }


def _check(spec: TopicSpec, info: TopicInfo) -> tuple[list[str], list[str]]:
    """(problems, warnings) of an existing topic against its spec."""
    problems: list[str] = []
    warnings: list[str] = []
    more_is_fine = spec.grow or spec.accept_more
    if info.partitions != spec.partitions and not (more_is_fine and info.partitions > spec.partitions):
        if spec.partitions_from:
            flag = f"--{spec.partitions_from.replace('_', '-')}"
            problems.append(
                f"topic {spec.name} has {info.partitions} partitions, expected {spec.partitions} "
                f"({spec.partitions_from}); use the right {flag}, or grow the source with "
                f"`sluicegate topics scale {flag} {spec.partitions}`"
            )
        else:
            problems.append(
                f"topic {spec.name} has {info.partitions} partitions, expected {spec.partitions}; "
                f"delete it and apply again"
            )
    wanted_policy = spec.config.get("cleanup.policy")
    if wanted_policy is not None and _policy_set(info.cleanup_policy) != _policy_set(wanted_policy):
        problems.append(
            f"topic {spec.name} has cleanup.policy={info.cleanup_policy or '?'}, expected "
            f"{wanted_policy}; change it (kafka-configs --alter --entity-type topics "
            f"--entity-name {spec.name} --add-config cleanup.policy={wanted_policy}) or delete it"
        )
    for key, wanted in spec.config.items():
        if key == "cleanup.policy":
            continue
        actual = info.config.get(key)
        if actual is not None and actual != wanted:
            warnings.append(f"topic {spec.name} has {key}={actual}, spec says {wanted}")
    return problems, warnings


def _refusal(topic: str, code: int, message: str | None) -> str:
    """One topic's error from a CreateTopics or CreatePartitions response, for people."""
    return f"{topic}: {for_code(code).__name__} {message or ''}".rstrip()


async def _grow(admin: Any, specs: Sequence[TopicSpec], timeout_s: float) -> list[str]:
    """Add partitions to existing topics whose spec allows growing; returns their names."""
    if not specs:
        return []
    log.info("adding partitions: %s", ", ".join(f"{s.name} -> {s.partitions}" for s in specs))
    response = await admin.create_partitions(
        {s.name: NewPartitions(total_count=s.partitions) for s in specs}, timeout_ms=int(timeout_s * 1000)
    )
    failures = [_refusal(name, code, message) for name, code, message in response.topic_errors if code != 0]
    if failures:
        raise TopicApplyError("Kafka refused to add partitions: " + "; ".join(failures))
    return [s.name for s in specs]


async def _described_grown(admin: Any, specs: Sequence[TopicSpec], timeout_s: float) -> dict[str, TopicInfo]:
    """The grown topics once the metadata shows their new partitions (CreatePartitions
    returns before every broker's metadata has them), or as they are at ``timeout_s``."""
    names = [s.name for s in specs]
    deadline = time.monotonic() + timeout_s
    while True:
        infos = await _describe(admin, names, timeout_s)
        if all(infos[s.name].partitions >= s.partitions for s in specs) or time.monotonic() >= deadline:
            return infos
        await asyncio.sleep(0.2)


async def apply_topics(
    bootstrap: str,
    specs: list[TopicSpec],
    *,
    timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> list[TopicResult]:
    """Create the missing topics of ``specs`` and verify all of them; idempotent.

    Replication factor of new topics: min(3, number of brokers). Raises TopicMismatchError
    if an existing topic has another partition count or cleanup.policy than its spec, and
    TopicApplyError if the cluster refuses to create a topic.
    """
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate topic names in specs: {names}")
    async with _admin(bootstrap, security=security) as admin:
        cluster = await admin.describe_cluster()
        brokers = len(cluster.get("brokers") or [])
        replication = max(1, min(3, brokers))
        existing = await _existing_topics(admin)
        to_create = [s for s in specs if s.name not in existing]
        created: set[str] = set()
        if to_create:
            log.info(
                "creating topics %s (replication factor %d)",
                ", ".join(s.name for s in to_create),
                replication,
            )
            response = await admin.create_topics(
                [NewTopic(s.name, s.partitions, replication, topic_configs=s.config) for s in to_create],
                timeout_ms=int(timeout_s * 1000),
            )
            failures: list[str] = []
            for entry in response.to_object()["topic_errors"]:
                code = entry["error_code"]
                if code == 0:
                    created.add(str(entry["topic"]))
                elif code != _TOPIC_ALREADY_EXISTS:  # lost a race with another creator: fine
                    failures.append(_refusal(entry["topic"], code, entry.get("error_message")))
            if failures:
                raise TopicApplyError("Kafka refused to create topics: " + "; ".join(failures))
        infos = await _describe(admin, names, timeout_s)
        growing = [s for s in specs if s.grow and infos[s.name].partitions < s.partitions]
        if await _grow(admin, growing, timeout_s):
            infos.update(await _described_grown(admin, growing, timeout_s))

    results: list[TopicResult] = []
    problems: list[str] = []
    bad: list[str] = []
    for spec in specs:
        info = infos[spec.name]
        topic_problems, warnings = _check(spec, info)
        if topic_problems:
            problems.extend(topic_problems)
            bad.append(spec.name)
        for warning in warnings:
            log.warning("%s", warning)
        results.append(
            TopicResult(
                name=spec.name,
                partitions=info.partitions,
                replication_factor=info.replication_factor,
                cleanup_policy=info.cleanup_policy,
                created=spec.name in created,
                warnings=tuple(warnings),
            )
        )
    if problems:
        raise TopicMismatchError(problems, bad)
    log.info(
        "topics ready: %s",
        ", ".join(f"{r.name} ({r.partitions}p, {r.status})" for r in results),
    )
    return results


async def describe_topics(
    bootstrap: str, names: Iterable[str], security: KafkaSecurity | None = None
) -> dict[str, TopicInfo | None]:
    """TopicInfo for each name, None for topics that do not exist. Never creates topics."""
    wanted = list(names)
    async with _admin(bootstrap, security=security) as admin:
        existing = await _existing_topics(admin)
        present = [n for n in wanted if n in existing]
        infos = await _describe(admin, present, timeout_s=10.0)
    return {n: infos.get(n) for n in wanted}


async def wait_for_topics(
    bootstrap: str,
    names: Iterable[str],
    timeout_s: float = 60.0,
    *,
    poll_interval_s: float = 1.0,
    security: KafkaSecurity | None = None,
    hint: str = _WAIT_HINT,
) -> dict[str, int]:
    """Wait until every topic exists with leaders for all partitions; return partition counts.

    Raises TopicsMissingError naming the topics still missing after ``timeout_s``.
    ``hint`` says who creates them (the default: the control topics' creators).
    """
    wanted = list(names)
    deadline = time.monotonic() + timeout_s
    next_log = 0.0
    async with _admin(bootstrap, security=security) as admin:
        while True:
            existing = await _existing_topics(admin)
            meta = await _partition_metadata(admin, [n for n in wanted if n in existing])
            missing = [n for n in wanted if n not in meta]
            if not missing:
                if next_log:
                    log.info("topics %s are there", ", ".join(wanted))
                return {n: len(meta[n]) for n in wanted}
            now = time.monotonic()
            if now > deadline:
                raise TopicsMissingError(
                    f"topics {', '.join(missing)} did not appear on {bootstrap} within {timeout_s:.0f}s {hint}", missing
                )
            if now >= next_log:
                log.info("waiting for topics %s %s", ", ".join(missing), hint)
                next_log = now + 10.0
            await asyncio.sleep(min(poll_interval_s, max(0.0, deadline - now)))
