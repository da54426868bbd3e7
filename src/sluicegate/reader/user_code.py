"""The user's code a reader runs, named ``module:attribute`` on the command line
(``--process``, ``--output sink:...``): imported from the directory the reader started
in and the Python path; a name that does not import fails at start, naming the setting."""

from __future__ import annotations

import importlib
import sys
import typing
from collections.abc import Callable
from typing import Any

from sluicegate.api.errors import ConfigError


def load_callable(spec: str, setting: str, what: str) -> Callable[..., Any]:
    """``module:name`` (``module.sub:obj.method`` too) as a callable; ``what`` says what it
    should be in the messages ("function", "sink factory")."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ConfigError(setting, f"expected module:{what.replace(' ', '_')}, got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")  # the user's module next to where the reader was started
    try:
        target: Any = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise ConfigError(setting, f"cannot import {module_name!r}: {exc}") from None
    for part in attr.strip().split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(setting, f"{module_name} has no {attr!r}") from None
    if not callable(target):
        raise ConfigError(setting, f"{spec} is a {type(target).__name__}, not a {what}")
    return typing.cast(Callable[..., Any], target)
