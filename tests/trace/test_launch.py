"""GPU kernels belong to the execution whose host call launched them (``trace.launch``).

The truth is read from the trace with jaxlib's ``ProfileData`` alone: each kernel's
``correlation_id`` names the host call (``cuGraphLaunch``) that launched it, and the step
whose annotation holds that call is the step that dispatched it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import jaxdiag
from jaxdiag.trace import frames as F
from xspace_builders import Ev, H100_STATS, XSpaceBuilder, write_run

ASYNC_LOOP = Path(__file__).resolve().parents[1] / "data" / "h200_async_loop"


def _union_ms(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -np.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total / 1e6


def _truth(path: Path) -> dict[int, float]:
    """Device busy ms per step, each kernel booked to the step whose annotation holds its launch."""
    from jax.profiler import ProfileData

    (file,) = path.rglob("*.xplane.pb")
    data = ProfileData.from_file(str(file))
    steps: list[tuple[float, float, int]] = []
    launches: dict[int, float] = {}
    kernels: list[tuple[int, float, float]] = []
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                if plane.name.startswith("/device:"):
                    kernels.append((int(stats["correlation_id"]), event.start_ns, event.start_ns + event.duration_ns))
                elif "step_num" in stats:
                    steps.append((event.start_ns, event.start_ns + event.duration_ns, int(stats["step_num"])))
                elif "correlation_id" in stats:
                    launches[int(stats["correlation_id"])] = event.start_ns
    by_step: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for correlation, start, end in kernels:
        at = launches[correlation]
        (step,) = [n for a, b, n in steps if a <= at < b]
        by_step[step].append((start, end))
    return {step: _union_ms(spans) for step, spans in by_step.items()}


def test_a_loop_that_never_reads_books_each_steps_kernels_to_it() -> None:
    truth = _truth(ASYNC_LOOP)
    assert len(truth) == 10 and min(truth.values()) > 1.0  # ten steps of eight 0.19 ms matmuls
    report = jaxdiag.report(ASYNC_LOOP)
    got = {row.step: row.device_busy_ms for row in report.steps}
    assert got.keys() == truth.keys()
    for step, busy in truth.items():
        assert got[step] == pytest.approx(busy, abs=2e-4), step
    # Booked by time, the last step's window held nearly all of it (the host ran nine steps ahead).
    assert report.throughput.host_ahead is not None and report.throughput.host_ahead.max == 9
    frames = jaxdiag.load(ASYNC_LOOP)
    device = frames.events[frames.events[F.CATEGORY] == "device"]
    assert (device[F.RUN_ID] >= 0).all() and device[F.RUN_ID].nunique() == 10


def _launched_loop(tmp_path: Path, *, launches: bool) -> Path:
    """Three steps dispatched 0.1 ms apart, whose kernels (2 ms each) run one after another, later."""
    host: list[Ev] = []
    kernels: list[Ev] = []
    for step in range(3):
        t = 1_000_000 + step * 100_000
        host.append(Ev("train", t, 90_000, {"step_num": step}))
        host.append(Ev("PjitFunction(f)", t + 1_000, 80_000))
        host.append(Ev("CommonPjRtLoadedExecutable::Execute (jit_f)", t + 2_000, 70_000, {"run_id": 700 + step}))
        if launches:
            host.append(Ev("cuGraphLaunch (CudaGraph:1)", t + 50_000, 5_000, {"correlation_id": 40 + step}))
        start = 1_200_000 + step * 2_000_000
        for k in range(2):
            stats = {"correlation_id": 40 + step, "hlo_op": f"fusion.{k}", "hlo_module": "jit_f", "program_id": 5}
            kernels.append(Ev(f"fusion_{k}", start + k * 1_000_000, 1_000_000, stats))
    builder = XSpaceBuilder().plane("/device:GPU:0", H100_STATS).line("Stream #14(Compute)", kernels)
    builder.plane("/host:metadata", {"jax_version": "0.11.2"}).plane("/host:CPU").line("python3", host)
    return write_run(tmp_path / ("launched" if launches else "unlinked"), {"h": builder.serialize()})


def test_kernels_go_to_the_step_that_launched_them_and_without_launches_by_time(tmp_path: Path) -> None:
    linked = jaxdiag.report(_launched_loop(tmp_path, launches=True))
    assert [round(r.device_busy_ms, 3) for r in linked.steps] == [2.0, 2.0, 2.0]
    events = jaxdiag.load(_launched_loop(tmp_path, launches=True)).events
    assert sorted(events.loc[events[F.CATEGORY] == "device", F.RUN_ID].unique().tolist())[0] >= 0
    unlinked = jaxdiag.report(_launched_loop(tmp_path, launches=False))
    # No launch in the trace: each kernel goes to the window it ran in, the last step's.
    assert sum(r.device_busy_ms for r in unlinked.steps) == pytest.approx(6.0, abs=1e-3)
    assert unlinked.steps[0].device_busy_ms < 2.0
