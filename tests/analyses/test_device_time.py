"""Device time per module and per op: summed, split by step, divided by devices."""

from __future__ import annotations

import pytest

from frames_builders import device_event, frames
from jaxdiag.analyses import device_time
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.reporting import codec


def test_module_time_per_step_and_per_device():
    events = [
        device_event(100, 1000, hlo_op="fusion.1", device=0),
        device_event(100, 1000, hlo_op="fusion.1", device=1),
        device_event(1500, 500, hlo_op="dot.2", device=0),
        device_event(12_000, 3000, hlo_op="fusion.1", device=0),
        device_event(12_500, 2000, module="jit_eval", hlo_op="reduce.3", device=1),
    ]
    r = device_time.analyze(AnalysisInputs(frames(events, steps=[(0, 10_000), (10_000, 20_000)])))
    by_module = {m.module: m for m in r.section().by_module}
    # two devices ran ops: every sum is halved so it reads against wall time
    assert by_module["jit_step"].total_ms == pytest.approx((1000 + 1000 + 500 + 3000) / 2 / 1e3)
    assert [(p.step, p.ms) for p in by_module["jit_step"].per_step] == [
        (0, pytest.approx(2500 / 2 / 1e3)),
        (1, pytest.approx(3000 / 2 / 1e3)),
    ]
    assert by_module["jit_eval"].count == 1
    top = r.section().top_ops
    assert (top[0].name, top[0].count) == ("fusion.1", 3)


def test_no_device_work_gives_empty_sections():
    r = device_time.analyze(AnalysisInputs(frames([], steps=[(0, 1000)])))
    assert codec.to_json(r.section()) == {"by_module": [], "top_ops": []} and r.findings == ()
