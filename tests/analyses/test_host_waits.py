"""Host waits on hand-built frames: each idle stretch goes to the innermost host activity."""

from __future__ import annotations

import dataclasses

import pytest

from jaxdiag.analyses import host_waits
from jaxdiag.analyses.base import AnalysisInputs, Severity
from jaxdiag.config import Thresholds
from jaxdiag.reporting import codec
from jaxdiag.trace import frames as F
from tests.frames_builders import compile_events, device_event, frames, host_event

TH = Thresholds(host_wait_min_us=50, min_finding_ms=0.01)


def run(events, steps=((0, 1000),), **kw):
    f = frames(events + [host_event(s, e - s, "train") for s, e in steps], steps=list(steps))
    return host_waits.analyze(AnalysisInputs(f, thresholds=TH, **kw))


def causes(result) -> dict[str, float]:
    return {c.cause: round(c.ms * 1000, 3) for c in result.by_cause}  # microseconds


@pytest.mark.parametrize(
    "events, expected",
    [
        pytest.param(
            [host_event(0, 400, "load_batch"), device_event(400, 600)],
            {"load_batch": 400},
            id="input pipeline before the step's kernels",
        ),
        pytest.param(
            [host_event(0, 900, "data"), host_event(100, 300, "load_batch"), device_event(900, 100)],
            {"load_batch": 300, "data": 600},
            id="nested annotations: the inner one wins where it covers",
        ),
        pytest.param(
            [
                device_event(0, 300),
                host_event(250, 500, "np.asarray(jax.Array)", category="runtime"),
                device_event(750, 250),
            ],
            {"device_to_host_sync": 450},
            id="float(loss) read-back",
        ),
        pytest.param(
            [
                host_event(0, 200, "PjitFunction(train_step)"),
                host_event(10, 180, "PjRtCApiLoadedExecutable::Execute", category="runtime"),
                device_event(200, 800),
            ],
            {"dispatch": 200},
            id="dispatch",
        ),
        pytest.param(
            [device_event(0, 300), device_event(700, 300)],
            {"unattributed": 400},
            id="nothing on the host",
        ),
        pytest.param(
            [device_event(0, 480), device_event(520, 480)],
            {},
            id="gaps under the threshold are jitter",
        ),
        pytest.param(
            [host_event(0, 1000, "load_batch"), device_event(0, 1000)],
            {},
            id="host busy while the device works is no wait",
        ),
    ],
)
def test_attribution(events, expected):
    assert causes(run(events)) == expected


def test_compile_comes_first_and_has_no_finding_here():
    events = [host_event(0, 5000, "load_batch")] + compile_events(1000, 3000, "convert_element_type", trace_us=500)
    events.append(device_event(4600, 400))
    r = run(events, steps=((0, 5000),))
    got = causes(r)
    assert got["compile"] == pytest.approx(3500)  # 500..4000
    # load_batch keeps what the compile leaves, 0..500 and 4000..4600: an annotation
    # outranks the dispatch (4000..4010) it wraps.
    assert got["load_batch"] == pytest.approx(500 + 600)
    assert "dispatch" not in got
    assert all(f.evidence["kind"] != "compile" for f in r.findings)


def test_a_stall_every_fifth_step_is_named_as_such():
    steps = tuple((i * 40_000, (i + 1) * 40_000) for i in range(20))
    events = []
    for i, (s, _) in enumerate(steps):
        load_us = 30_000 if i % 5 == 4 else 300
        events += [host_event(s, load_us, "load_batch"), device_event(s + load_us, 5_000)]
    r = run(events, steps=steps)
    (load,) = [f for f in r.findings if f.evidence["kind"] == "annotation"]
    assert "`load_batch`: 30.0 ms each at steps 4, 9, 14 and 19 (every 5th step); 0.30 ms at most in the 16 others" in (
        load.message
    )
    assert load.evidence["per_step"][9] == pytest.approx(30.0)


def test_findings_name_the_cause_and_the_fix():
    steps = tuple((i * 1000, (i + 1) * 1000) for i in range(4))
    events = []
    for s, _ in steps:
        events += [
            host_event(s, 400, "load_batch"),
            device_event(s + 400, 500),
            host_event(s + 850, 140, "np.asarray(jax.Array)", category="runtime"),
        ]
    r = run(events, steps=steps)
    by_kind = {f.evidence["kind"]: f for f in r.findings}
    load = by_kind["annotation"]
    assert load.kind == "host_wait"
    assert load.time_lost_ms == pytest.approx(1.6)
    assert "load_batch" in load.message and "0.40 ms per step on average, in every step (0-3)" in load.message
    assert "prefetch" in load.suggestion and "jax.device_put" in load.suggestion
    assert load.severity == Severity.CRITICAL  # 1.6 of 4 ms
    sync = by_kind["device_to_host_sync"]
    assert sync.time_lost_ms == pytest.approx(4 * 0.09)  # 900..990 of each step
    assert "float(loss)" in sync.suggestion
    assert sync.evidence["sync_steps"] == [0, 1, 2, 3]
    assert "load_batch" in sync.message  # the queue it drained


def test_section_json_shape():
    r = run([host_event(0, 400, "load_batch"), device_event(400, 500)])
    d = codec.to_json(r.section())
    assert set(d) == {"total_ms", "by_cause", "by_step", "in_execution"}
    assert d["in_execution"] == {"label": "", "total_ms": 0.0, "by_step": []}  # a GPU trace: no run ids
    assert d["total_ms"] == pytest.approx(0.5)
    assert d["by_cause"][0] == {"cause": "load_batch", "kind": "annotation", "ms": 0.4}
    assert d["by_step"] == [
        {
            "step": 0,
            "total_ms": 0.5,
            "by_cause": [{"cause": "load_batch", "ms": 0.4}, {"cause": "unattributed", "ms": 0.1}],
        }
    ]


def test_dispatch_is_split_by_function():
    r = run(
        [
            host_event(0, 300, "PjitFunction(tiny_soup)"),
            device_event(300, 100),
            host_event(400, 200, "PjitFunction(train_step)"),
            device_event(600, 400),
        ]
    )
    (finding,) = [f for f in r.findings if f.evidence["kind"] == "dispatch"]
    assert finding.evidence["by_function"] == {"tiny_soup": 0.3, "train_step": 0.2}
    assert "tiny_soup" in finding.message


def test_no_steps_selected():
    f = frames([host_event(0, 400, "load_batch")], steps=[(0, 1000)])
    r = host_waits.analyze(AnalysisInputs(f, thresholds=TH, steps=[5]))
    assert r.total_ms == 0 and r.findings == () and r.section().by_step == ()


# --- end to end on real captures ---


def _load_batch_by_step(result) -> dict[int, float]:
    return {s: c.get("load_batch", 0.0) for s, c in result.by_step().items()}


def test_cpu_capture_load_batch(cpu_frames):
    truth = cpu_frames.truth
    r = host_waits.analyze(AnalysisInputs(cpu_frames.frames))
    waits = _load_batch_by_step(r)
    # Dispatch is asynchronous: the previous step's soup may still run during the sleep (on a
    # loaded machine, for much of it), so the wait is held to the time inside `load_batch` with
    # no execution in flight, from the trace; a launched execution not yet started may shave it.
    idle = truth.load_batch_idle_ms()
    assert sorted(idle) == list(truth.sleep_steps)
    for step in range(truth.steps):
        if step in truth.sleep_steps:
            assert 0.9 * idle[step] <= waits[step] <= idle[step] + 0.01 and idle[step] > 0
        else:
            assert waits.get(step, 0.0) == 0.0
    (finding,) = [f for f in r.findings if f.evidence["cause"] == "load_batch"]
    assert finding.time_lost_ms == pytest.approx(sum(waits.values()))
    assert set(r.sync_steps) == set(range(truth.steps))  # float(loss) every step


def test_h100_transformer_waits(h100_transformer):
    r = host_waits.analyze(AnalysisInputs(h100_transformer.frames))
    waits = _load_batch_by_step(r)
    # time.sleep(0.003) inside load_batch every step, with the device idle throughout.
    assert sorted(waits) == list(range(12))
    assert all(3.0 <= ms < 8.0 for ms in waits.values())
    assert r.sync_steps == tuple(range(12))
    kinds = {f.evidence["kind"]: f for f in r.findings}
    assert kinds["annotation"].evidence["cause"] == "load_batch"
    assert kinds["annotation"].severity == Severity.CRITICAL
    assert "float(loss)" in kinds["device_to_host_sync"].suggestion
    # Compiles account for the long waits of steps 5 and 8, and are left to the recompile finding.
    assert r.by_step()[5]["compile"] > 9000 and r.by_step()[8]["compile"] > 3000
    assert "compile" not in kinds


def test_h100_mlp_input_pipeline(h100_mlp):
    r = host_waits.analyze(AnalysisInputs(h100_mlp.frames))
    by_step = {s: c.get("input_pipeline", 0.0) for s, c in r.by_step().items()}
    # time.sleep(0.004) every third step, 0.0005 otherwise, plus building the batch.
    for step, ms in by_step.items():
        assert ms >= (4.0 if step % 3 == 0 else 0.5)
    slow = [ms for step, ms in by_step.items() if step % 3 == 0]
    fast = [ms for step, ms in by_step.items() if step % 3]
    assert sum(slow) / len(slow) - sum(fast) / len(fast) >= 3.0


def test_the_read_finding_counts_the_launching_after_it_as_the_launch_finding_does(h100_mlp):
    """Launching on a step that compiled is the compile's tracing: the launch finding leaves it out, and the
    read finding, naming the host work its reads left exposed, gives the same figure."""
    findings = {f.evidence["kind"]: f for f in host_waits.analyze(AnalysisInputs(h100_mlp.frames)).findings}
    launching, read = findings["dispatch"], findings["device_to_host_sync"]
    assert launching.evidence["left_out_compile_steps"]
    assert f"dispatch {launching.time_lost_ms:.1f} ms" in read.message


def _launches(steps: int, read_every: int, launch_us: float) -> list:
    """Steps of 5 ms on the device, launched ahead of it except after a read (``float(loss)`` every
    ``read_every`` steps), which empties the queue: the next launch then runs with the device idle."""
    events = []
    for i in range(steps):
        s = i * 5_000
        after_read = i > 0 and (i - 1) % read_every == 0
        if after_read:
            events.append(host_event(s, launch_us, "PjitFunction(train_step)"))
        events.append(device_event(s + (launch_us if after_read else 0), 5_000 - (launch_us if after_read else 0)))
        if i % read_every == 0:
            events.append(host_event(s + 4_800, 200, "np.asarray(jax.Array)", category="runtime"))
    return events


def test_launches_that_wait_only_after_reads_are_the_reads_cost_not_launch_overhead():
    steps = tuple((i * 5_000, (i + 1) * 5_000) for i in range(20))
    r = run(_launches(20, 5, 300), steps=steps)
    (launching,) = [f for f in r.findings if f.evidence["kind"] == "dispatch"]
    assert sorted(launching.evidence["per_step"]) == [1, 6, 11, 16] and launching.evidence["after_reads"]
    assert "at the other steps the host launched ahead of the device" in launching.message
    assert "would not help" in launching.suggestion and "put more work" not in launching.suggestion
    # Launching that waits at every step is launch overhead: the advice to put more work in each call stays.
    every = [host_event(i * 5_000, 300, "PjitFunction(train_step)") for i in range(20)]
    every += [device_event(i * 5_000 + 300, 4_700) for i in range(20)]
    every += [host_event(i * 5_000 + 4_800, 200, "np.asarray(jax.Array)", category="runtime") for i in range(0, 20, 5)]
    (launching,) = [f for f in run(every, steps=steps).findings if f.evidence["kind"] == "dispatch"]
    assert "after_reads" not in launching.evidence and "put more work in each jitted call" in launching.suggestion


def _saving_every(period: int, steps: int, launch_us: float, work_us: float, program: str = "jit_train_step"):
    """Steps of 5 ms on the device, launched ahead of it, but every ``period``-th step the host first does
    ``work_us`` of its own (a checkpoint's save, say) with the device idle, and then launches late."""
    events = []
    for i in range(steps):
        s = i * 5_000
        if i % period == period - 1:  # the late launch, with nothing queued
            events.append(host_event(s, launch_us, "PjitFunction(train_step)"))
            events.append(device_event(s + launch_us, 5_000 - launch_us))
        elif i % period == period - 2:  # the host's work at the end of the step before: the device runs dry
            events.append(device_event(s, 5_000 - work_us))
        else:
            events.append(device_event(s, 5_000))
    windows = tuple((i * 5_000, (i + 1) * 5_000) for i in range(steps))
    f = frames(events + [host_event(a, b - a, "train") for a, b in windows], steps=list(windows))
    return dataclasses.replace(f, step_program=program)


def test_launch_waits_after_the_hosts_other_work_are_that_works_cost():
    """The step's launch waits only at the steps where the host's own work (no annotation) had already left the
    device idle, as after a checkpoint's save: named that work's cost, not launch overhead. Where the waiting
    launches are another program's (eager ops between steps, say), the launch advice stays."""
    from jaxdiag.analyses.host_wait_findings import _SUGGESTIONS

    result = host_waits.analyze(AnalysisInputs(_saving_every(10, 30, 300, 2_000), thresholds=TH))
    by_kind = {x.evidence["kind"]: x for x in result.findings}
    launching = by_kind["dispatch"]
    assert sorted(launching.evidence["per_step"]) == [9, 19, 29] and launching.evidence["after_host_work"]
    assert "had the devices already idle for the host's other work (unattributed" in launching.message
    assert launching.suggestion == _SUGGESTIONS["dispatch_after_host_work"]
    other = host_waits.analyze(AnalysisInputs(_saving_every(10, 30, 300, 2_000, "jit_eval"), thresholds=TH))
    launching = next(x for x in other.findings if x.evidence["kind"] == "dispatch")
    assert "after_host_work" not in launching.evidence and "put more work" in launching.suggestion


def test_sync_steps_from_device_copies():
    # No host read-back event, but the device copied a scalar to the host in step 1.
    steps = ((0, 1000), (1000, 2000))
    r = run(
        [device_event(1500, 2, "MemcpyD2H", line="Stream #16(MemcpyD2H)", line_kind="memcpy", module="")], steps=steps
    )
    assert r.sync_steps == (1,)


def test_h100_mlp_input_stall_every_third_step_is_named(h100_mlp):
    # The program sleeps 4 ms in its input pipeline every third step (0.5 ms otherwise).
    r = host_waits.analyze(AnalysisInputs(h100_mlp.frames))
    (stall,) = [f for f in r.findings if f.evidence["cause"] == "input_pipeline"]
    assert "at steps 0, 3, 6 and 9 (every 3rd step)" in stall.message


def test_an_idle_stretch_across_a_step_boundary_is_cut_there():
    # Steps tile the run: the device idles from 300 in step 0 to 1500 in step 1, one merged stretch.
    r = run([device_event(0, 300), device_event(1500, 500)], steps=((0, 1000), (1000, 2000)))
    by_step = {step: round(sum(c.values()) * 1000, 3) for step, c in r.by_step().items()}  # microseconds
    assert by_step == {0: 700, 1: 500}


def test_no_step_holds_more_waits_than_its_wall_time(cpu_frames):
    r = host_waits.analyze(AnalysisInputs(cpu_frames.frames))
    steps = cpu_frames.frames.steps
    walls = dict(zip(steps["step"], (steps["end_ns"] - steps["start_ns"]) / 1e6))
    for step, waits in r.by_step().items():
        assert sum(waits.values()) <= walls[step] + 1e-6


def test_step_windows_as_arrays_find_the_step_each_time_lies_in(h100_transformer) -> None:
    """The windows host waits reads once (``_Bounds``) find, for each time, the window that holds it."""
    import numpy as np

    from jaxdiag.analyses.device_work import step_windows

    frames = h100_transformer.frames
    win = step_windows(frames, frames.hosts[0])
    bounds = host_waits._Bounds.of(win)
    lo, hi = int(win["start_ns"].min()), int(win["end_ns"].max())
    times = np.concatenate([np.linspace(lo - 10, hi + 10, 997).astype(np.int64), win["start_ns"].to_numpy(), [hi]])
    rows = list(zip(win["start_ns"].tolist(), win["end_ns"].tolist(), win["step"].tolist()))
    expected = [next((step for s, e, step in rows if s <= t < e), -1) for t in times.tolist()]
    assert bounds.windows.step_of(times).tolist() == expected
    assert host_waits._Bounds.of(win.iloc[:0]).windows.step_of(times).tolist() == [-1] * len(times)


@pytest.mark.parametrize("python_frames", [0, 5000])
def test_python_outside_annotations_points_at_the_python_tracer_as_the_capture_allows(python_frames):
    """Device idle with no annotation or runtime event on the host: where to look depends on whether the
    capture holds the Python tracer's call stacks (``jaxdiag.capture`` leaves the tracer off)."""
    steps = tuple((i * 1000, (i + 1) * 1000) for i in range(4))
    events = [device_event(s + 600, 300) for s, _ in steps]  # 0.6 ms a step with nothing on the host
    f = frames(events + [host_event(s, e - s, "train") for s, e in steps], steps=list(steps))
    f = dataclasses.replace(f, meta={**f.meta, "python_frames": python_frames})
    finding = next(x for x in host_waits.analyze(AnalysisInputs(f, thresholds=TH)).findings if "Python" in x.message)
    assert "outside any annotation" in finding.message
    if python_frames:
        assert (
            "holds the Python tracer's call stacks" in finding.suggestion
            and "include_python=True" in finding.suggestion
        )
    else:
        assert "python_tracer=True" in finding.suggestion and "python_tracer_level=1" in finding.suggestion


def test_launches_that_return_only_once_their_program_ran_are_said_to():
    """Three annotated steps, each launching ``train_step`` with a launch that returns after the run ends
    (a synchronous launch): the launching finding says so. With no callback in the program the advice is
    fewer launches for the same work, not that the host is slower than the device; with one (an op named
    ``debug_print.1``, as ``jax.debug.print`` is), it is to take the callback out."""
    from jaxdiag.analyses.host_wait_findings import _SUGGESTIONS

    def steps(with_callback: bool):
        events = []
        for k in range(3):
            s = 1000 * k
            events.append(host_event(s + 100, 800, "PjitFunction(train_step)"))
            for i, at in enumerate((300, 500)):  # a program of two ops
                events.append({**device_event(s + at, 200, module="jit_train_step", name=f"fusion.{i}"), F.RUN_ID: k})
            if with_callback:
                events.append({**device_event(s + 700, 50, module="jit_train_step", name="debug_print.1"), F.RUN_ID: k})
        windows = [(1000 * k, 1000 * (k + 1)) for k in range(3)]
        f = frames(events + [host_event(a, b - a, "train") for a, b in windows], steps=windows)
        f = dataclasses.replace(f, step_program="jit_train_step")
        result = host_waits.analyze(AnalysisInputs(f, thresholds=TH))
        return next(x for x in result.findings if x.evidence["kind"] == "dispatch")

    plain = steps(False)
    assert plain.evidence["synchronous_launches"] == [3, 3] and "host_callbacks" not in plain.evidence
    assert "3 of 3 launches of `train_step` returned only once it had run" in plain.message
    assert plain.suggestion == _SUGGESTIONS["synchronous_launch"]
    printing = steps(True)
    assert printing.evidence["host_callbacks"] == ["debug_print.1"]
    assert printing.suggestion == _SUGGESTIONS["callback_launch"]
