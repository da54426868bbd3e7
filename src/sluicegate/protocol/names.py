"""The one rule for the names in topic names: sources and namespaces.

Both become parts of Kafka topic names (``<namespace>.<source>.readers``) and of
the coordinator's Faust app id, so both follow the same rule: 1-100 characters of
a-z, 0-9, '.', '_' or '-', starting with a letter or digit. Every entry point
(coordinator, reader host, Spark source, audit, topics) checks with these
functions, so a name one of them accepts the others accept too.
"""

from __future__ import annotations

import re

from sluicegate.api.errors import ConfigError

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
_RULE = "1-100 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit"


def validate_source(name: object, setting: str = "source") -> str:
    """``name`` if it is a valid source name, else ConfigError naming ``setting``."""
    return _validate(name, setting, "source name")


def validate_namespace(name: object, setting: str = "namespace") -> str:
    """``name`` if it is a valid namespace, else ConfigError naming ``setting``."""
    return _validate(name, setting, "namespace")


def _validate(name: object, setting: str, what: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ConfigError(setting, f"{name!r} is not a valid {what}: use {_RULE} ({NAME_PATTERN.pattern})")
    return name


def coordinator_transactional_id(namespace: str, source: str) -> str:
    """The one transactional id of a source's coordinators: a new holder fences the old one
    (a takeover, or ``sluicegate source redefine``)."""
    return f"{namespace}.{source}.coordinator"


def reader_transactional_id(namespace: str, source: str, subtask: int) -> str:
    """The transactional id of a source's reader subtask: a new reader of the subtask
    fences the old one at its start, and the coordinator fences a silent one before it
    hands its splits on (docs/protocol.md, "A reader paused past its session timeout")."""
    return f"{namespace}.{source}.reader-{subtask}"
