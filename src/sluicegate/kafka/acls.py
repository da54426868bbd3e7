"""The least-privilege Kafka ACLs of one source's principals: coordinator, reader, audit.

Pure: ``acl_plan`` lists what each principal needs and why; ``kafka_acls_commands``
renders it as ``kafka-acls.sh`` command lines; ``apply_acls`` creates it through
the admin API (confluent-kafka), as a principal allowed to alter ACLs.

Kafka implies DESCRIBE from READ and WRITE, so it is never listed. Producers are
idempotent: since Kafka 3.0 WRITE on a topic is enough for that (no
IdempotentWrite on the cluster). No principal may create the source's topics:
``sluicegate topics apply`` runs as an administrator before the first start.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from sluicegate.kafka.security import KafkaSecurity
from sluicegate.protocol.topics import ControlTopics, leadership_topic_spec

ROLES = ("coordinator", "reader", "audit")


@dataclass(frozen=True)
class AclEntry:
    """ALLOW ``operation`` on a resource for ``principal`` (from any host)."""

    role: str
    principal: str
    resource: str  # topic, group or transactional-id
    name: str
    operation: str  # READ, WRITE, CREATE, ALTER, DESCRIBE, DESCRIBE_CONFIGS
    why: str
    prefixed: bool = False


_SPACED_DN = re.compile(r"\s=|=\s|,\s+[A-Za-z][\w.]*\s*=")
"""A DN as ``openssl x509 -subject`` prints it (``CN = reader, OU = eng``): the broker's
principal is RFC 2253 (``CN=reader,OU=eng``) and Kafka compares ACL principals exactly."""


def principal_problem(principal: str) -> str | None:
    """Why ``principal`` cannot name who Kafka authenticates, or None. A certificate's
    principal is ``User:`` and its subject DN as the broker derives it (RFC 2253, most
    specific first: ``User:CN=reader,OU=eng,O=acme``), or what the broker's
    ``ssl.principal.mapping.rules`` make of it (``User:reader``)."""
    kind, colon, name = principal.partition(":")
    if not colon or not kind.strip() or not name.strip():
        return f"must be TYPE:NAME (e.g. User:reader or User:CN=reader,OU=eng), got {principal!r}"
    if _SPACED_DN.search(name):
        return (
            f"{principal!r} has spaces around its DN's '=' or ','; the broker names a certificate's "
            "principal in RFC 2253 (User:CN=reader,OU=eng): `openssl x509 -noout -subject -nameopt RFC2253` "
            "prints it so"
        )
    return None


CLUSTER_RESOURCE_NAME = "kafka-cluster"
"""The one name of Kafka's cluster resource (``kafka-acls.sh --cluster`` takes none)."""


def acl_plan(
    source: str,
    namespace: str = "sluicegate",
    *,
    coordinator: str = "User:coordinator",
    reader: str = "User:reader",
    audit: str = "User:audit",
    app_id: str | None = None,
) -> list[AclEntry]:
    """What each principal of ``source`` needs. ``app_id``: the coordinator's Faust app
    (consumer group) id; default: the single-source app ``NS.S.coordinator``."""
    t = ControlTopics.for_source(source, namespace)
    group = app_id or f"{namespace}.{source}.coordinator"
    leadership = leadership_topic_spec(group, 1).name
    plan: list[AclEntry] = []

    def allow(role: str, principal: str, resource: str, name: str, ops: Iterable[str], why: str) -> None:
        plan.extend(AclEntry(role, principal, resource, name, op, why) for op in ops)

    c = coordinator
    allow("coordinator", c, "topic", t.coordinator, ["READ", "DESCRIBE_CONFIGS"], "reads the readers' requests")
    allow("coordinator", c, "topic", t.readers, ["WRITE", "DESCRIBE_CONFIGS"], "writes assignments and answers")
    allow("coordinator", c, "topic", t.coordinator_state, ["READ", "WRITE", "DESCRIBE_CONFIGS"], "its checkpoint")
    allow("coordinator", c, "topic", t.reader_state, ["DESCRIBE", "DESCRIBE_CONFIGS"], "checks the topic at start")
    allow("coordinator", c, "topic", t.split_state, ["DESCRIBE", "DESCRIBE_CONFIGS"], "checks the topic at start")
    allow("coordinator", c, "topic", t.dead_letter, ["WRITE", "DESCRIBE_CONFIGS"], "dead-letters bad records")
    allow(
        "coordinator",
        c,
        "transactional-id",
        f"{namespace}.{source}.coordinator",
        ["WRITE"],
        "commits state and answers in one transaction; fences an older coordinator",
    )
    plan.append(
        AclEntry(
            "coordinator",
            c,
            "transactional-id",
            f"{namespace}.{source}.reader-",
            "WRITE",
            "fences a reader silent past its session timeout before its splits move (NS.S.reader-K)",
            prefixed=True,
        )
    )
    allow("coordinator", c, "group", group, ["READ"], "Faust group: which worker is active for the source")
    allow(
        "coordinator",
        c,
        "cluster",
        CLUSTER_RESOURCE_NAME,
        ["DESCRIBE_CONFIGS"],
        "reads the brokers' defaults for new topics (default.replication.factor, min.insync.replicas)",
    )
    allow(
        "coordinator",
        c,
        "topic",
        leadership,
        ["READ", "CREATE", "ALTER", "DESCRIBE_CONFIGS"],
        "Faust leadership topic, created and grown by the coordinator (one partition per source)",
    )
    r = reader
    allow("reader", r, "topic", t.coordinator, ["WRITE"], "sends registrations, heartbeats, acks, split requests")
    allow("reader", r, "topic", t.readers, ["READ"], "receives assignments (its subtask's partition)")
    allow("reader", r, "topic", t.reader_state, ["READ", "WRITE"], "its checkpoint, restored at start")
    allow("reader", r, "topic", t.split_state, ["READ", "WRITE"], "a stateful function's per-split state")
    allow("reader", r, "topic", t.dead_letter, ["WRITE"], "dead-letters bad records")
    plan.append(
        AclEntry(
            "reader",
            r,
            "transactional-id",
            f"{namespace}.{source}.reader-",
            "WRITE",
            "one transactional id per subtask (NS.S.reader-K); fences a zombie reader",
            prefixed=True,
        )
    )
    a = audit
    allow("audit", a, "topic", t.coordinator, ["READ"], "replays the protocol")
    allow("audit", a, "topic", t.readers, ["READ"], "replays the protocol")
    return plan


_CLI_OPERATION = {
    "READ": "Read",
    "DESCRIBE": "Describe",
    "WRITE": "Write",
    "CREATE": "Create",
    "ALTER": "Alter",
    "DESCRIBE_CONFIGS": "DescribeConfigs",
}
_CLI_RESOURCE = {
    "topic": "--topic",
    "group": "--group",
    "transactional-id": "--transactional-id",
    "cluster": "--cluster",
}


def kafka_acls_commands(plan: list[AclEntry], bootstrap: str = "$KAFKA_BOOTSTRAP_SERVERS") -> list[str]:
    """One ``kafka-acls.sh --add`` line per (principal, resource), commented with why."""
    lines: list[str] = []
    grouped: dict[tuple[str, str, str, str, bool], list[AclEntry]] = {}
    for entry in plan:
        key = (entry.role, entry.principal, entry.resource, entry.name, entry.prefixed)
        grouped.setdefault(key, []).append(entry)
    role = None
    for (entry_role, principal, resource, name, prefixed), entries in grouped.items():
        if entry_role != role:
            role = entry_role
            lines.append(f"# {role} ({principal})")
        ops = " ".join(f"--operation {_CLI_OPERATION[e.operation]}" for e in entries)
        pattern = " --resource-pattern-type prefixed" if prefixed else ""
        lines.append(f"# {entries[0].why}")
        lines.append(
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties --add "
            f"--allow-principal {shlex.quote(principal)} {ops} {_CLI_RESOURCE[resource]}"
            f"{'' if resource == 'cluster' else ' ' + name}{pattern}"
        )
    return lines


def apply_acls(plan: list[AclEntry], bootstrap: str, security: KafkaSecurity, timeout_s: float = 30.0) -> int:
    """Create the plan's ACLs (creating an existing one is a no-op); return how many."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    resource_types = {
        "topic": ResourceType.TOPIC,
        "group": ResourceType.GROUP,
        "transactional-id": ResourceType.TRANSACTIONAL_ID,
        "cluster": ResourceType.BROKER,  # librdkafka's name for the cluster resource
    }
    bindings = [
        AclBinding(
            resource_types[e.resource],
            e.name,
            ResourcePatternType.PREFIXED if e.prefixed else ResourcePatternType.LITERAL,
            e.principal,
            "*",
            AclOperation[e.operation],
            AclPermissionType.ALLOW,
        )
        for e in plan
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3, **security.librdkafka_config()})
    for future in admin.create_acls(bindings, request_timeout=timeout_s).values():
        future.result()
    return len(bindings)
