"""What a source is: its connector and the options that say what it reads.

A source's definition is part of its committed state (the coordinator's ``definition``
state part, written by the first coordinator). Every process that serves or reads the
source brings its own (a coordinator from its settings, a reader host or a Spark query
from its options) and is refused at start when it differs, naming the options: a
standby started with other topics must never take over a source and quietly read
something else under its name. A deliberate change is ``sluicegate source redefine``,
which records it in the control log (``SourceRedefined``).

Options that say how to reach the data or how fast to read, not what to read (client
settings, credentials, throttles), are not part of it: a connector names them in
``Source.LOCAL_OPTIONS``. They may differ between processes (a reader principal and a
coordinator principal) and are never written to the control topics.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from sluicegate.api.errors import ConfigError
from sluicegate.api.source import Source

NOT_SET = "(not set)"


@dataclass(frozen=True)
class SourceDefinition:
    connector: str
    options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, connector: str, options: Mapping[str, str], source_class: type[Source[Any]] | None = None
    ) -> SourceDefinition:
        """The definition a process brings: ``options`` without the connector's local ones,
        with its documented defaults filled in (so that leaving an option at its default and
        giving the default are the same definition)."""
        if source_class is None:
            from sluicegate.connectors import source_class as find

            source_class = find(connector)
        local = tuple(source_class.LOCAL_OPTIONS)
        defining = {k: str(v) for k, v in source_class.DEFINITION_DEFAULTS.items()}
        defining.update({k: str(v) for k, v in options.items() if not _is_local(k, local)})
        return cls(connector, dict(sorted(defining.items())))

    @property
    def fingerprint(self) -> str:
        canonical = orjson.dumps({"connector": self.connector, "options": dict(sorted(self.options.items()))})
        return hashlib.sha256(canonical).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {"connector": self.connector, "options": dict(sorted(self.options.items()))}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceDefinition:
        """A recorded definition as this code defines a source: options that are local now
        (recorded by an older sluicegate, before they were) are left out and the defaults
        filled in, so that a source recorded then is not refused for them. A connector this
        code cannot load is taken as recorded."""
        connector = str(data["connector"])
        options = {str(k): str(v) for k, v in dict(data.get("options") or {}).items()}
        try:
            return cls.of(connector, options)
        except ConfigError:
            return cls(connector, options)

    def differences(self, given: SourceDefinition) -> list[str]:
        """One line per difference, the committed value (``self``) first."""
        lines = []
        if self.connector != given.connector:
            lines.append(f"connector: {self.connector} (source) vs {given.connector} (given)")
        for key in sorted(set(self.options) | set(given.options)):
            ours, theirs = self.options.get(key, NOT_SET), given.options.get(key, NOT_SET)
            if ours != theirs:
                lines.append(f"option {key}: {ours} (source) vs {theirs} (given)")
        return lines

    def describe(self) -> str:
        options = ", ".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"connector {self.connector}" + (f" ({options})" if options else "")


class DefinitionMismatchError(ConfigError):
    """A process brought another definition of a source than the committed one."""

    def __init__(self, source: str, who: str, committed: SourceDefinition, given: SourceDefinition) -> None:
        self.source = source
        self.committed = committed
        self.given = given
        super().__init__("source definition", mismatch_message(source, who, committed, given))


class DefinitionRefusedError(RuntimeError):
    """The coordinator refused this reader's registration: it brings another definition of
    the source (the message says what differs). Final: the process stops."""


def mismatch_message(source: str, who: str, committed: SourceDefinition, given: SourceDefinition) -> str:
    """What a person reads when ``who`` is refused: what differs and the two ways out."""
    lines = "; ".join(committed.differences(given))
    return (
        f"{who} brings another definition of source {source} than the one it was created with: {lines}. "
        f"Start it with the source's definition ({committed.describe()}), or change the source on purpose "
        f"with `sluicegate source redefine --source {source} --connector {given.connector} --option ...`"
    )


def _is_local(key: str, local: tuple[str, ...]) -> bool:
    return any(key == name or (name.endswith(".") and key.startswith(name)) for name in local)
