"""Splits: the units of work an enumerator hands out and a reader reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

WireSplit = dict[str, Any]
"""A split as it travels in control messages: a JSON object with at least ``split_id``."""


@runtime_checkable
class SourceSplit(Protocol):
    """What every connector split exposes: an id stable for the split's whole life."""

    @property
    def split_id(self) -> str: ...


SplitT = TypeVar("SplitT", bound=SourceSplit)
StateT = TypeVar("StateT")


class SplitCodec(Protocol[SplitT]):
    """Turns a connector's split (including its position) into a wire object and back."""

    def to_wire(self, split: SplitT) -> WireSplit: ...

    def from_wire(self, data: Mapping[str, Any]) -> SplitT: ...


class StateCodec(Protocol, Generic[StateT]):
    """Turns an enumerator checkpoint into JSON-compatible data and back."""

    def to_json(self, state: StateT) -> Any: ...

    def from_json(self, data: Any) -> StateT: ...


class JsonStateCodec:
    """The default state codec: the enumerator's state already is JSON data."""

    def to_json(self, state: Any) -> Any:
        return state

    def from_json(self, data: Any) -> Any:
        return data
