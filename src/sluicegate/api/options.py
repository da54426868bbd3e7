"""Parsing a connector's or host's string options: one rule, one wording of errors."""

from __future__ import annotations

from collections.abc import Mapping

from sluicegate.api.errors import ConfigError


def int_option(options: Mapping[str, str], key: str, default: int | None, minimum: int) -> int:
    """``options[key]`` as an integer >= ``minimum``; ``default`` when it is absent
    (None: the option is required). ConfigError names ``key`` otherwise."""
    raw = options.get(key)
    if raw is None:
        if default is None:
            raise ConfigError(key, "is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(key, f"must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value}")
    return value
