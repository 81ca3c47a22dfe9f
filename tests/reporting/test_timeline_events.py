"""Timeline rows: nesting on the host, and merging that keeps every event's time and row."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxdiag
from jaxdiag.analyses.step_section import StepFigures
from jaxdiag.reporting import timeline_events as timeline


def rects_of(rows: list[list[tuple[int, int]]]) -> timeline.Rects:
    """Rects from per-row ``(start, duration)`` lists."""
    row, start, end = [], [], []
    for r, events in enumerate(rows):
        for s, d in sorted(events):
            row.append(r)
            start.append(s)
            end.append(s + d)
    n = len(row)
    return timeline.Rects(
        labels=tuple(f"row {r}" for r in range(len(rows))),
        planes=("",) * len(rows),
        row=np.array(row, dtype=np.int64),
        start=np.array(start, dtype=np.int64),
        end=np.array(end, dtype=np.int64),
        name=np.array([f"op{i}" for i in range(n)], dtype=object),
        kind=np.full(n, "compute", dtype=object),
        group=np.full(n, "g", dtype=object),
        count=np.ones(n, dtype=np.int64),
        busy=np.array(end, dtype=np.int64) - np.array(start, dtype=np.int64),
    )


events = st.lists(st.tuples(st.integers(0, 1_000_000), st.integers(1, 5_000)), max_size=60)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(events, min_size=1, max_size=4), limit=st.integers(4, 80))
def test_coalesce_keeps_every_event_in_its_row_within_the_limit(rows, limit):
    rects = rects_of(rows)
    merged, resolution = timeline.coalesce(rects, limit)
    assert merged.count.sum() == len(rects)
    assert merged.busy.sum() == rects.busy.sum()
    if len(rects) <= limit:
        assert resolution is None and merged is rects
        return
    assert len(merged) <= max(limit, len(rows))
    for r in range(len(rows)):  # every event lies inside a rectangle of its own row
        s, e = rects.start[rects.row == r], rects.end[rects.row == r]
        ms, me = merged.start[merged.row == r], merged.end[merged.row == r]
        assert merged.count[merged.row == r].sum() == len(s)
        inside = (ms[None, :] <= s[:, None]) & (e[:, None] <= me[None, :])
        assert inside.any(axis=1).all()


def test_coalesce_finds_the_finest_resolution_that_fits():
    # Ten bursts of ten ops 1 µs apart, bursts 1 ms apart: 100 events into 10 rectangles.
    rows = [[(b * 1_000_000 + i * 2_000, 1_000) for b in range(10) for i in range(10)]]
    merged, resolution = timeline.coalesce(rects_of(rows), 10)
    assert len(merged) == 10 and list(merged.count) == [10] * 10
    assert 1_000 <= resolution < 2 * 1_000 + 1_000_000 // 16
    assert list(merged.name) == ["10 events"] * 10


def test_select_nests_annotations_and_labels_rows(cpu_trace_dir):
    frames = jaxdiag.load(cpu_trace_dir.logdir)
    step = cpu_trace_dir.sleep_steps[0]
    host, lo, hi = timeline.window(frames, step, None)
    rects = timeline.select(frames, host, lo, hi)
    names = list(rects.name)
    train, load = names.index("train"), names.index("load_batch")
    assert rects.row[train] < rects.row[load]  # the step annotation encloses load_batch, one row up
    assert rects.start.min() >= 0 and rects.end.max() <= hi - lo
    assert len(set(rects.labels)) == len(rects.labels)
    assert timeline.window(frames, 10_000, None) is None
    whole = timeline.window(frames, None, None)
    assert whole[1] <= lo and whole[2] >= hi


def test_unique_labels_and_plane_label():
    assert timeline.unique_labels(["a", "b", "a", "a"]) == ("a", "b", "a (2)", "a (3)")
    assert timeline.plane_label("/device:GPU:3") == "GPU:3"
    assert timeline.plane_label("/host:CPU") == "host CPU"


def test_a_kept_step_with_nothing_to_draw_says_why_as_the_trace_did():
    from jaxdiag.render import figures
    from report_builders import make_report

    why = "no annotations or device events in this window"
    section = {"max_rects": timeline.MAX_RECTS, "windows": [{"step": 0, "host": None, "why": why}]}
    assert timeline.find(section, 0, None) == why == timeline.find(section, 0, "h")
    timeline.check(section)
    fig = figures.step_timeline(make_report(sections={"timeline": section}), 0)
    assert [a.text for a in fig.layout.annotations] == [f"no data: {why}"]


def test_chosen_steps_are_a_typical_one_and_the_slowest_that_did_not_compile():
    steps = [
        StepFigures(step=i, wall_ms=w, compile_ms=c)
        for i, (w, c) in enumerate([(50, 40), (10, 0), (12, 0), (11, 0), (900, 880), (30, 0)])
    ]
    assert timeline.chosen_steps(steps) == [3, 5]
    assert timeline.chosen_steps(steps[:1]) == [0]
    assert timeline.chosen_steps([]) == [None]


def test_windows_round_trip_through_json(cpu_trace_dir):
    import json

    frames = jaxdiag.load(cpu_trace_dir.logdir)
    found = timeline.from_frames(frames, cpu_trace_dir.recompile_step + 1, None, max_rects=40)
    again = timeline.decode(json.loads(json.dumps(timeline.encode(found))))
    assert (again.step, again.host, again.duration_ns, again.events, again.resolution_ns) == (
        found.step,
        found.host,
        found.duration_ns,
        found.events,
        found.resolution_ns,
    )
    a, b = again.rects, found.rects
    assert a.labels == b.labels and a.planes == b.planes
    for field in ("row", "start", "end", "name", "kind", "group", "count", "busy"):
        assert getattr(a, field).tolist() == getattr(b, field).tolist(), field
