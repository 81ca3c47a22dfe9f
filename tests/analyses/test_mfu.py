"""MFU without flags: FLOPs from the compile records, peak from the device stats, each with its source."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from frames_builders import device_event, frames

from jaxdiag.analyses import mfu, throughput
from jaxdiag.analyses.base import AnalysisInputs


def _inputs(capture, **kw):
    from jaxdiag.reporting.build import _beside_trace
    from jaxdiag.trace.load import load

    loaded = load(capture.run_dir)
    _, records, _ = _beside_trace(str(capture.run_dir), capture.run_dir, None)
    return AnalysisInputs(loaded, compile_log=records, **kw)


def test_capture_records_cost_analysis_by_default(matmul_capture):
    inputs = _inputs(matmul_capture)
    # Compiles before the window (other tests' functions named ``step``) come along marked.
    in_window = [r for r in inputs.compile_log if r.get("function") == "step" and not r.get("before_capture")]
    assert in_window and in_window[0]["cost"]["flops"] == matmul_capture.flops


def test_flops_per_step_from_compile_records(matmul_capture):
    basis = mfu.mfu_basis(_inputs(matmul_capture))
    # One execution of ``step`` per step, on the one CPU device that ran it.
    assert basis.per_step_flops == {s: matmul_capture.flops for s in range(matmul_capture.steps)}
    assert basis.flops_per_step == matmul_capture.flops
    assert "cost_analysis()" in basis.flops_source and "step" in basis.flops_source
    assert basis.dtype == "float32" and "100%" in basis.dtype_source
    # XLA:CPU has no known peak: MFU stays unknown, and says why.
    assert basis.peak_flops is None and basis.peak_source.startswith("unknown")
    assert throughput.analyze(_inputs(matmul_capture)).mfu is None


def test_mfu_is_flops_over_step_time_and_peak(matmul_capture):
    """With a device peak (here a TPU-like stat of 1 TFLOP/s), MFU = FLOPs / (steady period x peak)."""
    inputs = _inputs(matmul_capture)
    devices = inputs.frames.devices.assign(platform="tpu", peak_flops=1e12)
    inputs = dataclasses.replace(inputs, frames=dataclasses.replace(inputs.frames, devices=devices))
    r = throughput.analyze(inputs)
    steady = [s for s in r.per_step if not s.compiled]
    period_s = sum(s.period_ms for s in steady) / len(steady) / 1e3
    assert r.mfu == pytest.approx(matmul_capture.flops / (period_s * 1e12), rel=1e-9)
    # Against the step wall times the trace shows: the same within 20% (periods include the gap to the next step).
    wall_s = np.mean([s.wall_ms for s in steady]) / 1e3
    assert r.mfu == pytest.approx(matmul_capture.flops / (wall_s * 1e12), rel=0.2)
    assert r.mfu_basis.peak_source.endswith("peak_teraflops_per_second device stat (bf16)")


def test_gpu_peak_follows_the_dtype():
    row = {
        "platform": "gpu",
        "device_name": "NVIDIA H100 80GB HBM3",
        "core_count": 132.0,
        "clock_hz": 1.98e9,
        "peak_flops": 989e12,
    }
    bf16, how = mfu._device_peak(row, "bfloat16")
    assert bf16 == pytest.approx(132 * 1.98e9 * 4096) and "trace device stats" in how
    f32, how = mfu._device_peak(row, "float32")
    assert f32 == pytest.approx(bf16 / 2) and "TF32" in how  # not the bf16 peak for an f32 program
    assert mfu._device_peak(row, "float64")[0] is None
    # Without core count and clock: the datasheet peak by name, still by dtype.
    bare = {**row, "core_count": float("nan"), "clock_hz": float("nan")}
    assert mfu._device_peak(bare, "float32")[0] == pytest.approx(989e12 / 2)


def test_given_flops_win_and_say_so():
    f = frames([device_event(0, 10)], [(0, 100), (100, 200)], peak_flops=2e12)
    basis = mfu.mfu_basis(AnalysisInputs(f, flops_per_step=1e9))
    assert basis.flops_per_step == 1e9 and basis.flops_source.startswith("given")


def test_dtype_by_argument_bytes():
    records = [
        {
            "args": [
                {"kind": "array", "dtype": "bfloat16", "shape": [1024, 1024]},
                {"kind": "array", "dtype": "float32", "shape": [16]},
                {"kind": "static", "value": "3"},
            ]
        }
    ]
    assert mfu.compute_dtype(records)[0] == "bfloat16"
    assert mfu.compute_dtype([{"args": [{"kind": "array", "dtype": "int32", "shape": [4]}]}])[0] is None


def test_a_chosen_setting_wins_over_the_capture_default(tmp_path):
    """``configure(analysis=False)`` keeps cost analysis off inside a capture; ``None`` restores the default."""
    import jax
    import jax.numpy as jnp

    import jaxdiag
    from jaxdiag.capturing.sidecar import read_sidecars
    from jaxdiag.recording import compile_log

    def capture(folder, scale):
        @jax.jit
        def f(x):
            return x * scale

        with jaxdiag.profile(folder) as cap:
            f(jnp.ones(4)).block_until_ready()
        # the window's compiles (the sidecar also carries compiles made before it)
        return [
            r
            for r in read_sidecars(cap.run_dir).compile_log
            if r.get("function") == "f" and not r.get("before_capture")
        ]

    try:
        compile_log.configure(analysis=False)
        assert [r.get("cost") for r in capture(tmp_path / "off", 2.0)] == [None]
        assert compile_log.LOG.analysis is False  # left as chosen
        compile_log.configure(analysis=None)
        (record,) = capture(tmp_path / "default", 3.0)
        assert record["cost"]["flops"] > 0 and record["memory"]["output_bytes"] == 16
        assert compile_log.LOG.analysis is None  # the window's setting did not outlive it
    finally:
        compile_log.configure(analysis=None)
