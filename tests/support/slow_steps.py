"""A source whose coordinator steps take long: the ``sequence`` connector, whose enumerator
spends ``add_reader_s`` seconds of CPU (the GIL held, as a real step holds it) in every
``add_reader``. A step of seconds without a million splits, for the tests of what a long
step must not stop (coordinator/step_thread.py, silence.py ``reaffirm_due``).

Named ``slow_steps:SlowRegistrationSource`` as a connector (tests/support is on the path).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sluicegate.api import Boundedness, SplitEnumeratorContext
from sluicegate_connectors.sequence.enumerator import SequenceEnumerator
from sluicegate_connectors.sequence.options import SequenceOptions
from sluicegate_connectors.sequence.source import SequenceSource
from sluicegate_connectors.sequence.split import SequenceSplit


def spin(seconds: float) -> None:
    """Keep the CPU (and the GIL) busy for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


class SlowRegistrationEnumerator(SequenceEnumerator):  # Any to mypy (pyproject.toml)
    add_reader_s = 0.0
    """Set by the source (the enumerator's constructor is the sequence connector's)."""

    def add_reader(self, subtask: int) -> None:
        spin(self.add_reader_s)
        super().add_reader(subtask)


class SlowRegistrationSource(SequenceSource):  # Any to mypy (pyproject.toml)
    def __init__(self, options: SequenceOptions, add_reader_s: float) -> None:
        super().__init__(options)
        self.add_reader_s = add_reader_s

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SlowRegistrationSource:
        rest = dict(options)
        add_reader_s = float(rest.pop("add_reader_s", "0"))
        return cls(SequenceOptions.parse(rest), add_reader_s)

    def create_enumerator(self, context: SplitEnumeratorContext[SequenceSplit]) -> SequenceEnumerator:
        bounded = self.boundedness is Boundedness.BOUNDED
        fresh = [(0, self.options.released_at_start)]
        enumerator = SlowRegistrationEnumerator(context, [], bounded, self.options, fresh_runs=fresh)
        enumerator.add_reader_s = self.add_reader_s
        return enumerator
