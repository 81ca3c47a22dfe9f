"""Memory: compile footprints against ``memory_analysis()`` and capacity, measured peaks, and the findings."""

from __future__ import annotations

import dataclasses

import pytest
from frames_builders import device_event, frames

from jaxdiag.analyses import memory
from jaxdiag.analyses.base import AnalysisInputs


def _record(function: str, **memory_fields: int) -> dict:
    return {"function": function, "compile_index": 1, "source": "train.py:10", "memory": memory_fields}


def _with_capacity(f, capacity: float):
    return dataclasses.replace(f, devices=f.devices.assign(memory_bytes=capacity, device_name="Test GPU"))


def test_footprints_match_memory_analysis(matmul_capture):
    from jaxdiag.reporting.build import report

    r = report(matmul_capture.run_dir)
    compiles = [c for c in r.memory.compiles if c.function == "step"]
    assert compiles, "the capture window records memory analysis by default"
    for field, value in matmul_capture.memory.items():
        assert getattr(compiles[0], field) == value
    assert compiles[0].total_bytes == sum(matmul_capture.memory.values())
    assert r.memory.capacity_bytes is None and r.memory.capacity_source.startswith("unknown")


def test_temporaries_dominating_name_the_function_and_advise_remat():
    f = _with_capacity(frames([device_event(0, 10)]), 80 * 2**30)
    rec = _record(
        "train_step", argument_bytes=2 * 2**30, output_bytes=2 * 2**30, temp_bytes=20 * 2**30, generated_code_bytes=0
    )
    r = memory.analyze(AnalysisInputs(f, compile_log=[rec]))
    (finding,) = r.findings
    assert finding.kind == "memory_temporaries" and "train_step" in finding.message and "train.py:10" in finding.message
    assert "jax.checkpoint" in finding.suggestion and "micro-batches" in finding.suggestion
    assert r.section().compiles[0].share_of_capacity == pytest.approx(24 / 80)


def test_near_capacity_advises_donation_and_offloading():
    f = _with_capacity(frames([device_event(0, 10)]), 16 * 2**30)
    rec = _record("step", argument_bytes=8 * 2**30, output_bytes=6 * 2**30, temp_bytes=1 * 2**30)
    (finding,) = memory.analyze(AnalysisInputs(f, compile_log=[rec])).findings
    assert finding.kind == "memory_near_capacity" and finding.evidence["share"] == pytest.approx(15 / 16, rel=1e-3)
    assert "donate_argnums" in finding.suggestion and "pinned_host" in finding.suggestion


def test_small_footprints_make_no_finding():
    f = _with_capacity(frames([device_event(0, 10)]), 80 * 2**30)
    rec = _record("step", argument_bytes=2**20, output_bytes=2**20, temp_bytes=2**22)
    assert memory.analyze(AnalysisInputs(f, compile_log=[rec])).findings == ()


def test_memory_profile_peaks_and_bad_input():
    profile = {
        "memoryProfilePerAllocator": {
            "GPU_0_bfc": {
                "profileSummary": {
                    "peakBytesUsageLifetime": "900",
                    "memoryCapacity": "1000",
                    "peakStats": {"heapAllocatedBytes": "880", "stackReservedBytes": "10"},
                    "peakStatsTimePs": "5",
                }
            },
            "broken": {"profileSummary": "nonsense"},
        }
    }
    (peak,) = memory.peaks_from_memory_profile("h", profile)
    assert (peak.peak_bytes, peak.capacity_bytes, peak.lifetime_peak_bytes) == (890, 1000, 900)
    joined = memory.join_memory_profile(memory.MemoryResult((), None, "unknown"), [peak])
    assert [f.kind for f in joined.findings] == ["memory_near_capacity"]
    assert memory.peaks_from_memory_profile("h", []) == []


def test_h100_measured_peak_against_memory_analysis(h100_mlp):
    """XProf's measured peak of the MLP against ``memory_analysis()`` of its train_step (largest batch)."""
    import jax
    import jax.numpy as jnp

    from jaxdiag.xprof_tools.convert import tool_data

    (file,) = h100_mlp.frames.files
    peaks = {p.allocator: p for p in memory.peaks_from_memory_profile("gpu0", tool_data([file], "memory_profile"))}
    peak = peaks["GPU_0_bfc"]

    def fwd(params, x):
        for p in params:
            x = x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]
        return x

    @jax.jit
    def train_step(params, x, y):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((fwd(p, x) - y) ** 2))(params)
        return jax.tree.map(lambda a, b: a - 1e-3 * b, params, g), loss

    params = [dict(w1=jnp.zeros((1024, 4096)), w2=jnp.zeros((4096, 1024))) for _ in range(4)]
    stats = train_step.lower(params, jnp.ones((144, 1024)), jnp.ones((144, 1024))).compile().memory_analysis()
    live = stats.argument_size_in_bytes + stats.output_size_in_bytes  # no donation: both live at once
    # The measured peak holds at least arguments and outputs, and at most those, the temporaries
    # and 64 MiB of runtime workspace (cuBLAS, the small-op program, the next batch).
    assert live <= peak.peak_bytes <= live + stats.temp_size_in_bytes + 64 * 2**20
    assert peak.capacity_bytes and peak.peak_bytes < peak.capacity_bytes
