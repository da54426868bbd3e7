"""Errors connector authors and operators see.

A message that tells the user to set an option names it with ``option_named``, in
backquotes: `topics`, `missing_topics=wait`. That is the connector's own name, which the
command line (``--option missing_topics=wait``) and ``run_reader`` (``options=``) take
as it is; a host whose users name options otherwise (Spark: ``subscribe``,
``option.missing_topics``) words it as its user would (``in_words_of``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

_NAMED = re.compile(r"`([A-Za-z_][\w.]*)(=[^`]*)?`")


def option_named(name: str, value: str | None = None) -> str:
    """A connector option, or a setting of it, as a message names it."""
    return f"`{name}`" if value is None else f"`{name}={value}`"


def in_words_of(message: str, words: Callable[[str], str]) -> str:
    """``message`` with each option named by ``option_named`` as ``words`` (the connector's
    name -> the host user's) names it."""
    return _NAMED.sub(lambda m: f"`{words(m.group(1))}{m.group(2) or ''}`", message)


class ConfigError(ValueError):
    """A setting is missing or invalid. The message always names the setting."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"invalid setting {setting!r}: {problem}")
        self.setting = setting
        self.problem = problem

    def in_words_of(self, words: Callable[[str], str]) -> ConfigError:
        """The same error with the setting and the options it names as ``words`` names them."""
        return ConfigError(words(self.setting), in_words_of(self.problem, words))


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
