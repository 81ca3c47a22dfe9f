"""Throughput on hand-built frames: periods, steady state, tokens and MFU."""

from __future__ import annotations

import pytest

from jaxdiag.analyses import throughput
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.reporting import codec
from tests.frames_builders import compile_events, device_event, frames

# Periods 11, 9 and 10 ms: step 0 ends at 10 ms but step 1 starts at 11 ms.
STEPS = [(0, 10_000), (11_000, 20_000), (20_000, 30_000)]


def run(events=(), steps=STEPS, peak_flops=float("nan"), **kw):
    f = frames([device_event(0, 10)] + list(events), steps=steps, peak_flops=peak_flops)
    return throughput.analyze(AnalysisInputs(f, **kw))


def test_rates_over_periods():
    r = run()
    assert [s.period_ms for s in r.per_step] == pytest.approx([11, 9, 10])
    assert r.steps_per_s == pytest.approx(100.0)
    assert r.steady_steps_per_s == pytest.approx(100.0)
    assert (r.tokens_per_s, r.steady_tokens_per_s, r.mfu) == (None, None, None)


def test_steady_state_leaves_out_compiling_steps():
    r = run(compile_events(12_000, 5000, "step"))
    assert [s.compiled for s in r.per_step] == [False, True, False]
    assert r.steps_per_s == pytest.approx(100.0)
    assert r.steady_steps_per_s == pytest.approx(2 / 0.021)


@pytest.mark.parametrize(
    "tokens, overall, steady",
    [
        (100, 300 / 0.030, 200 / 0.021),
        ({0: 100, 1: 300, 2: 100}, 500 / 0.030, 200 / 0.021),
        ({0: 100}, 100 / 0.011, 100 / 0.011),  # only steps with known tokens count
        ({5: 100}, None, None),
    ],
)
def test_tokens(tokens, overall, steady):
    r = run(compile_events(12_000, 5000, "step"), tokens_per_step=tokens)
    assert r.tokens_per_s == (None if overall is None else pytest.approx(overall))
    assert r.steady_tokens_per_s == (None if steady is None else pytest.approx(steady))


def test_mfu():
    r = run(compile_events(12_000, 5000, "step"), peak_flops=1e12, flops_per_step=2e9)
    assert r.mfu == pytest.approx(2e9 * (2 / 0.021) / 1e12)
    assert r.per_step[0].mfu == pytest.approx(2e9 / 0.011 / 1e12)
    assert run(flops_per_step=2e9).mfu is None  # peak unknown
    assert run(peak_flops=1e12).mfu is None  # flops unknown


def test_mfu_sums_peak_over_devices():
    r = run([device_event(0, 10, device=1)], peak_flops=1e12, flops_per_step=2e9)
    assert r.mfu == pytest.approx(2e9 * 100 / 2e12)


def test_slowest_host_and_filter():
    f = frames(
        [device_event(0, 10, host="a"), device_event(0, 10, host="b")],
        step_table=[("a", 0, 0, 10_000), ("a", 1, 10_000, 20_000), ("b", 0, 0, 15_000), ("b", 1, 15_000, 20_000)],
    )
    r = throughput.analyze(AnalysisInputs(f))
    assert [s.period_ms for s in r.per_step] == pytest.approx([15, 10])
    only = throughput.analyze(AnalysisInputs(f, steps=[1]))
    assert [s.step for s in only.per_step] == [1]
    assert only.steps_per_s == pytest.approx(100.0)


def test_without_steps_there_is_no_rate():
    r = throughput.analyze(AnalysisInputs(frames([device_event(0, 10)])))
    d = codec.to_json(r.section())
    assert d.pop("mfu_basis")["flops_per_step"] is None
    assert d == {
        "steady_from": "step windows",
        "host_ahead": None,
        "steps_per_s": None,
        "tokens_per_s": None,
        "steady_steps_per_s": None,
        "steady_tokens_per_s": None,
        "mfu": None,
        "count_unit": "tokens",
        "per_step": [],
    }


def test_per_step_json():
    d = codec.to_json(run(tokens_per_step=100).section())["per_step"][0]
    assert d == {
        "step": 0,
        "wall_ms": 10.0,
        "period_ms": 11.0,
        "compiled": False,
        "steps_per_s": pytest.approx(90.9091),
        "tokens": 100.0,
        "tokens_per_s": pytest.approx(9090.9091),
        "mfu": None,
    }


# --- end to end on real captures ---


def test_h100_transformer(h100_transformer):
    truth = h100_transformer.truth["steps"]
    tokens = {t["step"]: t["tokens"] for t in truth}
    r = throughput.analyze(AnalysisInputs(h100_transformer.frames, tokens_per_step=tokens, flops_per_step=1e9))
    assert [s.step for s in r.per_step if s.compiled] == [0, 5, 8]
    steady_wall_s = sum(t["wall_s"] for t in truth if t["step"] not in (0, 5, 8))
    assert r.steady_steps_per_s == pytest.approx(9 / steady_wall_s, rel=0.03)
    assert r.steady_tokens_per_s == pytest.approx(
        sum(t["tokens"] for t in truth if t["step"] not in (0, 5, 8)) / steady_wall_s, rel=0.03
    )
    assert r.steps_per_s == pytest.approx(12 / sum(t["wall_s"] for t in truth), rel=0.01)
    # The peak from the trace's device stats: 132 SMs x 1.98 GHz x 4096 bf16 FLOPs per SM per clock.
    peak = 132 * 1.98e9 * 4096
    assert r.mfu == pytest.approx(1e9 * r.steady_steps_per_s / peak, rel=1e-6)
    assert r.mfu_basis.peak_flops == pytest.approx(peak, rel=1e-5)
    assert "trace device stats" in r.mfu_basis.peak_source


def test_cpu_capture(cpu_frames):
    truth = cpu_frames.truth
    r = throughput.analyze(AnalysisInputs(cpu_frames.frames, tokens_per_step=32))
    assert [s.step for s in r.per_step if s.compiled] == [truth.recompile_step]
    assert r.steady_steps_per_s > r.steps_per_s > 0
    assert r.mfu is None  # no peak flops for a CPU
