"""The audit timeline (ownership intervals and events) over a run a real CoordinatorCore
produced (test_audit.full_run), the questions over it, and its drawing."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_audit import SOURCE, Run, full_run
from typer.testing import CliRunner

from sluicegate.audit import OwnershipModel, replay
from sluicegate.audit.timeline import (
    MarkKind,
    Ownership,
    PointNotFound,
    Timeline,
    build_timeline,
    ownership_at,
    position_at,
    split_history,
)
from sluicegate.audit.timeline_plot import UnsupportedFormat, clipped, draw_timeline, owned_counts
from sluicegate.cli import app
from sluicegate.protocol import ReaderRegistered


@pytest.fixture(scope="module")
def run() -> Run:
    return full_run()


@pytest.fixture(scope="module")
def timeline(run: Run) -> Timeline:
    return build_timeline(replay(run.inbox, run.readers).records, source=SOURCE)


def test_ownership_matches_the_audit_model_at_every_point(run: Run, timeline: Timeline) -> None:
    records = replay(run.inbox, run.readers).records
    model = OwnershipModel(source=SOURCE)
    for position, record in enumerate(records):
        model.apply(record, position)
        expected: dict[int, list[str]] = {}
        for split_id, subtask in model.owner.items():
            expected.setdefault(subtask, []).append(split_id)
        got = {s: ids for s, ids in ownership_at(timeline, position).items() if ids}
        assert got == {s: sorted(ids) for s, ids in sorted(expected.items())}, position


def test_a_split_is_never_owned_twice_and_every_one_ends_finished(timeline: Timeline) -> None:
    for split_id in timeline.split_ids:
        spans = split_history(timeline, split_id).ownerships
        for before, after in itertools.pairwise(spans):
            assert before.end_position is not None and before.end_position <= after.start_position
            assert before.end_ms is not None and before.end_ms <= after.start_ms
        assert spans[-1].ended_by == "finished", split_id


def test_marks_name_the_runs_events(run: Run, timeline: Timeline) -> None:
    kinds = [(m.kind, m.subtask) for m in timeline.marks]
    registered = sum(1 for r in replay(run.inbox, run.readers).records if isinstance(r.env.body, ReaderRegistered))
    assert sum(1 for k, _ in kinds if k is MarkKind.REGISTERED) == registered
    assert (MarkKind.FENCED, 1) in kinds  # the old attempt's heartbeat
    assert (MarkKind.FAILED, 1) in kinds  # fenced by the new registration
    assert (MarkKind.FAILED, 3) in kinds  # session timeout
    assert (MarkKind.LEFT, 2) in kinds
    assert [m.detail for m in timeline.marks if m.kind is MarkKind.EPOCH] == ["epoch 2"]
    lows = [w for _, w in timeline.low_watermarks]
    assert lows == sorted(set(lows)) and len(lows) > 3


def test_a_moved_splits_history_names_each_owner_and_its_acknowledged_positions(timeline: Timeline) -> None:
    moved = next(s for s in timeline.split_ids if len({o.subtask for o in split_history(timeline, s).ownerships}) > 1)
    history = split_history(timeline, moved)
    assert [o.ended_by for o in history.ownerships][:-1] != []
    assert all(o.ended_by is not None and o.ended_by.startswith("released") for o in history.ownerships[:-1])
    assert history.acks, "the split's positions were acknowledged"
    for ack in history.acks:
        assert any(o.subtask == ack.subtask and o.owned_at(ack.position) for o in history.ownerships)
        assert set(ack.state) == {"start", "end", "position"}


def test_at_takes_a_cseq_or_a_time(timeline: Timeline) -> None:
    cseqs = [c for c in timeline.cseq_by_position if c is not None]
    middle = cseqs[len(cseqs) // 2]
    position = position_at(timeline, str(middle))
    assert timeline.cseq_by_position.index(middle) <= position
    assert all(c is None or c <= middle for c in timeline.cseq_by_position[: position + 1])
    moment = datetime.fromtimestamp(timeline.ts_by_position[position] / 1000, UTC).isoformat()
    assert timeline.ts_by_position[position_at(timeline, moment)] == timeline.ts_by_position[position]
    with pytest.raises(PointNotFound, match="before the first record"):
        position_at(timeline, "1970-01-01T00:00:00")
    with pytest.raises(PointNotFound, match="neither a cseq"):
        position_at(timeline, "yesterday")


def test_the_drawing_is_a_png(timeline: Timeline, tmp_path: Path) -> None:
    path = tmp_path / "timeline.png"
    draw_timeline(timeline, path, title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
    with pytest.raises(UnsupportedFormat, match=r"\.png"):
        draw_timeline(timeline, tmp_path / "timeline.html")


def test_many_splits_are_drawn_as_counts_per_lane(tmp_path: Path) -> None:
    # 100 splits on two subtasks, each owned for 10 s, staggered by 100 ms
    ownerships = [
        Ownership(f"s-{i:03d}", i % 2, 1, 1_000 + i * 100, i, 11_000 + i * 100, 200 + i, "finished") for i in range(100)
    ]
    timeline = Timeline(ownerships=ownerships, ts_by_position=[1_000, 21_000], subtasks=[0, 1])
    lane0 = owned_counts([o for o in ownerships if o.subtask == 0], timeline.end_ms)
    assert lane0[0] == (1_000, 1) and lane0[-1][1] == 0
    assert max(n for _, n in lane0) == 50  # every split of the lane is owned from 5.9 s to 11 s
    path = tmp_path / "many.png"
    draw_timeline(timeline, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_last_minutes_keep_what_was_live_then_and_drop_what_had_ended(timeline: Timeline, tmp_path: Path) -> None:
    """``audit --timeline FILE --last 10m``: the picture starts at the window's start."""
    since = (timeline.start_ms + timeline.end_ms) // 2
    window = clipped(timeline, since)
    assert all(o.start_ms >= since for o in window.ownerships)
    assert all(o.end_ms is None or o.end_ms > since for o in window.ownerships)
    live_then = {
        (o.split_id, o.subtask)
        for o in timeline.ownerships
        if o.start_ms <= since and (o.end_ms is None or o.end_ms > since)
    }
    assert live_then <= {(o.split_id, o.subtask) for o in window.ownerships if o.start_ms == since}
    later = [m for m in timeline.marks if m.ts_ms >= since]
    assert window.marks[len(window.marks) - len(later) :] == later, "every event of the window, in order"
    carried = window.marks[: len(window.marks) - len(later)]
    assert all(m.kind is MarkKind.REGISTERED and m.ts_ms == since for m in carried)
    path = tmp_path / "last.png"
    draw_timeline(timeline, path, since_ms=since)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--last", "10m"], "--last goes with --timeline"),
        (["--timeline", "t.png", "--last", "ten minutes"], "must be a duration"),
        (["--timeline", "t.png", "--last", "0s"], "must be a duration"),
    ],
)
def test_last_is_checked_before_anything_is_read(args: list[str], said: str) -> None:
    result = CliRunner().invoke(app, ["audit", "--source", "s", "-b", "127.0.0.1:1", *args])
    assert result.exit_code == 2 and said in result.output, result.output


def test_a_lane_says_who_read_it_and_a_flat_watermark_gets_no_axis_of_hundredths() -> None:
    """Issue 51 item 5: a lane did not say its host; a watermark that never moved got a
    ±0.04 ms axis."""
    from sluicegate.audit.timeline_plot import _lane_label

    assert _lane_label(2, "vm:25398/spark", None) == "subtask 2\nSpark query vm:25398"
    assert _lane_label(0, "pod-7:1", 12) == "subtask 0\nreader pod-7:1\nmax 12 splits"
    assert _lane_label(1, None, None) == "subtask 1"


def test_the_timeline_knows_each_lane_s_last_reader(timeline: Timeline) -> None:
    assert timeline.hosts == dict.fromkeys(timeline.subtasks, "host")


def test_a_watermark_that_never_moved_is_drawn_on_a_plain_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    flat = Timeline(
        ownerships=[Ownership("s-0", 0, 1, 0, 0, None, None, None)],
        low_watermarks=[(0, 5_000), (10_000, 5_000)],
        ts_by_position=[0, 60_000],
        subtasks=[0],
    )
    drawn: list[Any] = []
    monkeypatch.setattr(plt, "close", drawn.append)  # keep the figure to look at
    draw_timeline(flat, tmp_path / "flat.png")
    monkeypatch.undo()
    (fig,) = drawn
    watermark_axis = fig.axes[1]
    assert watermark_axis.get_ylim() == (-1.0, 1.0) and list(watermark_axis.get_yticks()) == [0.0]
    plt.close(fig)


def test_the_time_axis_ends_at_the_last_event_not_at_the_last_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51 item 5: the axis ran 900 s past the last event. Here the records go on to
    960 s (heartbeats of an idle reader change nothing drawn); the last event, the split's
    end, is at 60 s."""
    import matplotlib.pyplot as plt

    idle_at_the_end = Timeline(
        ownerships=[Ownership("s-0", 0, 1, 0, 0, 60_000, 5, "finished")],
        low_watermarks=[(0, 5_000), (40_000, 9_000)],
        ts_by_position=[0, 30_000, 60_000, 960_000],
        subtasks=[0],
    )
    assert idle_at_the_end.last_event_ms == 60_000
    drawn: list[Any] = []
    monkeypatch.setattr(plt, "close", drawn.append)  # keep the figure to look at
    draw_timeline(idle_at_the_end, tmp_path / "idle.png")
    monkeypatch.undo()
    (fig,) = drawn
    left, right = fig.axes[0].get_xlim()
    assert left == 0 and 60 < right <= 62, (left, right)
    plt.close(fig)


def test_a_window_of_last_in_which_nothing_happened_spans_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.pyplot as plt

    quiet = Timeline(ownerships=[], ts_by_position=[0, 600_000], subtasks=[0])
    drawn: list[Any] = []
    monkeypatch.setattr(plt, "close", drawn.append)
    draw_timeline(quiet, tmp_path / "quiet.png", since_ms=300_000)
    monkeypatch.undo()
    (fig,) = drawn
    assert 300 < fig.axes[0].get_xlim()[1] <= 306
    plt.close(fig)
