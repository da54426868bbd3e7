"""The Source: a factory for the enumerator and the readers of one connector."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic

from sluicegate.api.split import JsonStateCodec, SplitCodec, SplitT, StateCodec

if TYPE_CHECKING:
    from sluicegate.api.enumerator import SplitEnumerator, SplitEnumeratorContext
    from sluicegate.api.reader import SourceReader, SourceReaderContext


class Boundedness(enum.Enum):
    BOUNDED = "bounded"
    CONTINUOUS_UNBOUNDED = "continuous_unbounded"


INPUT_WAIT_S = 15.0
"""How long a starting process waits for a source's inputs (``Source.check_inputs``)."""


class Source(ABC, Generic[SplitT]):
    """A connector. Built from string options; raises ConfigError naming a bad option.

    Splits cross the wire through ``split_codec``; the enumerator checkpoint
    through ``enumerator_state_codec`` (by default the state already is JSON data).

    The options, less ``LOCAL_OPTIONS``, are the source's definition (protocol/definition.py):
    every coordinator, reader and Spark query of a source must bring the same one.
    """

    LOCAL_OPTIONS: ClassVar[tuple[str, ...]] = ()
    """Options that say how to reach the data or how fast to read, not what is read (client
    settings, credentials, throttles): names, or prefixes ending in ``.``. They may differ
    between the processes of one source and are never written to the control topics."""
    DEFINITION_DEFAULTS: ClassVar[Mapping[str, str]] = {}
    """Defaults of defining options, so that leaving one out and giving its default value
    define the same source."""

    @classmethod
    @abstractmethod
    def from_options(cls, options: Mapping[str, str]) -> Source[SplitT]: ...

    @property
    @abstractmethod
    def boundedness(self) -> Boundedness: ...

    @property
    @abstractmethod
    def split_codec(self) -> SplitCodec[SplitT]: ...

    @property
    def enumerator_state_codec(self) -> StateCodec[Any]:
        return JsonStateCodec()

    @abstractmethod
    def create_enumerator(self, context: SplitEnumeratorContext[SplitT]) -> SplitEnumerator[SplitT]: ...

    @abstractmethod
    def restore_enumerator(
        self, context: SplitEnumeratorContext[SplitT], checkpoint: Any
    ) -> SplitEnumerator[SplitT]: ...

    @abstractmethod
    def create_reader(self, context: SourceReaderContext) -> SourceReader[SplitT]: ...

    def check_inputs(self, wait_s: float) -> None:
        """Once, where a source is first started (a coordinator with no committed state, a
        Spark query with no checkpoint), before anything reads: what the source was told to
        read exists (a topic, a path). A name that never existed is more often a typo than
        something on its way, so a missing input raises SourceError saying what is missing
        and how to fix it, after waiting up to ``wait_s`` for it (created at the same
        moment). An input that existed and went away later is the enumerator's business, not
        this check's. A source that should wait for its inputs has an option that says so
        and skips the check. Default: nothing to check."""


class SupportsSplitReassignmentOnRecovery:
    """Mix-in for a Source (FLIP-537).

    A reader of such a source does not keep the splits of its restored state: it
    reports them in ReaderRegistration, the coordinator hands them to the
    enumerator, and the enumerator may give them to any reader.
    """
