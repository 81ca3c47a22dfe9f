"""Figures show what the report holds: on a real CPU capture, on hand-built sections, and on empty ones."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import jaxdiag
from jaxdiag.render import figures
from report_builders import make_report

from tests.render import FIGURES

BUILDERS = (
    figures.step_breakdown,
    figures.step_timeline,
    figures.host_wait_waterfall,
    figures.small_op_histogram,
    figures.collective_overlap,
    figures.recompile_timeline,
    figures.throughput,
)
TOKENS = 64


@pytest.fixture(scope="module")
def cpu_report(cpu_trace_dir):
    return jaxdiag.report(cpu_trace_dir.logdir, tokens_per_step=TOKENS)


def annotations(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def test_all_figures_are_the_ten_and_serialize(cpu_report):
    figs = figures.all_figures(cpu_report)
    assert list(figs) == list(FIGURES)
    for name, fig in figs.items():
        assert fig.layout.title.text, name
        fig.to_json()


@pytest.mark.parametrize("builder", BUILDERS, ids=lambda b: b.__name__)
def test_empty_report_says_no_data(builder):
    empty = make_report(
        steps=[], recompiles=[], host_waits={}, small_ops={}, collectives={}, throughput={}, findings=(), notes=()
    )
    fig = builder(empty)
    assert len(fig.data) == 0
    assert any(t.startswith("no data: ") for t in annotations(fig))


def test_partial_hand_built_sections_draw():
    figs = figures.all_figures(make_report())  # sections without by_step, per_step or events
    assert len(trace(figs["step_breakdown"], "host wait (cause unknown)").y) == 1
    assert list(figs["host_wait_waterfall"].data[0].x) == ["load_batch", "total"]
    for fig in figs.values():
        fig.to_json()


def test_step_breakdown_stacks_each_step_to_its_wall_time(cpu_report, cpu_trace_dir):
    fig = figures.step_breakdown(cpu_report)
    steps = {s.step: s for s in cpu_report.steps}
    x = list(trace(fig, "device compute").x)
    assert x == sorted(steps)
    total = np.sum([np.asarray(t.y, dtype=float) for t in fig.data], axis=0)
    for i, step in enumerate(x):
        s = steps[step]
        # host_wait_ms holds the compile wait; compile_ms (host compile time) is no part of its own.
        parts = s.device_busy_ms + s.host_wait_ms + s.in_execution_gap_ms
        # The idle part fills the step up to its wall time unless the parts overlap past it.
        assert total[i] == pytest.approx(max(s.wall_ms, parts), rel=0.02, abs=0.05)
    compile_wait = dict(zip(x, trace(fig, "compile wait").y))
    assert compile_wait == {k: pytest.approx(steps[k].compile_wait_ms) for k in x}
    assert compile_wait[cpu_trace_dir.recompile_step] > 1.0
    assert all(v == 0 for k, v in compile_wait.items() if k < cpu_trace_dir.recompile_step)
    gaps = dict(zip(x, trace(fig, "in-execution gaps").y))
    assert gaps == {k: pytest.approx(steps[k].in_execution_gap_ms) for k in x}
    load = dict(zip(x, trace(fig, "host wait: load_batch").y))
    idle = cpu_trace_dir.load_batch_idle_ms()  # the sleep, less what the previous step's soup ran into
    for step in cpu_trace_dir.sleep_steps:
        assert load[step] >= 0.9 * idle[step] > 0
    # The "% of step" button restyles every trace to shares that add up to 100 per step.
    pct = fig.layout.updatemenus[0].buttons[1].args[0]["y"]
    assert len(pct) == len(fig.data)
    np.testing.assert_allclose(np.sum(pct, axis=0), 100 * total / [steps[s].wall_ms for s in x], rtol=1e-6)


def test_step_breakdown_draws_the_compile_wait_inside_the_host_wait_once():
    step = {"step": 0, "wall_ms": 12.0, "device_busy_ms": 2.0, "host_wait_ms": 5.0, "compile_ms": 4.0}
    fig = figures.step_breakdown(make_report(steps=[{**step, "compile_wait_ms": 3.0}], host_waits={}))
    assert trace(fig, "host wait (cause unknown)").y[0] == pytest.approx(2.0)
    assert trace(fig, "compile wait").y[0] == pytest.approx(3.0)
    assert trace(fig, "idle").y[0] == pytest.approx(5.0)
    # Before 1.4, host_wait_ms left compiles out and compile_ms was the compile's part.
    old = figures.step_breakdown(make_report(steps=[step], host_waits={}))
    assert trace(old, "host wait (cause unknown)").y[0] == pytest.approx(5.0)
    assert trace(old, "compile wait").y[0] == pytest.approx(4.0)
    assert trace(old, "idle").y[0] == pytest.approx(1.0)


def test_step_breakdown_averages_groups_of_steps_beyond_max_bars():
    steps = [
        {
            "step": i,
            "wall_ms": 10.0 + (i % 2),
            "device_busy_ms": 4.0,
            "host_wait_ms": 1.0,
            "compile_ms": 0.0,
            "exposed_collective_ms": 0.0,
        }
        for i in range(2500)
    ]
    fig = figures.step_breakdown(make_report(steps=steps, host_waits={}), max_bars=1000)
    assert len(trace(fig, "device compute").x) == 834  # groups of 3
    assert list(trace(fig, "device compute").x[:2]) == [0, 3]
    assert trace(fig, "idle").y[0] == pytest.approx((5 + 6 + 5) / 3)
    assert "2,500 steps: each bar is the mean of 3 consecutive steps" in annotations(fig)
    assert trace(fig, "host wait (cause unknown)").y[0] == pytest.approx(1.0)


def test_timeline_puts_host_annotations_above_device_streams(cpu_report, cpu_trace_dir):
    step = cpu_trace_dir.sleep_steps[0]
    fig = figures.step_timeline(cpu_report, step)
    assert fig.layout.title.text.startswith(f"Step {step} timeline on ")
    host, devices = fig.data[0], fig.data[1:]
    assert host.name == "host annotations" and devices
    labels = list(fig.layout.yaxis.categoryarray)
    assert max(labels.index(y) for y in host.y) < min(labels.index(y) for d in devices for y in d.y)
    wall = next(s.wall_ms for s in cpu_report.steps if s.step == step)
    assert fig.layout.xaxis.range[1] == pytest.approx(wall, rel=1e-3)
    names = list(host.text)
    load = names.index("load_batch")
    assert host.x[load] >= cpu_trace_dir.sleep_s * 1000 * 0.95
    # The step's window runs on to the next step's start: the annotation fills all but that gap.
    assert names.count("train") == 1 and 0.98 * wall <= host.x[names.index("train")] <= wall + 1e-4  # wall_ms: 4 places
    assert not annotations(fig)  # nothing merged in a small step


def test_timeline_merges_events_to_the_limit_and_says_so(cpu_report, cpu_trace_dir):
    step = cpu_trace_dir.recompile_step + 1  # tiny_soup's ops make this step a few hundred events
    full = figures.step_timeline(cpu_report, step)
    n_full = sum(len(t.x) for t in full.data)
    limit = n_full // 2  # how many events the step has varies with the machine's timing
    assert limit >= 4
    fig = figures.step_timeline(cpu_report, step, max_rects=limit)
    n = sum(len(t.x) for t in fig.data)
    assert n_full > limit >= n
    assert any(f"{n_full:,} events drawn as {n:,} rectangles" in t for t in annotations(fig))


def test_timeline_device_filter_and_missing_step(cpu_report):
    plane = cpu_report.frames.devices["plane"].iloc[0]
    fig = figures.step_timeline(cpu_report, 0, devices=["/device:nothing:0"])
    assert [t.name for t in fig.data] == ["host annotations"]
    fig = figures.step_timeline(cpu_report, 0, devices=[plane])
    assert len(fig.data) >= 2
    assert any("step 999 is not in the trace" in t for t in annotations(figures.step_timeline(cpu_report, 999)))


def test_saved_report_draws_its_kept_steps_and_says_why_not_others(cpu_report):
    saved = jaxdiag.Report.from_dict(json.loads(cpu_report.to_json()))
    kept = [w["step"] for w in cpu_report.timeline["windows"]]
    assert kept and figures.default_step(cpu_report) == kept[0]
    for step in kept:
        assert figures.step_timeline(saved, step).to_json() == figures.step_timeline(cpu_report, step).to_json()
    other = next(s.step for s in cpu_report.steps if s.step not in kept)
    why = annotations(figures.step_timeline(saved, other))
    assert any(f"keeps the events of steps {', '.join(map(str, kept))} only" in t for t in why)
    why = annotations(figures.step_timeline(saved, kept[0], host="another-host"))
    assert any(f"keeps step {kept[0]} on host {cpu_report.source['hosts'][0]} only" in t for t in why)
    assert figures.small_op_histogram(saved).to_json() == figures.small_op_histogram(cpu_report).to_json()


def test_default_step_is_a_typical_step_that_did_not_compile():
    steps = [
        {"step": i, "wall_ms": w, "compile_ms": c}
        for i, (w, c) in enumerate([(50, 40), (10, 0), (12, 0), (11, 0), (900, 880)])
    ]
    assert figures.default_step(make_report(steps=steps)) == 3
    assert figures.default_step(make_report(steps=[])) is None


def test_waterfall_adds_causes_up_to_the_total(cpu_report, cpu_trace_dir):
    hw = cpu_report.host_waits
    fig = figures.host_wait_waterfall(cpu_report)
    w = fig.data[0]
    expected = [c for c in hw.by_cause if c.cause != "compile" and c.ms > 0]
    assert list(w.x) == [c.cause for c in expected] + ["total"]
    assert w.y[-1] == pytest.approx(sum(c.ms for c in expected))
    compile_ms = sum(c.ms for c in hw.by_cause if c.cause == "compile")
    assert any(t.startswith("compile (") and "left out" in t for t in annotations(fig)) == (compile_ms > 0)
    with_compile = figures.host_wait_waterfall(cpu_report, include_compile=True).data[0]
    assert with_compile.y[-1] == pytest.approx(sum(c.ms for c in hw.by_cause if c.ms > 0))
    step = cpu_trace_dir.sleep_steps[0]
    one = figures.host_wait_waterfall(cpu_report, step).data[0]
    idle = cpu_trace_dir.load_batch_idle_ms()[step]  # the sleep, less what the previous step's soup ran into
    assert "load_batch" in one.x and one.y[list(one.x).index("load_batch")] >= 0.9 * idle > 0


def test_histogram_red_bars_hold_exactly_the_small_ops(cpu_report):
    fig = figures.small_op_histogram(cpu_report)
    hist, top = fig.data
    threshold = cpu_report.small_ops.threshold_us
    x, y = np.asarray(hist.x), np.asarray(hist.y)
    assert fig.layout.xaxis.type == "log"
    assert y[x < threshold].sum() == cpu_report.small_ops.count > 0
    assert y[x >= threshold].sum() > 0
    offenders = cpu_report.small_ops.top[:10]
    assert [c[0] for c in top.customdata][::-1] == [o.name for o in offenders]


def test_collective_overlap_splits_each_kind():
    collectives = {
        "overlap_fraction": 0.25,
        "exposed_ms": 9.0,
        "total_ms": 12.0,
        "by_kind": [
            {"kind": "all-reduce", "count": 4, "total_ms": 10.0, "exposed_ms": 8.0, "overlap_fraction": 0.2},
            {"kind": "all-gather", "count": 2, "total_ms": 2.0, "exposed_ms": 1.0, "overlap_fraction": 0.5},
        ],
    }
    fig = figures.collective_overlap(make_report(collectives=collectives))
    overlapped, exposed = fig.data
    assert list(exposed.y) == ["all-gather", "all-reduce"]
    assert list(overlapped.x) == [1.0, 2.0] and list(exposed.x) == [1.0, 8.0]
    assert "25% overall" in fig.layout.title.text


def test_recompile_timeline_shows_each_compile_with_its_cause(cpu_report, cpu_trace_dir):
    fig = figures.recompile_timeline(cpu_report)
    labels = list(fig.data[0].y)
    assert f"step {cpu_trace_dir.recompile_step} · train_step" in labels
    hand = make_report(
        recompiles=[
            {"function": f"f{i}", "step": i, "compile_ms": float(i), "cause": "x" if i % 2 else None} for i in range(50)
        ]
    )
    fig = figures.recompile_timeline(hand, max_rows=5)
    assert list(fig.data[0].y) == [f"step {i} · f{i}" for i in range(45, 50)]
    assert fig.data[0].customdata[1] == "cause unknown (no compile log)"
    assert "the 5 costliest of 50 compiles" in annotations(fig)


def test_recompile_timeline_shows_what_the_log_says_of_a_first_compile(tmp_path):
    import jax
    import jax.numpy as jnp

    @jaxdiag.jit
    def first_in_capture(x):
        return jnp.tanh(x @ x.T).sum()

    with jaxdiag.profile(tmp_path):
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                float(first_in_capture(jnp.ones((64, 64))))
    report = jaxdiag.report(tmp_path)
    (joined,) = [c for c in report.recompiles if c.function == "first_in_capture"]
    assert joined.logged and not joined.recompile
    fig = figures.recompile_timeline(report)
    causes = dict(zip(fig.data[0].y, fig.data[0].customdata))
    assert causes[f"step {joined.step} · first_in_capture"] == "first compile"
    assert not any("no compile log" in c for c in causes.values())


def test_throughput_marks_compiled_steps_and_steady_state(cpu_report, cpu_trace_dir):
    fig = figures.throughput(cpu_report)
    assert fig.layout.yaxis.title.text == "tokens/s"
    per_step = {r.step: r for r in cpu_report.throughput.per_step}
    steady, compiled = trace(fig, "steady state"), trace(fig, "compiled in this step")
    assert cpu_trace_dir.recompile_step in list(compiled.x)
    for s, v in zip(steady.x, steady.y):
        assert not per_step[s].compiled and v == pytest.approx(TOKENS * 1000 / per_step[s].period_ms, rel=1e-3)
    line = fig.layout.shapes[0]
    assert line.y0 == pytest.approx(cpu_report.throughput.steady_tokens_per_s)
    no_tokens = make_report(
        throughput={
            "steady_steps_per_s": 2.0,
            "per_step": [
                {"step": 0, "steps_per_s": 1.0, "tokens_per_s": None, "compiled": True},
                {"step": 1, "steps_per_s": 2.0, "tokens_per_s": None, "compiled": False},
            ],
        }
    )
    fig = figures.throughput(no_tokens)
    assert fig.layout.yaxis.title.text == "steps/s" and math.isclose(fig.layout.shapes[0].y0, 2.0)


def test_big_real_trace_timeline_stays_within_the_rectangle_budget(shared_fixtures):
    report = jaxdiag.report(shared_fixtures / "h100_transformer")
    fig = figures.step_timeline(report, 5)  # the 10 s recompile step, over ten thousand events
    assert sum(len(t.x) for t in fig.data) <= 3000
    assert any("events drawn as" in t for t in annotations(fig))
    compile_wait = trace(figures.step_breakdown(report), "compile wait")
    compile_ms = dict(zip(compile_wait.x, compile_wait.y))
    assert compile_ms[5] > 1000 and compile_ms[8] > 1000


def test_throughput_of_many_steps_draws_a_line_and_says_so():
    per_step = [
        {"step": i, "steps_per_s": 100.0, "tokens_per_s": 1000.0, "compiled": i == 5, "period_ms": 10.0}
        for i in range(3000)
    ]
    fig = figures.throughput(make_report(throughput={"per_step": per_step}), max_points=2000)
    assert [t.name for t in fig.data] == ["every step", "compiled in this step"]
    assert len(fig.data[0].x) == 3000 and list(fig.data[1].x) == [5]
    assert "3,000 steps: steady steps drawn as a line, no markers" in annotations(fig)


def test_empty_charts_say_what_would_fill_them():
    empty = make_report(
        steps=[], recompiles=[], host_waits={}, small_ops={}, collectives={}, throughput={}, findings=(), notes=()
    )
    figs = figures.all_figures(empty)
    hints = {
        "step_breakdown": "StepTraceAnnotation or @jaxdiag.step",
        "throughput": "StepTraceAnnotation or @jaxdiag.step",
        "recompile_timeline": "a compile inside the profiled steps",
        "collective_overlap": "sharded over several devices",
        "roofline": "jaxdiag report --deep",
    }
    for name, hint in hints.items():
        assert any(hint in t for t in annotations(figs[name])), (name, annotations(figs[name]))
