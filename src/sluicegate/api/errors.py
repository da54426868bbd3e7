"""Errors connector authors and operators see."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is missing or invalid. The message always names the setting."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"invalid setting {setting!r}: {problem}")
        self.setting = setting
        self.problem = problem


class SourceError(RuntimeError):
    """A connector cannot go on, for a reason its user must see and act on (for example
    data deleted before it was read, with ``fail_on_data_loss``). Hosts stop with the
    message alone, no traceback: it names what and where."""


class NoLiveReaderError(RuntimeError):
    """An assignment named a subtask that has no live attempt (PROTOCOL semantics 6).

    The enumerator keeps the splits it tried to assign, exactly as Flink's
    context refuses assignments to unregistered readers.
    """

    def __init__(self, subtask: int) -> None:
        super().__init__(f"subtask {subtask} has no live reader attempt; the split stays with the enumerator")
        self.subtask = subtask
