"""What the trace cannot tell: a real loop that never reads, a one-step window, a missing host.

The truth comes from the trace through ``jax.profiler.ProfileData`` alone: the loop's
launches are its step annotations (one call each), its executions the distinct ``run_id``
stats on the program's XLA:CPU ops.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxdiag
from jaxdiag.analyses import completeness
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.analyses.capture_section import CaptureSection
from tests.frames_builders import device_event, frames

STEPS = 6


@jax.jit
def heavy(w, x):
    for _ in range(3):
        x = jnp.tanh(x @ w)
    return w + 1e-3 * x.mean(), x


def _loop_that_never_reads(logdir: Path) -> None:
    """Six steps, no read, the trace stopped at once (as a plain ``jax.profiler`` user would)."""
    w, x = jnp.full((512, 512), 1e-3), jnp.ones((512, 512))
    for _ in range(2):  # compiled for the arrays it returns, and nothing queued, before the trace
        w, x = jax.block_until_ready(heavy(w, x))
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    jax.profiler.start_trace(str(logdir), profiler_options=options)
    for step in range(STEPS):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            w, x = heavy(w, x)
    jax.profiler.stop_trace()
    jax.block_until_ready(w)


def _truth(logdir: Path) -> dict:
    runs, steps = set(), []
    for event in _events(_xplane(logdir)):
        stats = dict(event.stats)
        if stats.get("hlo_module") == "jit_heavy" and "run_id" in stats:
            runs.add(stats["run_id"])
        if event.name == "train":
            steps.append(int(stats["step_num"]))
    return {"executions": len(runs), "steps": sorted(steps)}


def _xplane(logdir: Path) -> Path:
    (path,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    return path


def _events(path: Path):
    """Every event of the capture, read with ``ProfileData`` alone."""
    from jax.profiler import ProfileData

    for plane in ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            yield from line.events


@pytest.fixture(scope="module")
def unread(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("unread")
    _loop_that_never_reads(logdir)
    return jaxdiag.report(logdir), _truth(logdir)


def test_a_trace_stopped_before_the_device_ran_its_steps_says_so(unread):
    report, truth = unread
    assert truth["steps"] == list(range(STEPS))
    missing = STEPS - truth["executions"]
    if missing == 0:  # the device kept up with the host this time: nothing to say, and nothing said
        assert report.capture.whole
        return
    (note,) = [n for n in report.capture.notes if n.kind == "device_work_missing"]
    assert note.evidence["launches"] == {"heavy": {"missing": missing, "of": STEPS}}
    assert note.evidence["steps"] == list(range(STEPS - missing, STEPS))  # the last launches never ran
    assert "block_until_ready" in note.change
    assert report.notes[0] == f"{note.message} {note.change}"


def test_launches_all_made_while_the_first_execution_ran_are_counted_missing():
    """Every launch came before the one execution in the trace ended: none is after the program's last op,
    and only the executions counted say that five launches have no device work."""
    run = Path(__file__).parents[1] / "data" / "cpu_unread_loop"
    truth = _truth(run)
    launches = _launch_starts(run)
    assert truth == {"executions": 1, "steps": list(range(STEPS))} and len(launches) == STEPS
    assert max(launches) < _last_op_end(run)  # what the rule by time alone cannot see
    (note,) = jaxdiag.report(run).capture.notes
    assert note.kind == "device_work_missing"
    assert note.evidence["launches"] == {"heavy": {"missing": STEPS - 1, "of": STEPS}}
    assert note.evidence["steps"] == list(range(1, STEPS))


def _launch_starts(run: Path, function: str = "heavy") -> list[int]:
    """The outermost ``PjitFunction(f)`` spans' starts (the runtime's own span nests in Python's)."""
    spans = sorted(
        (e.start_ns, e.start_ns + e.duration_ns) for e in _events(_xplane(run)) if e.name == f"PjitFunction({function})"
    )
    outer: list[tuple[float, float]] = []
    for start, end in spans:
        if not outer or start >= outer[-1][1]:
            outer.append((start, end))
    return [start for start, _ in outer]


def _last_op_end(run: Path) -> float:
    return max(
        e.start_ns + e.duration_ns for e in _events(_xplane(run)) if dict(e.stats).get("hlo_module") == "jit_heavy"
    )


def test_the_notes_come_before_the_findings(unread):
    from jaxdiag.render import html, terminal

    report, _ = unread
    if report.capture.whole:
        pytest.skip("the device kept up with the host")
    text = terminal.render(report, width=200)
    assert text.index("note: The trace of") < text.index("Per step (ms)")
    page = html.render(report)
    assert page.index("ends before its devices ran") < page.index("Findings, by time lost")


def test_capture_waits_for_the_device_so_the_same_loop_is_whole(tmp_path):
    w, x = jnp.full((512, 512), 1e-3), jnp.ones((512, 512))
    w, x = jax.block_until_ready(heavy(w, x))
    with jaxdiag.capture(tmp_path, skip=0, take=STEPS, run="drained") as cap:
        for _ in range(STEPS):
            with cap.step():
                w, x = heavy(w, x)
    assert _truth(tmp_path)["executions"] == STEPS
    report = jaxdiag.report(cap.run_dir)
    assert report.capture == CaptureSection(whole=True, notes=())


def test_calls_traced_in_an_eager_scan_body_are_not_launches_that_lost_their_work(tmp_path):
    """A loop the trace waits for, then ``jnp.matmul`` run once eagerly and an eager ``lax.scan`` whose
    body calls it: each call in the body is traced, not run, and leaves a launch span with no execution."""
    w, x = jnp.full((256, 256), 1e-3), jnp.ones((256, 256))
    w, x = jax.block_until_ready(heavy(w, x))
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    jax.profiler.start_trace(str(tmp_path), profiler_options=options)
    for step in range(3):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            w, x = heavy(w, x)
    y = jax.block_until_ready(jnp.matmul(x, w))
    y, _ = jax.lax.scan(lambda c, _: (jnp.tanh(jnp.matmul(c, w)), None), y, None, length=4)
    jax.block_until_ready(y)
    jax.profiler.stop_trace()
    launches, runs = _launch_starts(tmp_path, "matmul"), set()
    for event in _events(_xplane(tmp_path)):
        stats = dict(event.stats)
        if stats.get("hlo_module") == "jit_matmul" and "run_id" in stats:
            runs.add(stats["run_id"])
    assert len(runs) == 1 and len(launches) > 1  # the pattern: more launch spans than executions
    assert jaxdiag.report(tmp_path).capture == CaptureSection(whole=True, notes=())


def test_a_one_step_window_and_a_missing_host_are_said(tmp_path):
    f = jax.jit(lambda a: jnp.tanh(a @ a).sum())
    with jaxdiag.capture(tmp_path, skip=1, take=1, run="one") as cap:
        for _ in range(3):
            with cap.step():
                float(f(jnp.ones((64, 64))))
    assert _truth_steps(cap.run_dir) == [1]
    kinds = {n.kind: n for n in jaxdiag.report(cap.run_dir).capture.notes}
    assert set(kinds) == {"short_window"} and kinds["short_window"].evidence == {"steps": 1}
    # The run's other process wrote nothing here: its sidecar says there were two.
    (sidecar,) = cap.run_dir.glob("jaxdiag-*.json")
    doc = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**doc, "process_count": 2}))
    kinds = {n.kind: n for n in jaxdiag.report(cap.run_dir).capture.notes}
    assert kinds["hosts_missing"].evidence == {"expected": 2, "read": 1, "missing_processes": [1]}


def _truth_steps(run_dir: Path) -> list[int]:
    (path,) = run_dir.glob("*.xplane.pb")
    return sorted(int(dict(e.stats)["step_num"]) for e in _events(path) if e.name == "train")


def test_dropped_event_stats_are_said():
    events = [device_event(0, 100), device_event(1000, 100)]
    held = frames(events, steps=[(0, 500), (500, 1200)], meta={"dropped_events": 1234})
    (note,) = completeness.analyze(AnalysisInputs(held)).notes
    assert note.kind == "events_dropped" and "dropped_events = 1,234" in note.message
    assert completeness.analyze(AnalysisInputs(frames(events, steps=[(0, 500), (500, 1200)]))).whole


_names = st.sampled_from(["fusion", "fusion.1", "dot", "copy", ""])


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            _names,  # kernel
            _names,  # HLO op
            st.sampled_from(["jit_step", "jit_eval", "other", None]),  # module; None: missing, no group's
            st.integers(0, 2),  # program
            st.integers(0, 1),  # device
        ),
        max_size=60,
    )
)
def test_executions_are_the_commonest_count_of_an_op_the_larger_on_a_tie(rows: list[tuple]) -> None:
    """Each compile of a function ran as many times as its ops' commonest number of occurrences, on the device
    that ran it most; a tie between two counts is the larger (an op run once more, as a loop body's, is no
    other execution). Written out with counters, and held to ``_executions`` on generated ops."""
    import collections

    import pandas as pd

    from jaxdiag.trace import frames as F

    ops = pd.DataFrame(
        {
            F.NAME: pd.Categorical([r[0] for r in rows]),
            F.HLO_OP: pd.Categorical([r[1] for r in rows]),
            F.HLO_MODULE: pd.Categorical([r[2] for r in rows]),
            F.PROGRAM_ID: [r[3] for r in rows],
            F.PLANE: pd.Categorical(["/host:CPU"] * len(rows)),
            F.DEVICE: [r[4] for r in rows],
        }
    )
    best: dict[tuple[str, int], int] = {}
    for module, program, device in {(r[2], r[3], r[4]) for r in rows if r[2] is not None}:
        per_op = collections.Counter((r[0], r[1]) for r in rows if (r[2], r[3], r[4]) == (module, program, device))
        how_often = collections.Counter(per_op.values())
        runs = max(count for count, n in how_often.items() if n == max(how_often.values()))
        best[(module, program)] = max(best.get((module, program), 0), runs)
    truth: dict[str, int] = {}
    for (module, _), runs in best.items():
        if module.startswith("jit_"):
            truth[module[4:]] = truth.get(module[4:], 0) + runs
    assert completeness._executions(ops) == truth


def test_executions_with_run_ids_count_one_the_trace_cut_short() -> None:
    """Two executions of ``jit_f``'s three ops, the second cut by the trace's end after one op: the commonest
    count of an op says one, the run ids say two."""
    import pandas as pd

    from jaxdiag.trace import frames as F

    names = ["dot", "tanh", "add", "dot"]
    ops = pd.DataFrame(
        {
            F.NAME: pd.Categorical(names),
            F.HLO_OP: pd.Categorical(names),
            F.HLO_MODULE: pd.Categorical(["jit_f"] * 4),
            F.PROGRAM_ID: [7] * 4,
            F.PLANE: pd.Categorical(["/host:CPU"] * 4),
            F.DEVICE: [0] * 4,
        }
    )
    assert completeness._executions(ops) == {"f": 1}
    assert completeness._executions(ops.assign(**{F.RUN_ID: [11, 11, 11, 12]})) == {"f": 2}
    assert completeness._executions(ops.assign(**{F.RUN_ID: [11, 11, 11, -1]})) == {"f": 1}  # not every op's
