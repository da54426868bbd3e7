"""What readers of an unbounded ``sequence`` source wrote, against where they left off: a
test that stops its readers (rather than reading a bounded source to its end) checks that
each split's values were read once each, from the split's start to its last hand-back."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from processes import read_topic

STRIDE = 2**40
"""The sequence connector's unbounded split k starts at k * STRIDE."""


async def final_positions(bootstrap: str, source: str) -> dict[str, int]:
    """Each split's position in the last ReaderLeaving that handed it back (inbox order)."""
    final: dict[str, int] = {}
    for record in await read_topic(bootstrap, f"sluicegate.{source}.coordinator"):
        env = record.json()
        if env["type"] == "ReaderLeaving":
            for split in env["body"]["splits"]:
                final[split["split_id"]] = split["position"]
    return final


def check_sequence_exactly_once(values_by_split: Mapping[str, Iterable[int]], final: Mapping[str, int]) -> None:
    """Each split's values, once each, from its start up to its final position."""
    assert set(values_by_split) <= set(final), (
        f"splits read and never handed back: {sorted(set(values_by_split) - set(final))}"
    )
    for split_id, position in sorted(final.items()):
        got = list(values_by_split.get(split_id, ()))
        start = int(split_id.rsplit("-", 1)[1]) * STRIDE
        twice = [v for v, n in Counter(got).items() if n > 1]
        assert not twice, f"{split_id}: {len(twice)} values read twice, e.g. {twice[:5]}"
        assert sorted(got) == list(range(start, position)), (
            f"{split_id}: {len(got)} values, the last hand-back was at {position - start} (relative)"
        )


def values_by_split(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[int]]:
    """split_id -> the values of the rows (output records with ``split_id`` and ``value``)."""
    values: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        values[row["split_id"]].append(row["value"])
    return dict(values)
