"""The sharding analysis on records of real sharded programs, on hand-built timelines and a real capture."""

from __future__ import annotations

import pytest

from jaxdiag.analyses.base import AnalysisInputs, Severity
from jaxdiag.analyses.sharding import analyze, analyze_records, origin_of
from jaxdiag.config import DEFAULT_THRESHOLDS
from jaxdiag.sharding.hlo import Collective
from tests import frames_builders as fb
from tests import sharding_programs as programs


def _kinds(result):
    return [f.kind for f in result.findings]


def test_data_parallel_reduces_gradients_over_data_and_flags_nothing():
    result = analyze_records(programs.data_parallel().records)
    (fn,) = result.functions
    (use,) = fn.collectives
    c = use.collective
    assert (fn.function, use.origin, c.kind, c.mesh_axes) == ("dp_step", "reduction", "all-reduce", ("data",))
    assert set(c.arrays) == {"params['w1']", "params['w2']"} and c.array_role == "update"
    assert result.findings == ()


def test_replicated_parameters_over_the_threshold_are_reported():
    records = programs.data_parallel().records
    small = DEFAULT_THRESHOLDS.replace(replicated_param_bytes=20_000)
    (f,) = analyze_records(records, small).findings
    assert f.kind == "replicated_param" and f.severity is Severity.WARNING
    assert f.evidence["arrays"] == {"params['w1']": 64 * 128 * 4}  # w2 (16 KiB) is under 20 000 B
    assert "params['w1']" in f.message and "8 devices" in f.message
    assert analyze_records(records, DEFAULT_THRESHOLDS.replace(replicated_param_bytes=10**9)).findings == ()


def test_tensor_parallel_2x4_collectives_are_all_implied_by_the_specs():
    result = analyze_records(programs.tensor_parallel().records)
    (fn,) = result.functions
    assert fn.facts.mesh.axis_sizes == (2, 4)
    assert sorted((u.origin, u.collective.mesh_axes) for u in fn.collectives) == [
        ("reduction", ("data",)),
        ("reduction", ("model",)),
    ]
    assert "implicit_resharding" not in _kinds(result)


def test_bad_spec_reports_the_function_array_and_mesh_axis():
    result = analyze_records(programs.bad_spec().records)
    (f,) = result.findings
    assert f.kind == "implicit_resharding" and f.severity is Severity.WARNING
    ev = f.evidence
    assert (ev["function"], ev["kind"], ev["arrays"], ev["mesh_axes"]) == (
        "bad_step",
        "all-gather",
        ["params['w']"],
        ["model"],
    )
    assert ev["bytes_per_call"] == 512 * 512 * 4 and ev["user_specs"] == {"params['w']": "P('model', None)"}
    assert "bad_step gathers params['w'] (float32[512,512], P('model', None)) over mesh axis 'model'" in f.message
    assert "undoes the sharding" in f.message and "P(None, 'model')" in f.suggestion
    assert f.time_lost_ms == 0.0  # no timeline: nothing measured


def test_a_sharding_change_that_recompiles_is_reported():
    result = analyze_records(programs.sharding_change().records)
    (f,) = result.findings
    assert f.kind == "sharding_recompile" and f.evidence["function"] == "moved"
    assert f.evidence["compile_index"] == 2
    (change,) = f.evidence["changes"]
    assert change["path"] == "args[1]" and "P('data'" in change["old"] and "P('model'" in change["new"]
    assert f.evidence["arrays"] == ["x"] and f.evidence["mesh_axes"] == {"x": {"old": ["data"], "new": ["model"]}}
    assert "x (args[1]) P('data', None) -> P('model', None)" in f.message
    # Two different programs: each compile keeps its own facts.
    assert [fn.compiles for fn in result.functions] == [(1,), (2,)]


@pytest.mark.parametrize(
    "op_name, kind, origin",
    [
        ("jit(f)/transpose(jvp())/dot_general", "all-reduce", "reduction"),
        ("jit(f)/dot_general", "all-gather", "resharding"),
        ("jit(f)/shard_map/psum", "all-reduce", "user"),
        ("jit(f)/shard_map/ppermute", "collective-permute", "user"),
        ("jit(f)/sharding_constraint", "all-to-all", "constraint"),
        ("jit(f)/mul;jit(f)/psum_scatter", "reduce-scatter", "user"),
        ("", "all-gather", "resharding"),
    ],
)
def test_origin_from_the_jax_op(op_name, kind, origin):
    c = Collective("c", kind, "main", (), (), 0, 0, 2, 4, ("x",), op_name=op_name)
    assert origin_of(c) == origin


def test_unreadable_sharding_facts_are_skipped():
    good = programs.bad_spec().records[0]
    broken = dict(good, sharding={"mesh": "not a mesh"}, compile_index=5)
    result = analyze_records([broken, {"function": "g", "sharding": None}, good])
    assert [fn.compiles for fn in result.functions] == [(1,)]


# --- the timeline ----------------------------------------------------------------------


def _bad_frames(op: str = "all-gather", module: str = "jit_bad_step"):
    events = []
    for step in range(2):
        t0 = step * 1000
        events.append(fb.host_event(t0, 900, "train"))
        for dev in range(2):
            events.append(fb.device_event(t0 + 10, 300, "fusion", device=dev, module=module))
            events.append(
                fb.device_event(
                    t0 + 320,
                    200,
                    "ncclDevKernel_AllGather_RING_LL",
                    device=dev,
                    module=module,
                    hlo_op=op,
                    line="Stream #20(Collective)",
                    line_kind="collective",
                )
            )
    return fb.frames(events, steps=[(0, 900), (1000, 1900)])


def test_timeline_collectives_join_their_function_array_and_axis():
    inputs = AnalysisInputs(frames=_bad_frames(), compile_log=programs.bad_spec().records)
    result = analyze(inputs)
    (row,) = result.timeline
    assert (row.module, row.op, row.function, row.arrays, row.mesh_axes, row.origin) == (
        "jit_bad_step",
        "all-gather",
        "bad_step",
        ("params['w']",),
        ("model",),
        "resharding",
    )
    assert row.count == 4 and row.total_ms == pytest.approx(0.4)  # 2 steps x 200 us, per device
    (f,) = [f for f in result.findings if f.kind == "implicit_resharding"]
    assert f.time_lost_ms == pytest.approx(0.4)
    (use,) = result.functions[0].collectives
    assert use.timeline_count == 4 and use.timeline_ms == pytest.approx(0.4)
    section = result.section()
    assert section.timeline[0].function == "bad_step"
    assert section.functions[0].collectives[0].timeline_ms == pytest.approx(0.4)


def test_timeline_ops_without_a_record_stay_unattributed():
    result = analyze(AnalysisInputs(frames=_bad_frames(module="jit_other"), compile_log=programs.bad_spec().records))
    (row,) = result.timeline
    assert row.function is None and row.arrays == () and row.kind == "all-gather"
    assert result.functions[0].collectives[0].timeline_count == 0


def test_real_cpu_capture_maps_collectives_to_functions(tmp_path_factory):
    from jaxdiag.reporting.build import report

    cap = programs.capture(tmp_path_factory.mktemp("sharding_capture"))
    rep = report(cap.logdir)
    rows = {r.function: r for r in rep.sharding.timeline}
    assert set(rows) == {"bad_step", "dp_step"}
    bad, dp = rows["bad_step"], rows["dp_step"]
    assert (bad.op, bad.arrays, bad.mesh_axes, bad.origin) == ("all-gather", ("params['w']",), ("model",), "resharding")
    assert (dp.arrays, dp.mesh_axes, dp.origin) == (("params['w1']", "params['w2']"), ("data",), "reduction")
    assert bad.count >= cap.steps and bad.total_ms > 0
    finding = next(f for f in rep.findings if f.kind == "implicit_resharding")
    assert finding.evidence["function"] == "bad_step"
    assert finding.time_lost_ms == pytest.approx(bad.total_ms, abs=1e-3)
    assert {fn.function for fn in rep.sharding.functions} == {"bad_step", "dp_step"}
