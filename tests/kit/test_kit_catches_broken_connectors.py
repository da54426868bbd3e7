"""The kit must fail for connectors that break the contract: each toy connector here is
``sequence`` with one deliberate bug, and the kit scenario that should catch it must
fail, saying what went wrong (records lost, or committed twice)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from sluicegate.api import SourceReaderContext, SplitEnumerator, SplitEnumeratorContext
from sluicegate.testing import ConnectorTestKit, KitEnv
from sluicegate_connectors.sequence import SequenceReader, SequenceSource, SequenceSplit


class ForgetfulEnumerator(SplitEnumerator[SequenceSplit]):
    """Delegates to the sequence enumerator, but forgets splits added back (the bug)."""

    def __init__(self, inner: SplitEnumerator[SequenceSplit]) -> None:
        self.inner = inner

    def start(self) -> None:
        self.inner.start()

    def handle_split_request(self, subtask: int, hostname: str | None) -> None:
        self.inner.handle_split_request(subtask, hostname)

    def add_splits_back(self, splits: list[SequenceSplit], subtask: int) -> None:
        pass  # the bug: a failed reader's splits are never read again

    def add_reader(self, subtask: int) -> None:
        self.inner.add_reader(subtask)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return self.inner.snapshot_state(checkpoint_id)


class ForgetfulSource(SequenceSource):
    def create_enumerator(self, context: SplitEnumeratorContext[SequenceSplit]) -> Any:
        return ForgetfulEnumerator(super().create_enumerator(context))

    def restore_enumerator(self, context: SplitEnumeratorContext[SequenceSplit], checkpoint: Any) -> Any:
        return ForgetfulEnumerator(super().restore_enumerator(context, checkpoint))


class OffByOneReader(SequenceReader):
    """Checkpoints each split one record past where it stands (the bug)."""

    def snapshot_state(self, checkpoint_id: int) -> list[SequenceSplit]:
        return [
            SequenceSplit(s.split_id, s.start, s.end, s.position + 1) for s in super().snapshot_state(checkpoint_id)
        ]


class OffByOneSource(SequenceSource):
    def create_reader(self, context: SourceReaderContext) -> SequenceReader:
        return OffByOneReader(self.options)


class ReEmittingReader(SequenceReader):
    """Restarts every split it is given from the split's start, not its position (the bug)."""

    def add_splits(self, splits: Sequence[SequenceSplit]) -> None:
        super().add_splits([SequenceSplit(s.split_id, s.start, s.end, s.start) for s in splits])


class ReEmittingSource(SequenceSource):
    def create_reader(self, context: SourceReaderContext) -> SequenceReader:
        return ReEmittingReader(self.options)


class BrokenKit(ConnectorTestKit):
    """The kit over a broken variant of ``sequence`` (not collected: the scenarios are
    called by the tests below, which expect them to fail)."""

    connector = "sequence"

    def __init__(self, source_class: type[SequenceSource]) -> None:
        self.source_class = source_class

    def source_options(self, env: KitEnv) -> dict[str, str]:
        return {"splits": "4", "records_per_split": "40"}

    def write_data(self, env: KitEnv, batch: int) -> list[Hashable]:
        return list(range(160)) if batch == 0 else []

    def create_source(self, options: Mapping[str, str]) -> SequenceSource:
        return self.source_class.from_options(options)


def env(tmp_path: Path) -> KitEnv:
    return KitEnv(tmp_path, "broken")


def test_the_kit_passes_the_unbroken_connector(tmp_path: Path) -> None:
    kit = BrokenKit(SequenceSource)
    kit.test_reader_failure_before_a_checkpoint(env(tmp_path))
    kit.test_reader_failure_after_a_checkpoint(env(tmp_path))
    kit.test_splits_of_a_reader_that_never_returns_are_reassigned(env(tmp_path))


def test_an_enumerator_that_forgets_splits_added_back_is_caught(tmp_path: Path) -> None:
    kit = BrokenKit(ForgetfulSource)
    with pytest.raises(AssertionError, match=r"records lost \(never committed\)") as info:
        kit.test_reader_failure_before_a_checkpoint(env(tmp_path))
    assert "(sequence, reader 0 killed before a checkpoint)" in str(info.value)


def test_a_checkpoint_position_off_by_one_is_caught(tmp_path: Path) -> None:
    kit = BrokenKit(OffByOneSource)
    with pytest.raises(AssertionError, match=r"records lost \(never committed\)") as info:
        kit.test_reader_failure_after_a_checkpoint(env(tmp_path))
    assert "the output is not exactly the input (sequence, reader 0 killed after a checkpoint)" in str(info.value)


def test_a_reader_that_re_emits_after_restore_is_caught(tmp_path: Path) -> None:
    kit = BrokenKit(ReEmittingSource)
    with pytest.raises(AssertionError, match=r"records committed more than once"):
        kit.test_reader_failure_after_a_checkpoint(env(tmp_path))
