"""The user's function between what a reader reads and what it writes.

Two forms, told apart by the annotation of the function's first parameter:

- a *batch function* (``def f(batch: pyarrow.RecordBatch) -> pyarrow.RecordBatch``) gets
  each input batch whole and returns the batch to write (``records.output_batch`` says
  which columns count): the fast path, vectorised;
- a *record function* (anything else) gets one ``Message`` at a time and returns a
  ``Message`` (map), None (filter) or an iterable of them (flat-map).

No function writes each record as it was read (key, value, headers, timestamp).

A function with a second parameter is *stateful*: it gets the state of the record's split
with each record (a dict of JSON-ready values, ``def count(message, state)``), or with
each batch a ``BatchState`` (each row's split id and each split's dict). The reader saves
the states with its checkpoints and gives a split's state to whoever reads the split next
(reader/split_state.py). A stateful function should change its state only once it can no
longer raise: under ``skip`` and ``retry`` a change made before the exception stays.
``skip`` is refused for a stateful batch function, whose failing rows are isolated by
calling it again on rows it has seen.

When the function raises, the user's policy (``--on-process-error``) decides:

- ``fail`` (default): the reader stops with exit 1, naming the record; nothing read
  since the last checkpoint was committed, so a restart reads it again: no loss;
- ``skip``: the failed records are dead-lettered with the exception (inside the
  checkpoint's transaction) and the rest goes on. For a batch function the failing
  rows are isolated by halving the batch, so one bad row costs only itself;
- ``retry``: the call is tried again ``--process-retries`` times, waiting 0.1 s, 0.2 s,
  0.4 s ... in between (a flaky lookup), then it fails as with ``fail``.

The function runs in a worker thread (the host's heartbeats go on meanwhile), one call
at a time.
"""

from __future__ import annotations

import enum
import inspect
import logging
import time
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate.api.options import choice_option
from sluicegate.reader.output import OutputSpec
from sluicegate.reader.records import Message, messages, messages_batch, output_batch
from sluicegate.reader.split_state import SplitState
from sluicegate.reader.user_code import load_callable

log = logging.getLogger("sluicegate.reader")

PROCESS_SETTING = "--process"
POLICY_SETTING = "--on-process-error"
RETRIES_SETTING = "--process-retries"
RETRY_FIRST_WAIT_S = 0.1
DEAD_LETTER_KIND = "process-error"


class ErrorPolicy(enum.Enum):
    FAIL = "fail"
    SKIP = "skip"
    RETRY = "retry"

    @classmethod
    def parse(cls, text: str) -> ErrorPolicy:
        return cls(choice_option({POLICY_SETTING: text}, POLICY_SETTING, tuple(p.value for p in cls)))


class ProcessingFailed(SourceError):
    """The user's function failed on a record and the policy says stop."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what}. Nothing read since the last checkpoint was committed, so a restart reads it again; "
            f"{POLICY_SETTING} skip dead-letters such records and goes on"
        )


@dataclass(frozen=True)
class Failure:
    """An input record the function failed on (skip policy): dead-lettered."""

    record: Message
    split_id: str | None
    reason: str


@dataclass
class Processed:
    batch: pa.RecordBatch
    """To write, in ``records.OUTPUT_SCHEMA``."""
    failures: list[Failure] = field(default_factory=list)


@dataclass(frozen=True)
class ErrorHandling:
    policy: ErrorPolicy = ErrorPolicy.FAIL
    retries: int = 3
    sleep: Callable[[float], None] = time.sleep

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; under ``retry``, tried again on an exception before it is raised."""
        attempts = 1 + (self.retries if self.policy is ErrorPolicy.RETRY else 0)
        for attempt in range(attempts):
            try:
                return fn(*args)
            except Exception as exc:
                if attempt + 1 == attempts:
                    raise
                wait = RETRY_FIRST_WAIT_S * 2**attempt
                log.warning("the function failed (%s); trying again in %.1f s", describe(exc), wait)
                self.sleep(wait)
        raise AssertionError("unreachable")


@dataclass(frozen=True)
class BatchState:
    """What a stateful batch function gets beside each batch: the split each row was read
    from, and the state of each split in the batch (``state[split_id]``)."""

    split_ids: list[str]
    states: Mapping[str, SplitState]

    def __getitem__(self, split_id: str) -> SplitState:
        return self.states[split_id]


class Processor(ABC):
    """Applies one form of user function to input batches."""

    name = "identity"
    stateful = False
    """Whether ``apply`` needs ``state``: the split of each row and the state of each split."""

    @abstractmethod
    def apply(self, batch: pa.RecordBatch, state: BatchState | None = None) -> Processed: ...


class Identity(Processor):
    """No function: each record written as read."""

    def apply(self, batch: pa.RecordBatch, state: BatchState | None = None) -> Processed:
        return Processed(output_batch(batch))


class BatchFunction(Processor):
    def __init__(self, fn: Callable[..., Any], errors: ErrorHandling, name: str, *, stateful: bool = False) -> None:
        if stateful and errors.policy is ErrorPolicy.SKIP:
            raise ConfigError(
                POLICY_SETTING,
                f"skip cannot be used with {name}, a stateful batch function: skip isolates a failing row "
                "by calling the function again on rows it has seen, so their effect on the state would count "
                "twice; use fail or retry, or a record function",
            )
        self.fn = fn
        self.errors = errors
        self.name = name
        self.stateful = stateful

    def apply(self, batch: pa.RecordBatch, state: BatchState | None = None) -> Processed:
        if self.stateful:
            assert state is not None, "a stateful function needs the state"
            fn = self.fn
            call: Callable[[pa.RecordBatch], Any] = lambda b: fn(b, state)  # noqa: E731
        else:
            call = self.fn
        if self.errors.policy is ErrorPolicy.SKIP:
            return self._isolating(batch, call)
        try:
            return Processed(self._call(batch, call))
        except Exception as exc:
            first = messages(batch.slice(0, 1))[0] if batch.num_rows else Message(None)
            raise ProcessingFailed(
                self._failed(f"a batch of {batch.num_rows} records from {first.where()}", exc)
            ) from exc

    def _call(self, batch: pa.RecordBatch, call: Callable[[pa.RecordBatch], Any]) -> pa.RecordBatch:
        return output_batch(self.errors.call(call, batch))

    def _isolating(self, batch: pa.RecordBatch, call: Callable[[pa.RecordBatch], Any]) -> Processed:
        """Halve a failing batch until the failing rows are alone: they are the failures."""
        try:
            return Processed(self._call(batch, call))
        except Exception as exc:
            if batch.num_rows <= 1:
                failures = [Failure(m, _split_id(batch), describe(exc)) for m in messages(batch)]
                return Processed(output_batch(batch.slice(0, 0)), failures)
        half = batch.num_rows // 2
        left, right = self._isolating(batch.slice(0, half), call), self._isolating(batch.slice(half), call)
        parts = [p.batch for p in (left, right) if p.batch.num_rows]
        joined = pa.Table.from_batches(parts).combine_chunks().to_batches() if parts else []
        return Processed(
            joined[0] if joined else left.batch,
            left.failures + right.failures,
        )

    def _failed(self, what: str, exc: BaseException) -> str:
        return f"{self.name} failed on {what}: {describe(exc)}"


class RecordFunction(Processor):
    def __init__(self, fn: Callable[..., Any], errors: ErrorHandling, name: str, *, stateful: bool = False) -> None:
        self.fn = fn
        self.errors = errors
        self.name = name
        self.stateful = stateful

    def apply(self, batch: pa.RecordBatch, state: BatchState | None = None) -> Processed:
        if self.stateful:
            assert state is not None, "a stateful function needs the state"
            return self._each(batch, state.split_ids, state.states)
        split_ids = batch.column("split_id").to_pylist() if "split_id" in batch.schema.names else None
        return self._each(batch, split_ids, None)

    def _each(
        self, batch: pa.RecordBatch, split_ids: list[str] | None, states: Mapping[str, SplitState] | None
    ) -> Processed:
        out: list[Message] = []
        failures: list[Failure] = []
        fn = self.fn
        retrying = self.errors.policy is ErrorPolicy.RETRY
        # the function called directly unless retries are asked for: this runs per record
        call = fn if not retrying else partial(self.errors.call, fn)
        for i, message in enumerate(messages(batch)):
            try:
                if states is not None:
                    assert split_ids is not None
                    state = states[split_ids[i]]
                    result = fn(message, state) if not retrying else self.errors.call(fn, message, state)
                else:
                    result = call(message)
                if type(result) is Message:
                    out.append(result)
                else:
                    out.extend(self._results(result))
            except Exception as exc:
                if self.errors.policy is not ErrorPolicy.SKIP:
                    raise ProcessingFailed(f"{self.name} failed on {message.where()}: {describe(exc)}") from exc
                failures.append(Failure(message, split_ids[i] if split_ids else None, describe(exc)))
        return Processed(messages_batch(out), failures)

    @staticmethod
    def _results(result: Any) -> Iterable[Message]:
        if result is None:
            return ()
        if isinstance(result, Message):
            return (result,)
        if isinstance(result, (bytes, str, dict)) or not isinstance(result, Iterable):
            raise TypeError(f"returned {type(result).__name__}: return a Message, None or an iterable of Messages")
        items = list(result)
        wrong = [type(i).__name__ for i in items if not isinstance(i, Message)]
        if wrong:
            raise TypeError(f"returned an iterable holding {wrong[0]}: every item must be a Message")
        return items


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _split_id(batch: pa.RecordBatch) -> str | None:
    if "split_id" in batch.schema.names and batch.num_rows:
        value = batch.column("split_id")[0].as_py()
        return str(value) if value is not None else None
    return None


def is_batch_function(fn: Callable[..., Any]) -> bool:
    """True when the first parameter is annotated ``pyarrow.RecordBatch`` (also as text,
    as under ``from __future__ import annotations``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        raise ConfigError(PROCESS_SETTING, f"{_name(fn)} takes no parameter: it must take a record or a batch")
    annotation: object = params[0].annotation
    if isinstance(annotation, str):
        text = annotation
        try:
            annotation = typing.get_type_hints(fn).get(params[0].name, text)
        except Exception:  # a name the function's module cannot resolve: judge the text
            return text.split(".")[-1] == "RecordBatch"
    return annotation is pa.RecordBatch


def load_function(spec: str) -> Callable[..., Any]:
    """The user's function named by ``--process`` (``module:function``)."""
    return load_callable(spec, PROCESS_SETTING, "function")


def check_output_takes_a_function(output: OutputSpec) -> None:
    """A function's result is records: the JSON envelope (of what a connector read) has no
    place for them."""
    if not output.records:
        raise ConfigError(PROCESS_SETTING, "writes records: it cannot be used with --output-format envelope")


def is_stateful(fn: Callable[..., Any]) -> bool:
    """True when the function takes a second argument: the state (reader/split_state.py)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is inspect.Parameter.empty
    ]
    if len(positional) > 2:
        raise ConfigError(
            PROCESS_SETTING,
            f"{_name(fn)} takes {len(positional)} arguments: take a record (or a batch) and, "
            "for a stateful function, its state",
        )
    return len(positional) == 2


def processor_for(fn: Callable[..., Any] | None, errors: ErrorHandling | None = None) -> Processor:
    """The processor for a user's function (None: identity)."""
    if fn is None:
        return Identity()
    errors = errors or ErrorHandling()
    stateful = is_stateful(fn)
    if is_batch_function(fn):
        return BatchFunction(fn, errors, _name(fn), stateful=stateful)
    return RecordFunction(fn, errors, _name(fn), stateful=stateful)


def _name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}:{name}" if module else name
