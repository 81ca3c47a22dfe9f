"""``trace.executions.between_steps_cut`` against its definition, written out step by step and execution by execution."""

from __future__ import annotations

from bisect import bisect_right

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdiag.trace.executions import END_NS, EXECUTION_COLUMNS, between_steps_cut
from jaxdiag.trace.frames import HLO_MODULE, HOST, START_NS

STEP = "jit_step"


def cut_by_definition(tiled, marked, execs, module):
    """Each step loses its lead: the executions of rare programs (in fewer than half the steps) that start
    in it before its mark; the last step also ends before rare work after its mark."""
    out = list(tiled)
    for host in {row[0] for row in out}:
        positions = sorted((i for i, row in enumerate(out) if row[0] == host), key=lambda i: out[i][3])
        mine = [e for e in execs if e[0] == host and e[1] != module]
        if not mine or len(positions) < 2:
            continue
        starts = [out[i][3] for i in positions]
        ends = [out[i][4] for i in positions]
        placed = []  # (execution, its step or None)
        for e in mine:
            k = bisect_right(starts, e[2]) - 1
            placed.append((e, k if k >= 0 and e[2] < ends[k] else None))
        steps_of = {}
        for e, k in placed:
            if k is not None:
                steps_of.setdefault(e[1], set()).add(k)
        rare = {m for m, ks in steps_of.items() if 2 * len(ks) < len(positions)}
        for k, i in enumerate(positions):
            row = out[i]
            mark_start = marked.get((row[0], row[1]), (row[3], row[4]))[0]
            lead = [e[3] for e, at in placed if at == k and e[1] in rare and e[2] < mark_start]
            if lead and min(max(lead), mark_start) > row[3]:
                cut = min(max(lead), mark_start)
                out[i] = (row[0], row[1], row[2], cut, max(row[4], cut))
        last_k = len(positions) - 1
        last = out[positions[-1]]
        mark_end = marked.get((last[0], last[1]), (last[3], last[4]))[1]
        trail = [e for e, at in placed if at == last_k and e[1] in rare and e[2] >= mark_end]
        if trail:
            first_trail = min(e[2] for e in trail)
            own = [e[3] for e, at in placed if at == last_k and e[1] not in rare and e[2] < first_trail]
            end = max([mark_end] + own)
            out[positions[-1]] = (last[0], last[1], last[2], last[3], max(last[3], min(last[4], end)))
    return out


@st.composite
def stepped_runs(draw):
    tiled, marked, execs = [], {}, []
    for host in draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True)):
        t = draw(st.integers(0, 50))
        for step in range(draw(st.integers(1, 7))):
            length = draw(st.integers(1, 60))
            tiled.append((host, step, STEP, t, t + length))
            if draw(st.booleans()):
                mark = draw(st.integers(t, t + length))
                marked[(host, step)] = (mark, draw(st.integers(mark, t + length + 10)))
            t += length + draw(st.integers(0, 5))
        for _ in range(draw(st.integers(0, 14))):
            start = draw(st.integers(0, t + 20))
            execs.append(
                (host, draw(st.sampled_from([STEP, "jit_eval", "jit_init"])), start, start + draw(st.integers(0, 40)))
            )
    return draw(st.permutations(tiled)), marked, execs


@settings(max_examples=300, deadline=None)
@given(stepped_runs())
def test_the_cut_is_the_definitions(case) -> None:
    tiled, marked, execs = case
    frame = pd.DataFrame(
        {
            HOST: [e[0] for e in execs],
            HLO_MODULE: [e[1] for e in execs],
            START_NS: pd.Series([e[2] for e in execs], dtype="int64"),
            END_NS: pd.Series([e[3] for e in execs], dtype="int64"),
        }
    ).reindex(columns=list(EXECUTION_COLUMNS), fill_value=0)
    assert between_steps_cut(tiled, marked, frame, STEP) == cut_by_definition(tiled, marked, execs, STEP)


def step_module_by_definition(device: pd.DataFrame, execs: pd.DataFrame) -> str:
    """``step_module`` written with pandas: per program (a ``groupby`` of the module column) its device time
    and distinct ops, of the ops when any line holds them, else of every event."""
    work = device[device["line_kind"] != "xla_modules"] if (device["line_kind"] != "xla_modules").any() else device
    grouped = work.groupby(HLO_MODULE, observed=True)
    time, ops = grouped["dur_ns"].sum(), grouped["hlo_op"].nunique()
    counts = execs.groupby([HOST, HLO_MODULE]).size().groupby(level=1).max() if len(execs) else None
    if counts is None or not len(counts) or not (time > 0).any():
        return str(time.idxmax())
    programs = time[(ops > 1) & (time > 0)] if ((ops > 1) & (time > 0)).any() else time[time > 0]
    busy = [m for m in programs.index if programs[m] * 4 >= programs.max()]
    return str(max(busy, key=lambda m: (int(counts.get(m, 0)), float(programs[m]))))


_programs = st.sampled_from(["jit_step", "jit_eval", "jit_add", "", "jit_a"])


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            _programs,
            st.sampled_from(["fusion", "dot", "copy", "fusion.1"]),
            st.integers(0, 50),  # duration
            st.sampled_from(["compute", "xla_ops", "xla_modules"]),
            st.sampled_from(["device", "annotation"]),
        ),
        min_size=1,
        max_size=40,
    ),
    runs=st.lists(st.tuples(st.sampled_from(["h0", "h1"]), _programs), max_size=30),
    categorical=st.booleans(),
)
def test_the_step_program_is_the_definitions(ops, runs, categorical) -> None:
    from jaxdiag.trace.executions import find_step_program

    events = pd.DataFrame(ops, columns=[HLO_MODULE, "hlo_op", "dur_ns", "line_kind", "category"])
    if categorical:  # as the loader makes them: sorted categories
        events = events.astype({c: "category" for c in (HLO_MODULE, "hlo_op", "line_kind", "category")})
    execs = pd.DataFrame(runs, columns=[HOST, HLO_MODULE])
    device = events[(events["category"] == "device") & (events[HLO_MODULE] != "")]
    expected = "" if device.empty else step_module_by_definition(device, execs)
    assert find_step_program(events, execs) == expected
