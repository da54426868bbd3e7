"""A connector option as a Spark query names it, for the messages a query's user reads.

Connectors name their own options (``topics``, ``missing_topics``, ``bootstrap_servers``:
api/errors.py ``option_named``); a Spark user wrote ``subscribe``, ``kafka.bootstrap.servers``
or ``option.missing_topics``. ``OptionWords`` is that translation for one query, built from
the options it gave: the Spark option the user wrote for a connector option where there is
one (``startingOffsetsByTimestamp`` where that was given, ``startingOffsets`` otherwise),
``option.<name>`` for the rest (how a query sets a connector option that Spark has no
name for). ``worded`` rewords what leaves a method of the data source.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from sluicegate.api.errors import ConfigError, SourceError, in_words_of
from sluicegate.spark import file_options, kafka_options

CONNECTOR_PREFIX = "option."

_KAFKA_SPARK_NAMES = {
    **{ours: spark for spark, ours in kafka_options.SUBSCRIPTIONS.items()},
    **{ours: spark for spark, ours in kafka_options.SAME_MEANING.items()},
    "bootstrap_servers": "kafka.bootstrap.servers",
}
_FILE_SPARK_NAMES = {
    "path": "path",
    "format": "format",
    "schema": "schema",
    "on_bad_file": "ignoreCorruptFiles",
    "max_file_age_ms": "maxFileAge",
    **{ours: spark for spark, ours in file_options.CSV.items() if spark != "delimiter" and spark != "charset"},
}
_POSITIONS = {"starting_offsets": kafka_options.STARTING, "stopping_offsets": kafka_options.ENDING}
"""The connector's position options -> Spark's options for them, the first given named."""


@dataclass(frozen=True)
class OptionWords:
    """One query's names for its connector's options (picklable: it travels with the query's
    configuration)."""

    names: tuple[tuple[str, str], ...] = ()
    own: frozenset[str] = frozenset()
    """The names of the query's own options (``parallelism``, ``kafka.bootstrap.servers``),
    lower-cased: a setting already named so stays as it is."""

    @classmethod
    def of(cls, opts: Mapping[str, str], connector: str, own: Iterable[str] = ()) -> OptionWords:
        """``opts``: the query's options, lower-cased keys (as Spark gives them); ``own``:
        the names of the options the query itself reads."""
        spark = _KAFKA_SPARK_NAMES if connector == kafka_options.CONNECTOR else {}
        spark = _FILE_SPARK_NAMES if connector == file_options.CONNECTOR and "path" in opts else spark
        names = dict(spark)
        if connector == kafka_options.CONNECTOR:
            for ours, choices in _POSITIONS.items():
                names[ours] = next((c for c in choices if c.lower() in opts), choices[-1])
        # a connector option the user gave as option.<name> is named so
        names.update({key[len(CONNECTOR_PREFIX) :]: key for key in opts if key.startswith(CONNECTOR_PREFIX)})
        return cls(tuple(sorted(names.items())), frozenset(name.lower() for name in own))

    def __call__(self, option: str) -> str:
        named = dict(self.names).get(option)
        if named is not None:
            return named
        if option.lower() in self.own or option.startswith(("kafka.", CONNECTOR_PREFIX)):
            return option
        return f"{CONNECTOR_PREFIX}{option}"


P = ParamSpec("P")
R = TypeVar("R")


def reworded(error: ConfigError | SourceError, words: Callable[[str], str]) -> ConfigError | SourceError:
    if isinstance(error, ConfigError):
        return error.in_words_of(words)
    return SourceError(in_words_of(str(error), words))


def worded_reads(rows: Iterator[R], words: Callable[[str], str]) -> Iterator[R]:
    """``rows``, with a ConfigError or SourceError in the query's words (an executor's read:
    it fails as it iterates, after ``read`` returned)."""
    try:
        yield from rows
    except (ConfigError, SourceError) as exc:
        raise reworded(exc, words) from None


def worded(words_of: Callable[[Any], OptionWords]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A method whose ConfigError and SourceError leave it in the query's words
    (``words_of(self)``)."""

    def decorate(method: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(method)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return method(*args, **kwargs)
            except (ConfigError, SourceError) as exc:
                raise reworded(exc, words_of(args[0])) from None

        return wrapper

    return decorate
