"""The kit's verdict on a run's output: every expected record exactly once, nothing else."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable

_SHOWN = 5


def exactly_once_problems(actual: Iterable[Hashable], expected: Iterable[Hashable]) -> list[str]:
    """What is wrong with ``actual`` (the keys of the records a run committed) against
    ``expected`` (the keys of the records written): missing, duplicated, unexpected."""
    got = Counter(actual)
    want = Counter(expected)
    missing = sorted((want - got).items(), key=repr)
    extra = got - want
    twice = sorted(((k, n) for k, n in extra.items() if k in want), key=repr)
    foreign = sorted(((k, n) for k, n in extra.items() if k not in want), key=repr)
    problems = []
    if missing:
        problems.append(
            f"{sum(n for _, n in missing)} records lost (never committed), e.g. {[k for k, _ in missing[:_SHOWN]]}"
        )
    if twice:
        problems.append(
            f"{sum(n for _, n in twice)} records committed more than once, e.g. {[k for k, _ in twice[:_SHOWN]]}"
        )
    if foreign:
        problems.append(
            f"{sum(n for _, n in foreign)} records that were never written, e.g. {[k for k, _ in foreign[:_SHOWN]]}"
        )
    return problems


def assert_exactly_once(actual: Iterable[Hashable], expected: Iterable[Hashable], context: str = "") -> None:
    """AssertionError listing what ``exactly_once_problems`` found, with ``context``."""
    problems = exactly_once_problems(actual, expected)
    if problems:
        where = f" ({context})" if context else ""
        raise AssertionError(f"the output is not exactly the input{where}:\n  " + "\n  ".join(problems))
