"""Checking settings: one rule and one wording of errors for every integer, duration and
port of every command, connector and Spark option (a ConfigError naming the setting as
the user wrote it)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

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
    return checked_int(key, value, minimum)


def choice_option(options: Mapping[str, str], key: str, choices: tuple[str, ...]) -> str:
    """``options[key]`` (case-insensitive), one of ``choices``; the first when it is absent."""
    raw = options.get(key, choices[0])
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(key, f"must be {', '.join(choices[:-1])} or {choices[-1]}, got {raw!r}")
    return value


def checked_int(setting: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """``value`` if it is an integer (not a bool) within ``minimum``..``maximum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(setting, f"must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise ConfigError(setting, f"must be {bound}, got {value}")
    return value


def checked_port(setting: str, value: object) -> int:
    """A TCP port to listen on, or 0 for off."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
        raise ConfigError(setting, f"must be a TCP port (1..65535) or 0 for off, got {value!r}")
    return value


def checked_host(setting: str, value: str) -> str:
    """A host name or address to connect to: no scheme, no path, no port."""
    host = value.strip()
    if not host or any(c in host for c in "/ ") or host.count(":") == 1:
        raise ConfigError(setting, f"must be a host name or address (no port, no scheme), got {value!r}")
    return host


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(setting: str, value: str) -> int:
    """A duration written with its unit (``500ms``, ``90s``, ``10m``, ``2h``, ``1d``) in ms, > 0."""
    match = _DURATION.match(value)
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(setting, f"must be a duration such as 90s, 10m or 2h, got {value!r}")
    return int(float(match.group(1)) * _UNIT_MS[match.group(2)])


def unknown_option(
    key: str, known: Iterable[str], owner: str, also: str = "", setting: str | None = None
) -> ConfigError:
    """The error for an option nobody reads: it names ``key`` (as ``setting`` where that
    says more, e.g. ``source[0].key``) and the closest known names (a typo is the likely
    cause), or, where none is close, every known one (``also``: the open families, such as
    ``kafka.<client setting>``). Names compare case-insensitively, as Spark's do."""
    names = sorted(set(known), key=str.lower)
    by_lower = {name.lower(): name for name in names}
    close = [by_lower[c] for c in difflib.get_close_matches(key.lower(), list(by_lower), n=3, cutoff=0.6)]
    if close:
        others = f" (or {' or '.join(repr(c) for c in close[1:])})" if len(close) > 1 else ""
        return ConfigError(setting or key, f"unknown option of {owner}; did you mean {close[0]!r}?{others}")
    listed = ", ".join(names) + (f", {also}" if also else "")
    return ConfigError(setting or key, f"unknown option of {owner} (known: {listed})")
