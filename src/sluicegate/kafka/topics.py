"""Create and check the control topics of a source (``sluicegate topics apply``).

``apply_topics`` creates what is missing and verifies what exists (partition count and
``cleanup.policy`` must match the spec; a mismatch is an error, never silently "fixed";
replication is checked by the rules of ``sluicegate.kafka.replication``).
``wait_for_topics`` is for readers that start before the coordinator created the topics.

On a cluster, metadata reaches the brokers at different times and a broker that died is
listed until the controller fences it (``broker.session.timeout.ms``, 9 s by default): a
topic just created may be unknown to the broker a request lands on, and a request may be
sent to a dead broker. Every request of ``apply_topics`` is therefore retried on Kafka's
retriable errors (with fresh metadata) until its deadline; the first contact is not: a
Kafka no bootstrap server of which answers fails at once (``cannot reach Kafka``), as a
wrong address should (callers that wait for a Kafka still starting retry that
themselves, see ``sluicegate.reader.kafka_channel``).

Topics are never created through broker auto-creation: existence is checked with an
all-topics metadata request, which cannot auto-create anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, for_code

from sluicegate.kafka.clients import security_settings
from sluicegate.kafka.replication import (
    ClusterFacts,
    Replication,
    ReplicationError,
    ReplicationPolicy,
    TooFewBrokersError,
    check_existing,
    for_new_topics,
    wanted,
)
from sluicegate.kafka.security import KafkaSecurity
from sluicegate.protocol.topics import TopicSpec

__all__ = [
    "TopicApplyError",
    "TopicInfo",
    "TopicMismatchError",
    "TopicResult",
    "TopicsMissingError",
    "apply_topics",
    "cluster_facts",
    "describe_topics",
    "wait_for_topics",
]

log = logging.getLogger("sluicegate.topics")

_TOPIC_ALREADY_EXISTS = 36
_INVALID_REPLICATION_FACTOR = 38
#: Per request: a request to a broker that died waits this long before it is retried.
_REQUEST_TIMEOUT_MS = 10_000
_RETRY_BACKOFF_S = (0.1, 0.2, 0.5, 1.0)
_T = TypeVar("_T")
_WAIT_HINT = "(created by the coordinator or `sluicegate topics apply`)"


class TopicApplyError(RuntimeError):
    """The topics could not be created or checked."""


class _BrokersNotRegisteredYet(KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """The controller counts fewer brokers than the metadata listed (a broker that just
    came back is listed by some brokers before the controller unfences it): retried."""

    retriable = True


class _NotAuthorized(TopicApplyError):
    """Kafka refused a request to this principal (an ACL)."""


_AUTHORIZATION_CODES = frozenset({29, 31})  # TopicAuthorizationFailed, ClusterAuthorizationFailed


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

    @property
    def min_insync_replicas(self) -> int:
        """Its effective ``min.insync.replicas`` (DescribeConfigs gives the broker default
        where the topic sets none); 1, Kafka's default, if the broker did not say."""
        try:
            return int(self.config.get("min.insync.replicas", "1"))
        except ValueError:
            return 1


@dataclass(frozen=True)
class TopicResult:
    """The outcome of applying one TopicSpec."""

    name: str
    partitions: int
    replication_factor: int
    cleanup_policy: str
    created: bool
    #: Differences in other configs (e.g. retention.ms) and weaker replication than the
    #: policy's; reported, not changed.
    warnings: tuple[str, ...] = ()
    min_insync_replicas: int = 1

    @property
    def status(self) -> Literal["created", "ok"]:
        return "created" if self.created else "ok"


@contextlib.asynccontextmanager
async def _admin(
    bootstrap: str, request_timeout_ms: int = _REQUEST_TIMEOUT_MS, security: KafkaSecurity | None = None
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


def _retriable(exc: BaseException) -> bool:
    # asyncio.TimeoutError: aiokafka's wait for a connection to a broker that is down.
    return isinstance(exc, TimeoutError) or (isinstance(exc, KafkaError) and bool(exc.retriable))


async def _refresh_metadata(admin: Any) -> None:
    """Fresh metadata, so that the next try goes to a broker that is alive now (aiokafka
    keeps its list of brokers, and the one it calls "controller", for minutes)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_REQUEST_TIMEOUT_MS / 1000):
            await admin._client.force_metadata_update()  # the admin client has no public refresh


async def _retried(admin: Any, what: str, call: Callable[[], Awaitable[_T]], deadline: float) -> _T:
    """``call()``, tried again on Kafka's retriable errors until ``deadline`` (monotonic);
    then TopicApplyError naming ``what`` and the last error. Other errors are raised."""
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if not _retriable(exc):
                raise
            pause = _RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)]
            if time.monotonic() + pause > deadline:
                raise TopicApplyError(f"{what} failed until the deadline: {type(exc).__name__} {exc}") from exc
            if attempt == 0:
                log.info("%s: %s %s; trying again until the deadline", what, type(exc).__name__, exc)
            attempt += 1
            await asyncio.sleep(pause)
            await _refresh_metadata(admin)


def _raise_for_code(code: int, message: str | None, what: str) -> None:
    """An error code inside a response: raised as Kafka's error if retriable (for
    ``_retried``), as TopicApplyError if not."""
    if code == 0:
        return
    err = for_code(code)
    if err.retriable:
        raise err(message or what)
    refused = _NotAuthorized if code in _AUTHORIZATION_CODES else TopicApplyError
    raise refused(f"{what}: {err.__name__} {message or ''}".rstrip())


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


async def _configs(admin: Any, kind: ConfigResourceType, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """The effective configs of topics or brokers (by id), by name."""
    if not names:
        return {}
    resources = [ConfigResource(kind, name) for name in names]
    out: dict[str, dict[str, str]] = {}
    for response in await admin.describe_configs(resources):
        for res in response.to_object()["resources"]:
            # UnknownTopicOrPartition: the broker asked has not had the new topic's metadata yet.
            _raise_for_code(
                res["error_code"], res.get("error_message"), f"cannot read the configs of {res['resource_name']}"
            )
            out[str(res["resource_name"])] = {
                str(e.get("config_names", e.get("config_name"))): str(e["config_value"])
                for e in res["config_entries"]
                if e.get("config_value") is not None
            }
    return out


async def _describe(admin: Any, names: Sequence[str], deadline: float) -> dict[str, TopicInfo]:
    """TopicInfo of each name, waiting until ``deadline`` for every partition to have a leader."""
    while True:
        meta = await _retried(admin, "reading topic metadata", lambda: _partition_metadata(admin, names), deadline)
        missing = [n for n in names if n not in meta]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise TopicApplyError(f"topics {', '.join(missing)} exist but their partitions have no leader")
        await asyncio.sleep(0.2)
    configs = await _retried(
        admin, "reading topic configs", lambda: _configs(admin, ConfigResourceType.TOPIC, names), deadline
    )
    return {
        name: TopicInfo(
            name=name,
            partitions=len(meta[name]),
            replication_factor=max((len(p.get("replicas") or []) for p in meta[name]), default=0),
            config=configs.get(name, {}),
        )
        for name in names
    }


async def _cluster_facts(admin: Any, deadline: float) -> ClusterFacts:
    """The live brokers and their defaults for new topics (asked of each broker in turn:
    one that died may still be listed)."""
    cluster = await _retried(admin, "describing the cluster", admin.describe_cluster, deadline)
    brokers = tuple(sorted(int(b["node_id"]) for b in cluster.get("brokers") or []))
    if not brokers:
        raise TopicApplyError("the cluster lists no live broker")
    turns = itertools.cycle(brokers)

    async def broker_configs() -> dict[str, str]:
        broker = str(next(turns))
        return (await _configs(admin, ConfigResourceType.BROKER, [broker]))[broker]

    try:
        configs = await _retried(admin, "reading the brokers' defaults", broker_configs, deadline)
    except _NotAuthorized as exc:
        # A least-privilege principal (docs/deploy.md, "ACLs") may not describe the
        # cluster's configs: up to 3 replicas, as many as there are brokers, and Kafka's
        # default min ISR assumed (the policy's own settings still apply).
        log.info("%s; taking the replication factor as min(3, brokers) = %d", exc, min(3, len(brokers)))
        return ClusterFacts(brokers=brokers, default_factor=min(3, len(brokers)), default_min_insync=1)
    return ClusterFacts(
        brokers=brokers,
        default_factor=_int_config(configs, "default.replication.factor", 1),
        default_min_insync=_int_config(configs, "min.insync.replicas", 1),
    )


def _int_config(configs: dict[str, str], key: str, default: int) -> int:
    try:
        return int(configs.get(key, default))
    except ValueError:
        return default


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
    for key, value in spec.config.items():
        if key == "cleanup.policy":
            continue
        actual = info.config.get(key)
        if actual is not None and actual != value:
            warnings.append(f"topic {spec.name} has {key}={actual}, spec says {value}")
    return problems, warnings


def _refusal(topic: str, code: int, message: str | None) -> str:
    """One topic's error from a CreateTopics or CreatePartitions response, for people."""
    return f"{topic}: {for_code(code).__name__} {message or ''}".rstrip()


async def _grow(admin: Any, specs: Sequence[TopicSpec], deadline: float) -> list[str]:
    """Add partitions to existing topics whose spec allows growing; returns their names."""
    if not specs:
        return []
    log.info("adding partitions: %s", ", ".join(f"{s.name} -> {s.partitions}" for s in specs))
    response = await _retried(
        admin,
        "adding partitions",
        lambda: admin.create_partitions(
            {s.name: NewPartitions(total_count=s.partitions) for s in specs}, timeout_ms=_broker_wait_ms(deadline)
        ),
        deadline,
    )
    failures = [_refusal(name, code, message) for name, code, message in response.topic_errors if code != 0]
    if failures:
        raise TopicApplyError("Kafka refused to add partitions: " + "; ".join(failures))
    return [s.name for s in specs]


async def _described_grown(admin: Any, specs: Sequence[TopicSpec], deadline: float) -> dict[str, TopicInfo]:
    """The grown topics once the metadata shows their new partitions (CreatePartitions
    returns before every broker's metadata has them), or as they are at ``deadline``."""
    names = [s.name for s in specs]
    while True:
        infos = await _describe(admin, names, deadline)
        if all(infos[s.name].partitions >= s.partitions for s in specs) or time.monotonic() >= deadline:
            return infos
        await asyncio.sleep(0.2)


def _broker_wait_ms(deadline: float) -> int:
    """How long a broker may take over a create request: within the deadline, and shorter
    than the request's own timeout so that it answers (with a timeout code) first."""
    remaining_ms = int((deadline - time.monotonic()) * 1000)
    return max(1_000, min(remaining_ms, _REQUEST_TIMEOUT_MS - 2_000))


async def _create(
    admin: Any, specs: Sequence[TopicSpec], policy: ReplicationPolicy, cluster: ClusterFacts, deadline: float
) -> set[str]:
    """Create ``specs`` replicated as ``policy`` says; the names this call created."""
    replication = await _replication_for_new_topics(admin, specs, policy, cluster, deadline)
    log.info(
        "creating topics %s (replication factor %d, min.insync.replicas %s)",
        ", ".join(s.name for s in specs),
        replication.factor,
        replication.min_insync if replication.min_insync is not None else "the broker default",
    )
    pending = {s.name: s for s in specs}
    created: set[str] = set()
    #: Topics of a try that failed retriably: that try may have created them, so
    #: "already exists" afterwards is ours (not a race lost to another creator).
    maybe_ours: set[str] = set()

    async def attempt() -> None:
        request = [_new_topic(spec, replication) for spec in pending.values()]
        try:
            response = await admin.create_topics(request, timeout_ms=_broker_wait_ms(deadline))
        except Exception:
            maybe_ours.update(pending)
            raise
        failures: list[str] = []
        retry: KafkaError | None = None
        for entry in response.to_object()["topic_errors"]:
            topic, code = str(entry["topic"]), int(entry["error_code"])
            if code == 0 or (code == _TOPIC_ALREADY_EXISTS and topic in maybe_ours):
                created.add(topic)
            elif code == _TOPIC_ALREADY_EXISTS:  # lost a race with another creator: fine
                pass
            elif for_code(code).retriable or code == _INVALID_REPLICATION_FACTOR:
                # e.g. a timeout while the controller moved; or the controller counting
                # fewer brokers than the metadata listed (checked against it just before)
                maybe_ours.add(topic)
                error = _BrokersNotRegisteredYet if code == _INVALID_REPLICATION_FACTOR else for_code(code)
                retry = error(entry.get("error_message") or topic)
                continue
            else:
                failures.append(_refusal(topic, code, entry.get("error_message")))
            pending.pop(topic, None)
        if failures:
            raise TopicApplyError("Kafka refused to create topics: " + "; ".join(failures))
        if retry is not None:
            raise retry

    await _retried(admin, "creating topics", attempt, deadline)
    return created


async def _replication_for_new_topics(
    admin: Any, specs: Sequence[TopicSpec], policy: ReplicationPolicy, cluster: ClusterFacts, deadline: float
) -> Replication:
    """``for_new_topics``, waiting until ``deadline`` while the cluster lists too few
    brokers (one restarting, a cluster that just started): never created below it."""
    waited = False
    while True:
        try:
            return for_new_topics(policy, cluster)
        except TooFewBrokersError as exc:
            if time.monotonic() + 0.5 > deadline:
                raise TopicApplyError(f"cannot create {', '.join(s.name for s in specs)}: {exc}") from None
            if not waited:
                log.info("%s; waiting for them until the deadline", exc)
                waited = True
        except ReplicationError as exc:
            raise TopicApplyError(f"cannot create {', '.join(s.name for s in specs)}: {exc}") from None
        await asyncio.sleep(0.5)
        cluster = await _cluster_facts(admin, deadline)


def _new_topic(spec: TopicSpec, replication: Replication) -> NewTopic:
    # The spec's own configs win: it may set min.insync.replicas for a reason of its own.
    config = {**replication.topic_config(), **spec.config}
    return NewTopic(spec.name, spec.partitions, replication.factor, topic_configs=config)


async def apply_topics(
    bootstrap: str,
    specs: list[TopicSpec],
    *,
    timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
    replication: ReplicationPolicy | None = None,
) -> list[TopicResult]:
    """Create the missing topics of ``specs`` and verify all of them; idempotent.

    New topics are replicated as ``replication`` says (``sluicegate.kafka.replication``:
    by default the cluster's ``default.replication.factor``). Raises TopicMismatchError if
    an existing topic has another partition count or cleanup.policy than its spec (or one
    replica where the policy refuses it), and TopicApplyError if the cluster refuses to
    create a topic or does not answer within ``timeout_s``.
    """
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate topic names in specs: {names}")
    policy = replication or ReplicationPolicy()
    deadline = time.monotonic() + timeout_s
    async with _admin(bootstrap, security=security) as admin:
        cluster = await _cluster_facts(admin, deadline)
        existing = await _retried(admin, "listing topics", lambda: _existing_topics(admin), deadline)
        to_create = [s for s in specs if s.name not in existing]
        created = await _create(admin, to_create, policy, cluster, deadline) if to_create else set()
        infos = await _describe(admin, names, deadline)
        growing = [s for s in specs if s.grow and infos[s.name].partitions < s.partitions]
        if await _grow(admin, growing, deadline):
            infos.update(await _described_grown(admin, growing, deadline))
    results = _verdicts(specs, infos, created, policy, cluster, bootstrap)
    log.info(
        "topics ready: %s",
        ", ".join(f"{r.name} ({r.partitions}p, RF {r.replication_factor}, {r.status})" for r in results),
    )
    return results


def _verdicts(
    specs: Sequence[TopicSpec],
    infos: dict[str, TopicInfo],
    created: set[str],
    policy: ReplicationPolicy,
    cluster: ClusterFacts,
    bootstrap: str,
) -> list[TopicResult]:
    """Each topic checked against its spec and the replication policy; TopicMismatchError
    if any cannot be used as it is, the warnings logged and kept in the results."""
    target = wanted(policy, cluster)
    results: list[TopicResult] = []
    problems: list[str] = []
    bad: list[str] = []
    for spec in specs:
        info = infos[spec.name]
        topic_problems, warnings = _check(spec, info)
        more_problems, more_warnings = check_existing(
            spec.name, info.replication_factor, info.min_insync_replicas, target, cluster, policy, bootstrap
        )
        topic_problems += more_problems
        warnings += more_warnings
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
                min_insync_replicas=info.min_insync_replicas,
            )
        )
    if problems:
        raise TopicMismatchError(problems, bad)
    return results


async def cluster_facts(bootstrap: str, security: KafkaSecurity | None = None, timeout_s: float = 10.0) -> ClusterFacts:
    """The cluster's live brokers and defaults for new topics (retried as ``apply_topics``)."""
    async with _admin(bootstrap, security=security) as admin:
        return await _cluster_facts(admin, time.monotonic() + timeout_s)


async def describe_topics(
    bootstrap: str, names: Iterable[str], security: KafkaSecurity | None = None
) -> dict[str, TopicInfo | None]:
    """TopicInfo for each name, None for topics that do not exist. Never creates topics."""
    asked = list(names)
    deadline = time.monotonic() + 10.0
    async with _admin(bootstrap, security=security) as admin:
        existing = await _retried(admin, "listing topics", lambda: _existing_topics(admin), deadline)
        present = [n for n in asked if n in existing]
        infos = await _describe(admin, present, deadline)
    return {n: infos.get(n) for n in asked}


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
    asked = list(names)
    deadline = time.monotonic() + timeout_s
    next_log = 0.0
    async with _admin(bootstrap, security=security) as admin:
        while True:
            try:
                existing = await _existing_topics(admin)
                meta = await _partition_metadata(admin, [n for n in asked if n in existing])
            except Exception as exc:  # a broker that died: ask another, as long as the wait lasts
                if not _retriable(exc):
                    raise
                meta = {}
                await _refresh_metadata(admin)
            missing = [n for n in asked if n not in meta]
            if not missing:
                if next_log:
                    log.info("topics %s are there", ", ".join(asked))
                return {n: len(meta[n]) for n in asked}
            now = time.monotonic()
            if now > deadline:
                raise TopicsMissingError(
                    f"topics {', '.join(missing)} did not appear on {bootstrap} within {timeout_s:.0f}s {hint}", missing
                )
            if now >= next_log:
                log.info("waiting for topics %s %s", ", ".join(missing), hint)
                next_log = now + 10.0
            await asyncio.sleep(min(poll_interval_s, max(0.0, deadline - now)))
