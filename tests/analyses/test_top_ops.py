"""Top ops: the op with the most device time, its FLOPs against the compiler's, and the roofline verdict."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdiag.analyses import top_ops
from jaxdiag.xprof_tools import top_ops_join
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.trace import frames as F


def _op_total_ms(frames, name: str, module: str) -> float:
    ev = frames.events
    rows = ev.loc[
        (ev[F.CATEGORY] == "device")
        & (ev[F.HLO_MODULE] == module)
        & ((ev[F.HLO_OP] == name) | ((ev[F.HLO_OP] == "") & (ev[F.NAME] == name)))
    ]
    return float(rows[F.DUR_NS].to_numpy(np.float64).sum()) / 1e6


def test_cpu_matmul_is_the_top_op(matmul_capture):
    from jaxdiag.reporting.build import _beside_trace
    from jaxdiag.trace.load import load

    frames = load(matmul_capture.run_dir)
    _, records, _ = _beside_trace(str(matmul_capture.run_dir), matmul_capture.run_dir, None)
    r = top_ops.analyze(AnalysisInputs(frames, compile_log=records))
    first = r.rows[0]
    assert first.id == "op1" and first.function == "step" and first.module == "jit_step"
    assert first.share > 0.5  # the 512^3 matmul outweighs the tanh
    assert first.total_ms == pytest.approx(_op_total_ms(frames, first.name, first.module), rel=1e-6)
    assert first.per_step_ms == pytest.approx(first.total_ms / matmul_capture.steps)
    assert first.source.endswith(".py:" + first.source.rsplit(":", 1)[-1]) and "conftest.py" in first.source
    # XLA:CPU traces carry no roofline: FLOPs and the bound are unknown, not guessed.
    assert first.flops is None and first.bound == "unknown"
    assert r.peak_flops is None and r.roofline_source.startswith("unknown")


def test_roofline_bound_from_intensity_and_ridge():
    base = top_ops.TopOps(
        (top_ops.OpRow("op1", "fusion.1", "jit_f", "f", "compute", 1, 1.0, 1.0, 1.0, programs=(7,)),),
        1.0,
        1,
        100e12,
        1e12,
        "test",
    )
    hlo = [
        {
            "hlo_op_name": "fusion.1",
            "program_id": "7",
            "total_self_time": 1000.0,  # us
            "model_flop_rate": 50_000.0,
            "measured_memory_bw": 100.0 / 2**30 * 1e9 * 2**30 / 1e9,
            "bound_by": "Compute",
            "hlo_op_expression": "%fusion.1 = bf16[8]{0} fusion()",
            "source_info": "<div class='source-info-cell' title='a.py:3'>a.py:3</div>",
        },
        {"hlo_op_name": "fusion.1", "program_id": "8", "total_self_time": 5.0, "model_flop_rate": 1.0},
    ]
    joined = top_ops_join.join_xprof(base, hlo)
    row = joined.rows[0]
    assert row.flops == pytest.approx(50_000e9 * 1e-3)  # rate x time, program 8 left out
    assert row.bytes_accessed == pytest.approx(100.0 * 2**30 * 1e-3)
    assert row.intensity == pytest.approx(row.flops / row.bytes_accessed)
    assert row.bound == ("compute" if row.intensity >= 100 else "memory")
    assert row.source == "a.py:3" and row.dtype == "bfloat16" and row.xprof_bound_by == "Compute"
    assert joined.deep and joined.section().ridge_point == pytest.approx(100.0)


def test_unmatched_op_stays_unknown():
    base = top_ops.TopOps(
        (top_ops.OpRow("op1", "fusion.1", "jit_f", "f", "compute", 1, 1.0, 1.0, 1.0),), 1.0, 1, None, None, "unknown"
    )
    row = top_ops_join.join_xprof(base, [{"hlo_op_name": "fusion.2", "program_id": "1"}]).rows[0]
    assert row.flops is None and row.bound == "unknown"


def test_function_and_dtype_names():
    assert top_ops.function_of("jit_train_step") == "train_step"
    assert top_ops.function_of("jit(step)") == "step"
    assert top_ops.function_of("custom") == "custom"
    assert top_ops_join.output_dtype("%d = f32[128,1024]{1,0} dot(...)") == "float32"
    assert top_ops_join.output_dtype("nonsense") == ""
    assert top_ops_join.source_line("<div title='x.py:1'>x.py:1</div>") == "x.py:1"


def test_h100_top_op_flops_against_cost_analysis(h100_mlp):
    """XProf's FLOPs of the MLP's first backward matmul against ``cost_analysis()`` of the same dot."""
    import jax
    import jax.numpy as jnp

    from jaxdiag.xprof_tools.convert import table_properties, table_rows, tool_data

    frames = h100_mlp.frames
    r = top_ops.analyze(AnalysisInputs(frames))
    assert r.rows[0].total_ms == max(row.total_ms for row in r.rows)
    # Within 1%: rows inside compiles that no program launched (autotuning) are not counted.
    assert r.rows[0].total_ms == pytest.approx(_op_total_ms(frames, r.rows[0].name, r.rows[0].module), rel=0.01)
    files = list(frames.files)
    roof = tool_data(files, "roofline_model")
    deep = top_ops_join.join_xprof(r, table_rows(tool_data(files, "hlo_stats")), table_properties(roof[0]))
    row = next(x for x in deep.rows if x.name == "gemm_fusion_dot.1")
    # %gemm_fusion_dot.1 = f32[4096,1024] from f32[128,4096] and f32[128,1024]: a^T @ b, six runs (steps 0-5).
    dot = jax.jit(lambda a, b: a.T @ b).lower(jnp.ones((128, 4096)), jnp.ones((128, 1024))).compile()
    expected = float(dot.cost_analysis()["flops"]) * row.count
    assert row.flops == pytest.approx(expected, rel=0.05)  # the fusion also scales its input
    assert row.dtype == "float32" and row.bound == "memory" and row.source.endswith(".py:14")
    assert deep.ridge_point == pytest.approx(deep.peak_flops / deep.memory_bandwidth_bps)


def test_a_function_name_shared_by_two_programs_takes_its_line_from_the_program_that_ran():
    records = [
        {"function": "step", "source": "a.py:1", "program_id": 11},
        {"function": "step", "source": "b.py:2", "program_id": 12},
        {"function": "loss", "source": "c.py:3"},
    ]
    source = top_ops._function_sources(records)
    assert source("step", (12,)) == "b.py:2"
    assert source("step", ()) == ""  # two lines, no program to tell them apart: no guess
    assert source("loss", ()) == "c.py:3"
    assert source("other", (11,)) == ""
