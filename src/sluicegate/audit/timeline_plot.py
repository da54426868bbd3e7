"""Draw a ``Timeline`` (timeline.py) with matplotlib: one lane per subtask.

In each lane the splits the subtask owned are bars over time, stacked in rows so
that splits held at once never overlap, coloured by split (the same split keeps its
colour when it moves to another subtask). Markers show registrations, fenced
messages, failed attempts, releases and leaves; dashed verticals new coordinator
epochs; the low watermark is a step line on a second axis. The format follows the
file's extension (.png, .svg, .pdf). ``since_ms`` draws only the time from then on (the
last minutes of a long history): what ended before is left out, what began before
starts at the left edge.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from sluicegate.audit.timeline import Mark, MarkKind, Ownership, Timeline
from sluicegate.extras import require

SUPPORTED = (".png", ".svg", ".pdf")
_LANE = 0.8
"""Height of a lane's bar area (lanes are 1 apart)."""
_LABEL_SPLITS_UP_TO = 24
"""With at most this many splits, bars carry their split id where there is room."""
_BARS_UP_TO = 60
"""With more splits than this, a lane shows how many splits it owned over time instead of
one bar per split (thousands of bars are neither readable nor quick to draw)."""
_MARGIN = 0.02
"""Room after the last event, as a share of the axis: its mark drawn whole, not on the edge."""
_MARKERS: dict[MarkKind, tuple[str, str, float, str]] = {
    # kind: (marker, colour, size, where in the lane: top / bottom)
    MarkKind.REGISTERED: ("^", "#1a9850", 90, "bottom"),
    MarkKind.FENCED: ("x", "#f46d43", 60, "middle"),
    MarkKind.FAILED: ("X", "#d73027", 140, "top"),
    MarkKind.RELEASED: ("v", "#4575b4", 70, "top"),
    MarkKind.LEFT: ("s", "#542788", 70, "bottom"),
}


class UnsupportedFormat(ValueError):
    pass


def _rows(ownerships: list[Ownership], end_ms: int) -> dict[int, int]:
    """Row of each ownership (by index) inside its lane: the first row free at its start."""
    free_at: list[int] = []
    rows: dict[int, int] = {}
    for i, o in sorted(enumerate(ownerships), key=lambda item: (item[1].start_ms, item[1].split_id)):
        end = o.end_ms if o.end_ms is not None else end_ms
        for row, free in enumerate(free_at):
            if free <= o.start_ms:
                free_at[row] = max(end, o.start_ms + 1)
                rows[i] = row
                break
        else:
            rows[i] = len(free_at)
            free_at.append(max(end, o.start_ms + 1))
    return rows


def _colour(split_id: str, palette: Any) -> Any:
    return palette(zlib.crc32(split_id.encode()) % palette.N)


def clipped(timeline: Timeline, since_ms: int) -> Timeline:
    """What to draw of ``timeline`` from ``since_ms`` on: ownerships that ended before are
    left out and the others start at ``since_ms`` at the earliest; events before it are
    left out, but an attempt still live then keeps its registration (its lane's shading
    starts at the left edge); the low watermark starts at the value it had then."""
    ownerships = [
        dataclasses.replace(o, start_ms=max(o.start_ms, since_ms))
        for o in timeline.ownerships
        if o.end_ms is None or o.end_ms > since_ms
    ]
    live: dict[int, Mark] = {}
    for mark in timeline.marks:
        if mark.ts_ms >= since_ms or mark.subtask is None:
            continue
        if mark.kind is MarkKind.REGISTERED:
            live[mark.subtask] = dataclasses.replace(mark, ts_ms=since_ms)
        elif mark.kind in (MarkKind.FAILED, MarkKind.LEFT):
            live.pop(mark.subtask, None)
    before = [w for t, w in timeline.low_watermarks if t < since_ms]
    low = ([(since_ms, before[-1])] if before else []) + [(t, w) for t, w in timeline.low_watermarks if t >= since_ms]
    return dataclasses.replace(
        timeline,
        ownerships=ownerships,
        marks=[*live.values(), *(m for m in timeline.marks if m.ts_ms >= since_ms)],
        low_watermarks=low,
        acks=[a for a in timeline.acks if a.ts_ms >= since_ms],
    )


def require_plots() -> ModuleType:
    """matplotlib, or MissingExtra naming ``pip install 'sluicegate[plots]'``."""
    return require("plots", "matplotlib", "sluicegate audit --timeline")


def draw_timeline(timeline: Timeline, path: Path, *, title: str = "", since_ms: int | None = None) -> None:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED:
        raise UnsupportedFormat(f"--timeline {path}: the file must end in {', '.join(SUPPORTED)}")
    matplotlib = require_plots()
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    lanes = timeline.subtasks or [0]
    t0 = timeline.start_ms
    if since_ms is not None and since_ms > t0:
        timeline, t0 = clipped(timeline, since_ms), since_ms
    # The axis ends at the last event, not at the last record (issue 51 item 5); a window
    # of ``--last`` in which nothing happened still spans the time it asked for.
    last = timeline.last_event_ms
    end_ms = max(last if last > t0 else timeline.end_ms, t0 + 1)

    def x(ms: int) -> float:
        return (ms - t0) / 1000

    height = 2.4 + 0.9 * len(lanes)  # inches: title, axis and legend, then the lanes
    fig, ax = plt.subplots(figsize=(14, height), dpi=110)
    by_lane: dict[int, list[Ownership]] = {}
    for o in timeline.ownerships:
        by_lane.setdefault(o.subtask, []).append(o)
    span = x(end_ms)
    _draw_attempts(ax, timeline, x, end_ms)
    peaks: dict[int, int] = {}
    if len(timeline.split_ids) <= _BARS_UP_TO:
        _draw_split_bars(ax, by_lane, x, end_ms, span, plt.get_cmap("tab20"))
        what = "bars: splits owned, one colour per split"
    else:
        peaks = _draw_split_counts(ax, by_lane, x, end_ms)
        what = "filled: number of splits owned"
    _draw_marks(ax, timeline.marks, x)
    for mark in timeline.marks:
        if mark.kind is MarkKind.EPOCH:
            ax.axvline(x(mark.ts_ms), color="0.3", linestyle="--", linewidth=1)
            ax.text(
                x(mark.ts_ms),
                1.0,
                f" {mark.detail}",
                fontsize=7,
                color="0.2",
                va="bottom",
                rotation=45,
                transform=ax.get_xaxis_transform(),
            )
    ax.set_yticks(lanes, [_lane_label(s, timeline.hosts.get(s), peaks.get(s)) for s in lanes])
    ax.set_ylim(min(lanes) - 0.6, max(lanes) + 0.75)
    ax.invert_yaxis()
    ax.set_xlim(0, span * (1 + _MARGIN))
    ax.set_xlabel(
        "seconds since the first control record (as the coordinator processed them)"
        if since_ms is None or t0 != since_ms
        else f"seconds since {datetime.fromtimestamp(t0 / 1000, UTC):%Y-%m-%d %H:%M:%S} UTC"
    )
    ax.grid(axis="x", color="0.9")
    handles: list[Any] = [
        Line2D([], [], marker=m, color=c, linestyle="none", markersize=8, label=kind.value)
        for kind, (m, c, _, _) in _MARKERS.items()
        if any(mark.kind is kind for mark in timeline.marks)
    ]
    if any(m.kind is MarkKind.EPOCH for m in timeline.marks):
        handles.append(Line2D([], [], color="0.3", linestyle="--", label="new coordinator epoch"))
    if timeline.low_watermarks:
        wm = ax.twinx()
        xs = [x(t) for t, _ in timeline.low_watermarks] + [span]
        first = timeline.low_watermarks[0][1]
        scale, unit = (1000, "s") if timeline.low_watermarks[-1][1] - first > 5_000 else (1, "ms")
        ys = [(w - first) / scale for _, w in timeline.low_watermarks]
        wm.step(xs, [*ys, ys[-1]], where="post", color="#762a83", linewidth=1.6, alpha=0.8)
        if max(ys) == min(ys):  # a watermark that never moved: no axis of hundredths of a ms
            wm.set_ylim(-1, 1)
            wm.set_yticks([0])
        wm.set_ylabel(f"low watermark (+{unit})", color="#762a83")
        wm.tick_params(axis="y", colors="#762a83")
        handles.append(
            Line2D([], [], color="#762a83", label=f"low watermark (event time, {unit} after the first announced)")
        )
    count = f"{len(timeline.split_ids)} splits, {len(timeline.ownerships)} ownerships"
    ax.set_title(
        f"{title}  ({count}; {what}; shaded: each attempt of a subtask, from registration to failure or leave)".strip(),
        fontsize=10,
        loc="left",
        pad=28,
    )
    legend_in = 0.35  # inches kept free at the bottom for the legend
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=7, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, legend_in / height, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def _lane_label(subtask: int, host: str | None, peak: int | None) -> str:
    """A lane's name: the subtask, who read it last (a Spark query or a reader, where), and
    the most splits it owned where the lanes show counts."""
    label = f"subtask {subtask}"
    if host is not None:
        where, spark = host.removesuffix("/spark"), host.endswith("/spark")
        label += f"\n{'Spark query' if spark else 'reader'} {where}"
    return label + (f"\nmax {peak} splits" if peak is not None else "")


def _draw_marks(ax: Any, marks: list[Mark], x: Any) -> None:
    for kind, (marker, colour, size, where) in _MARKERS.items():
        chosen = [m for m in marks if m.kind is kind and m.subtask is not None]
        if not chosen:
            continue
        offset = {"top": -_LANE / 2 - 0.06, "middle": 0.0, "bottom": _LANE / 2 + 0.06}[where]
        # the y axis is inverted: "top" is the smaller y
        ax.scatter(
            [x(m.ts_ms) for m in chosen],
            [m.subtask + offset for m in chosen],  # type: ignore[operator]
            marker=marker,
            color=colour,
            s=size,
            zorder=5,
            linewidths=1.5 if marker == "x" else 0.5,
            edgecolors="white" if marker not in ("x",) else None,
            clip_on=False,
        )


def _draw_attempts(ax: Any, timeline: Timeline, x: Any, end_ms: int) -> None:
    """Shade each attempt's life in its lane: from its registration to its failure or leave."""
    started: dict[int, tuple[int, str]] = {}
    spans: list[tuple[int, int, int, str]] = []
    for mark in timeline.marks:
        if mark.subtask is None:
            continue
        if mark.kind is MarkKind.REGISTERED:
            if mark.subtask in started:
                begun, name = started.pop(mark.subtask)
                spans.append((mark.subtask, begun, mark.ts_ms, name))
            started[mark.subtask] = (mark.ts_ms, mark.detail.replace("attempt ", "a"))
        elif mark.kind in (MarkKind.FAILED, MarkKind.LEFT) and mark.subtask in started:
            begun, name = started.pop(mark.subtask)
            spans.append((mark.subtask, begun, mark.ts_ms, name))
    spans += [(s, begun, end_ms, name) for s, (begun, name) in started.items()]
    nth: dict[int, int] = {}
    for subtask, begun, ended, name in sorted(spans, key=lambda span: span[1]):
        nth[subtask] = nth.get(subtask, -1) + 1
        shade = ("#ececec", "#d2e3f3")[nth[subtask] % 2]  # alternate, so a new attempt shows
        ax.broken_barh([(x(begun), x(ended) - x(begun))], (subtask - 0.5, 1.0), facecolors=shade, zorder=0)
        ax.text(x(begun), subtask - 0.47, f" {name}", fontsize=6, color="0.45", va="top", zorder=1)


def _draw_split_bars(
    ax: Any, by_lane: dict[int, list[Ownership]], x: Any, end_ms: int, span: float, palette: Any
) -> None:
    label = sum(len(owned) for owned in by_lane.values()) <= _LABEL_SPLITS_UP_TO * 2
    for lane, owned in by_lane.items():
        rows = _rows(owned, end_ms)
        n_rows = max(rows.values()) + 1
        height = _LANE / n_rows
        for i, o in enumerate(owned):
            start, end = x(o.start_ms), x(o.end_ms if o.end_ms is not None else end_ms)
            bottom = lane - _LANE / 2 + rows[i] * height
            ax.broken_barh(
                [(start, max(end - start, span / 2000))],
                (bottom, height * 0.9),
                facecolors=_colour(o.split_id, palette),
                edgecolor="white" if n_rows < 12 else "none",
                linewidth=0.4,
                zorder=2,
            )
            if label and (end - start) > span / 25 and height > 0.12:
                ax.text(start + span / 400, bottom + height * 0.45, o.split_id, va="center", fontsize=7, clip_on=True)


def owned_counts(owned: list[Ownership], end_ms: int) -> list[tuple[int, int]]:
    """(ts_ms, splits owned from then on) at each change, for one lane."""
    steps: dict[int, int] = {}
    for o in owned:
        steps[o.start_ms] = steps.get(o.start_ms, 0) + 1
        end = o.end_ms if o.end_ms is not None else end_ms
        steps[end] = steps.get(end, 0) - 1
    out: list[tuple[int, int]] = []
    level = 0
    for ts in sorted(steps):
        level += steps[ts]
        out.append((ts, level))
    return out


def _draw_split_counts(ax: Any, by_lane: dict[int, list[Ownership]], x: Any, end_ms: int) -> dict[int, int]:
    """Returns each lane's most splits owned at once."""
    counts = {lane: owned_counts(owned, end_ms) for lane, owned in by_lane.items()}
    peak = max((n for steps in counts.values() for _, n in steps), default=1) or 1
    for lane, steps in counts.items():
        xs = [x(ts) for ts, _ in steps]
        base = lane + _LANE / 2  # the lane's bottom (the y axis is inverted)
        # square root: a lane with a few splits still shows next to one with hundreds
        ys = [base - _LANE * math.sqrt(n / peak) for _, n in steps]
        ax.fill_between(xs, ys, base, step="post", color="#4393c3", alpha=0.85, linewidth=0, zorder=2)
    ax.text(
        0.0,
        -0.06,
        f"lane height = {peak} splits (square-root scale)",
        fontsize=7,
        color="#2166ac",
        transform=ax.transAxes,
        va="top",
    )
    return {lane: max(n for _, n in steps) for lane, steps in counts.items()}
