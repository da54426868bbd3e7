"""Ratios of two sides paired by repetition, for the side-by-side benchmarks.

A repetition runs every side once, next to each other; the machine drifts between
repetitions (both sides of the file benchmark got ~20 % faster over four of them), so the
ratio of two medians mixes that drift in. The ratio within each repetition does not: its
median and range say how far apart the sides are, run for run.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping


def paired_ratios(ours: Mapping[int, float], theirs: Mapping[int, float]) -> list[float]:
    """``ours[r] / theirs[r]`` for each repetition ``r`` both sides have a rate for."""
    return [ours[r] / theirs[r] for r in sorted(ours.keys() & theirs.keys()) if theirs[r] > 0]


def paired_text(ratios: list[float]) -> str:
    """'1.03x (0.91x - 1.10x) over 4 repetitions', or '' without a pair."""
    if not ratios:
        return ""
    spread = f" ({min(ratios):.2f}x - {max(ratios):.2f}x)" if len(ratios) > 1 else ""
    return f"{statistics.median(ratios):.2f}x{spread} over {len(ratios)} repetition(s)"
