"""Finding connectors: every connector is a Source class registered under the
``sluicegate.connectors`` entry-point group (see pyproject.toml), or named directly
as ``package.module:SourceClass`` (a connector that is importable but not installed
as a distribution: one under development, or docs/examples/sqltable)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.api.source import Source

ENTRY_POINT_GROUP = "sluicegate.connectors"


def available_connectors() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def load_source(connector: str, options: Mapping[str, str]) -> Source[Any]:
    """Build the connector's Source from its options; ConfigError names what is wrong.
    ``connector`` is an entry-point name, or ``package.module:SourceClass``."""
    source: Source[Any] = source_class(connector).from_options(options)
    return source


def source_class(connector: str) -> type[Source[Any]]:
    """The connector's Source class (not built); ConfigError if there is none by that name."""
    found = _find_class(connector)
    if not (isinstance(found, type) and issubclass(found, Source)):
        raise ConfigError("connector", f"{connector!r} does not name a sluicegate Source class")
    return found


def _find_class(connector: str) -> Any:
    module_name, colon, class_name = connector.partition(":")
    if colon:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError("connector", f"cannot import {module_name!r} (from {connector!r}): {exc}") from None
        if not hasattr(module, class_name):
            raise ConfigError("connector", f"module {module_name!r} has no {class_name!r}")
        return getattr(module, class_name)
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == connector]
    if not matches:
        known = ", ".join(available_connectors()) or "none installed"
        raise ConfigError("connector", f"no connector named {connector!r} (known: {known}, or package.module:Class)")
    return matches[0].load()


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    """``["splits=200", "rate=10"]`` -> dict; ConfigError naming ``--option`` otherwise."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--option", f"expected key=value, got {pair!r}")
        options[key.strip()] = value.strip()
    return options
