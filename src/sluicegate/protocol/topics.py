"""The control topics of a source, declared in ``topics.toml`` (docs/protocol.md, "Topics").

``topic_specs(ns, source, max_parallelism)`` gives what ``sluicegate topics apply`` and the
coordinator create; ``ControlTopics.for_source(source, ns)`` gives just the names.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.protocol.names import validate_namespace, validate_source

__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_PARALLELISM",
    "ControlTopics",
    "TopicSpec",
    "TopicTemplate",
    "topic_specs",
    "topic_templates",
    "validate_namespace",
    "validate_source",
]

DEFAULT_NAMESPACE = "sluicegate"
#: Upper bound on max_parallelism (partitions of the per-subtask topics).
MAX_PARALLELISM = 32768
_KAFKA_TOPIC_MAX_LEN = 249
_PARTITIONS_FROM = "max_parallelism"


@dataclass(frozen=True)
class TopicSpec:
    """One topic to create: its name, partition count and topic configs."""

    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    role: str = ""
    #: ``"max_parallelism"`` if the partition count comes from that setting, else None.
    partitions_from: str | None = None
    description: str = ""
    #: An existing topic with fewer partitions is grown to ``partitions``, one with more is
    #: accepted (for topics whose partitions only ever gain meaning, like the leadership topic).
    grow: bool = False
    #: An existing topic with more partitions is accepted, one with fewer is a mismatch: the
    #: per-subtask topics of a source grown by ``sluicegate topics scale`` (which grows them).
    accept_more: bool = False

    @property
    def cleanup_policy(self) -> str:
        return self.config.get("cleanup.policy", "delete")


@dataclass(frozen=True)
class TopicTemplate:
    """One ``[[topic]]`` table of topics.toml."""

    role: str
    name: str
    partitions: int | str
    config: dict[str, str]
    description: str = ""

    def render(self, ns: str, source: str, max_parallelism: int) -> TopicSpec:
        if self.partitions == _PARTITIONS_FROM:
            partitions, partitions_from = max_parallelism, _PARTITIONS_FROM
        else:
            partitions, partitions_from = int(self.partitions), None
        return TopicSpec(
            name=self.name.format(ns=ns, source=source),
            partitions=partitions,
            config=dict(self.config),
            role=self.role,
            partitions_from=partitions_from,
            description=self.description,
            # Per-subtask topics only grow, by sluicegate topics scale: more partitions than
            # asked for are the source's (a coordinator started with its old flag).
            accept_more=partitions_from is not None,
        )


def _template(raw: dict[str, Any]) -> TopicTemplate:
    role, name, partitions = raw.get("role"), raw.get("name"), raw.get("partitions")
    if not isinstance(role, str) or not isinstance(name, str):
        raise ValueError(f"topics.toml: every [[topic]] needs string 'role' and 'name': {raw}")
    if isinstance(partitions, bool) or not (
        (isinstance(partitions, int) and partitions >= 1) or partitions == _PARTITIONS_FROM
    ):
        raise ValueError(
            f"topics.toml: topic {role!r}: partitions must be a positive integer or "
            f"{_PARTITIONS_FROM!r}, not {partitions!r}"
        )
    config = raw.get("config", {})
    if not isinstance(config, dict):
        raise ValueError(f"topics.toml: topic {role!r}: config must be a table")
    return TopicTemplate(
        role=role,
        name=name,
        partitions=partitions,
        config={str(k): str(v) for k, v in config.items()},
        description=str(raw.get("description", "")),
    )


@cache
def topic_templates() -> tuple[TopicTemplate, ...]:
    """The ``[[topic]]`` tables of topics.toml, in file order."""
    text = resources.files("sluicegate_topics").joinpath("topics.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    return tuple(_template(raw) for raw in data.get("topic", []))


def _validate_max_parallelism(max_parallelism: int) -> int:
    if (
        isinstance(max_parallelism, bool)
        or not isinstance(max_parallelism, int)
        or not 1 <= max_parallelism <= MAX_PARALLELISM
    ):
        raise ConfigError(
            "max_parallelism",
            f"must be an integer from 1 to {MAX_PARALLELISM}, not {max_parallelism!r}",
        )
    return max_parallelism


def topic_specs(ns: str, source: str, max_parallelism: int) -> list[TopicSpec]:
    """Every control topic of ``source`` in namespace ``ns``, as topics.toml declares them."""
    validate_namespace(ns)
    validate_source(source)
    _validate_max_parallelism(max_parallelism)
    specs = [t.render(ns, source, max_parallelism) for t in topic_templates()]
    for spec in specs:
        if len(spec.name) > _KAFKA_TOPIC_MAX_LEN:
            raise ConfigError(
                "source",
                f"topic name {spec.name!r} is longer than Kafka's {_KAFKA_TOPIC_MAX_LEN} "
                f"characters; use a shorter source or namespace",
            )
    return specs


def leadership_topic_spec(group_id: str, sources: int) -> TopicSpec:
    """The topic whose partitions the coordinator workers of one app divide among
    themselves: whoever Faust assigns partition i is the active coordinator of the i-th
    source (sorted by name). Nothing is written to it. One partition per source, so that
    Faust's assignment spreads the sources over the workers."""
    return TopicSpec(
        name=f"{group_id}.leadership",
        partitions=max(1, sources),
        config={"cleanup.policy": "delete"},
        role="leadership",
        description="coordinator workers: partition i held = active for source i (sorted names); empty",
        grow=True,
    )


@dataclass(frozen=True)
class ControlTopics:
    """The names of the control topics of one source."""

    coordinator: str
    readers: str
    coordinator_state: str
    reader_state: str
    split_state: str
    dead_letter: str

    @classmethod
    def for_source(cls, source: str, ns: str = DEFAULT_NAMESPACE) -> ControlTopics:
        # Names do not depend on max_parallelism; 1 is only a placeholder here.
        names = {spec.role: spec.name for spec in topic_specs(ns, source, 1)}
        return cls(
            coordinator=names["coordinator"],
            readers=names["readers"],
            coordinator_state=names["coordinator_state"],
            reader_state=names["reader_state"],
            split_state=names["split_state"],
            dead_letter=names["dead_letter"],
        )

    def all(self) -> list[str]:
        """All six names, in topics.toml order."""
        return [
            self.coordinator,
            self.readers,
            self.coordinator_state,
            self.reader_state,
            self.split_state,
            self.dead_letter,
        ]
