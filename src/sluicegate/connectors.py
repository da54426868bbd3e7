"""Finding connectors: every connector is a Source class registered under the
``sluicegate.connectors`` entry-point group (see pyproject.toml)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.api.source import Source

ENTRY_POINT_GROUP = "sluicegate.connectors"


def available_connectors() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def load_source(connector: str, options: Mapping[str, str]) -> Source[Any]:
    """Build the connector's Source from its options; ConfigError names what is wrong."""
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == connector]
    if not matches:
        known = ", ".join(available_connectors()) or "none installed"
        raise ConfigError("connector", f"no connector named {connector!r} (known: {known})")
    source_cls = matches[0].load()
    if not (isinstance(source_cls, type) and issubclass(source_cls, Source)):
        raise ConfigError("connector", f"entry point {connector!r} does not name a sluicegate Source class")
    source: Source[Any] = source_cls.from_options(options)
    return source


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    """``["splits=200", "rate=10"]`` -> dict; ConfigError naming ``--option`` otherwise."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--option", f"expected key=value, got {pair!r}")
        options[key.strip()] = value.strip()
    return options
