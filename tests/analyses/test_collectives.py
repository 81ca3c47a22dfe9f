"""Collective overlap on hand-built frames: exact fractions from overlaps built in."""

from __future__ import annotations

import pytest

from jaxdiag.analyses import collectives
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.analyses.device_work import collective_kind
from jaxdiag.config import Thresholds
from jaxdiag.reporting import codec
from tests.frames_builders import device_event, frames

NCCL = "Stream #20(Nccl)"


def ar(start, dur, device=0, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", **kw):
    return device_event(start, dur, name, device=device, line=NCCL, **kw)


def analyze(events, steps=((0, 1000),), **kw):
    return collectives.analyze(AnalysisInputs(frames(events, steps=list(steps)), **kw))


@pytest.mark.parametrize(
    "name, kind",
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all-reduce"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "all-gather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce-scatter"),
        ("ncclDevKernel_SendRecv", "collective-permute"),
        ("all-reduce.3", "all-reduce"),
        ("all-reduce-start.1", "all-reduce"),
        ("all-gather-done", "all-gather"),
        ("all-to-all.2", "all-to-all"),
        ("collective-permute-start", "collective-permute"),
        ("ncclDevKernel_Broadcast_RING_LL", "broadcast"),
        ("ragged-all-to-all.1", "all-to-all"),
        ("send-done.2", "send-recv"),
        ("recv", "send-recv"),
        ("descend_fusion", ""),
        ("wrapped_broadcast", ""),
        ("fusion.12", ""),
        ("loop_reduce_fusion", ""),
    ],
)
def test_collective_kind(name, kind):
    assert collective_kind(name) == kind


def test_every_collective_fragment_passes_the_quick_test():
    """``collective_kind`` looks for fragments only in names its one search finds something in."""
    from jaxdiag.analyses.device_work import _ANY_FRAGMENT, _COLLECTIVE_KINDS

    assert all(_ANY_FRAGMENT.search(fragment) for fragment, _ in _COLLECTIVE_KINDS)


def test_overlap_fraction_exact():
    # A 100 us all-reduce with 60 us of compute over it on the same device: 0.6.
    r = analyze([ar(100, 100), device_event(120, 60, "fusion.1")])
    assert r.overlap_fraction == pytest.approx(0.6)
    assert r.total_ms == pytest.approx(0.1)
    assert r.exposed_ms == pytest.approx(0.04)
    (k,) = r.by_kind
    assert (k.kind, k.count, k.overlap_fraction) == ("all-reduce", 1, pytest.approx(0.6))


def test_two_devices_average_per_device():
    # Device 0's all-reduce is fully hidden, device 1's fully exposed.
    events = [ar(0, 100, device=0), device_event(0, 100, device=0), ar(0, 100, device=1)]
    r = analyze(events)
    assert r.n_devices == 2
    assert r.total_ms == pytest.approx(0.1)
    assert r.exposed_ms == pytest.approx(0.05)
    assert r.overlap_fraction == pytest.approx(0.5)


def test_compute_on_another_device_does_not_hide_communication():
    r = analyze([ar(0, 100, device=0), device_event(0, 100, device=1)])
    assert r.overlap_fraction == pytest.approx(0.0)


@pytest.mark.parametrize(
    "extra, overlap",
    [
        pytest.param([device_event(0, 100, "MemcpyD2D", module="")], 0.0, id="a copy is not compute"),
        pytest.param(
            [ar(50, 100, name="ncclDevKernel_AllGather_RING_LL")], 0.0, id="collectives do not hide each other"
        ),
        pytest.param(
            [device_event(0, 50, line="Stream #14(Compute)"), device_event(25, 50, line="Stream #15(Compute)")],
            0.75,
            id="compute on two streams counts once",
        ),
    ],
)
def test_what_hides_communication(extra, overlap):
    r = analyze([ar(0, 100)] + extra)
    assert r.by_kind[0].overlap_fraction == pytest.approx(overlap)


def test_by_kind_counts_and_unknown_collective_line():
    events = [
        ar(0, 100),
        ar(200, 100),
        device_event(400, 50, "all-gather-start.2", line="XLA Ops", line_kind="xla_ops"),
        device_event(500, 40, "mystery_kernel", line="Stream #21(Nccl)", line_kind="collective"),
    ]
    kinds = {k.kind: (k.count, round(k.total_ms * 1000)) for k in analyze(events).by_kind}
    assert kinds == {"all-reduce": (2, 200), "all-gather": (1, 50), "collective": (1, 40)}


def test_per_step_and_findings():
    steps = ((0, 1000), (1000, 2000))
    events = [ar(100, 200), device_event(100, 200), ar(1100, 200), device_event(1100, 50)]
    r = analyze(events, steps=steps, thresholds=Thresholds(min_finding_ms=0.1))
    assert analyze(events, steps=steps).findings == ()  # 0.15 ms is under the default 0.5 ms
    assert [(s.step, round(s.total_ms, 3), round(s.exposed_ms, 3)) for s in r.per_step] == [
        (0, 0.2, 0.0),
        (1, 0.2, 0.15),
    ]
    (f,) = r.findings
    assert f.kind == "exposed_collective"
    assert f.time_lost_ms == pytest.approx(0.15)
    assert "worst step 1" in f.message
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in f.suggestion
    assert "--xla_gpu_all_reduce_combine_threshold_bytes" in f.suggestion
    assert f.suggestion.startswith("A guess (not tested by jaxdiag on GPU)")  # no GPU applies it in these tests
    d = codec.to_json(r.section())
    assert set(d) == {
        "overlap_fraction",
        "exposed_ms",
        "total_ms",
        "waiting_for_hosts_ms",
        "waiting_for_devices_ms",
        "late_devices",
        "by_kind",
        "per_step",
    }
    assert d["by_kind"][0] == {
        "kind": "all-reduce",
        "count": 2,
        "total_ms": 0.4,
        "exposed_ms": 0.15,
        "overlap_fraction": 0.625,
    }


def test_only_steps_count():
    r = analyze([ar(1500, 100)], steps=((0, 1000),))
    assert r.total_ms == 0 and r.by_kind == () and r.overlap_fraction is None


def test_no_collectives():
    r = analyze([device_event(0, 100)])
    assert (r.overlap_fraction, r.exposed_ms, r.findings) == (None, 0, ())
    assert r.section().overlap_fraction is None


# --- end to end: real CPU collectives, and synthetic multi-GPU XSpaces through the loader ---


def test_cpu_all_reduce_on_eight_devices(cpu_collective_frames):
    r = collectives.analyze(AnalysisInputs(cpu_collective_frames.frames))
    (k,) = r.by_kind
    # One all-reduce per device per step; the profiler may stop before the last
    # step's slower devices flush their events, so that step can come up short.
    assert k.kind == "all-reduce"
    assert 8 * 2 <= k.count <= 8 * 3
    assert r.n_devices == 8
    assert [s.step for s in r.per_step] == [0, 1, 2]
    assert all(s.total_ms > 0 for s in r.per_step)
    assert 0 < r.exposed_ms <= r.total_ms


def test_synthetic_two_gpu_xspace(tmp_path):
    from jaxdiag.trace.load import load
    from tests.xspace_builders import Kernel, gpu_xspace, write_run

    # Per GPU: compute 0-50 us; a 100 us all-reduce at 20-120 us (30 us hidden) on
    # GPU 0, and at 40-140 us (10 us hidden) on GPU 1. Step 1: all-gather, no compute.
    nccl = [
        Kernel(0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20_000, 100_000, op="all-reduce-start.1"),
        Kernel(1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 40_000, 100_000, op="all-reduce-start.1"),
        Kernel(0, "ncclDevKernel_AllGather_RING_LL", 210_000, 20_000, op="all-gather-start"),
        Kernel(1, "ncclDevKernel_AllGather_RING_LL", 210_000, 20_000, op="all-gather-start"),
    ]
    kernels = [Kernel(0, "fusion_1", 0, 50_000), Kernel(1, "fusion_1", 0, 50_000)]
    data = gpu_xspace(devices=2, kernels=kernels, nccl=nccl, steps=[(0, 0, 200_000), (1, 200_000, 300_000)])
    write_run(tmp_path, {"host0": data})
    r = collectives.analyze(AnalysisInputs(load(tmp_path)))
    kinds = {k.kind: k for k in r.by_kind}
    assert kinds["all-reduce"].count == 2
    assert kinds["all-reduce"].total_ms == pytest.approx(0.1)
    assert kinds["all-reduce"].exposed_ms == pytest.approx((0.07 + 0.09) / 2)
    assert kinds["all-reduce"].overlap_fraction == pytest.approx(0.2)
    assert kinds["all-gather"].overlap_fraction == pytest.approx(0.0)
    assert [(s.step, round(s.exposed_ms, 4)) for s in r.per_step] == [(0, 0.08), (1, 0.02)]


def test_synthetic_tpu_xspace(tmp_path):
    from jaxdiag.trace.load import load
    from tests.xspace_builders import tpu_xspace, write_run

    # One TPU: ops run one at a time on "XLA Ops", so the async all-reduce's start
    # and done ops are exposed; the module span over them is not compute.
    ops = [
        (0, "%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p)", 0, 100_000),
        (0, "%all-reduce-start.1 = f32[8]{0} all-reduce-start(f32[8]{0} %fusion.1)", 100_000, 5_000),
        (0, "%fusion.2 = f32[8]{0} fusion(f32[8]{0} %all-reduce-start.1)", 105_000, 50_000),
        (0, "%all-reduce-done.1 = f32[8]{0} all-reduce-done(f32[8]{0} %all-reduce-start.1)", 155_000, 40_000),
    ]
    data = tpu_xspace(
        ops=ops,
        modules=[(0, "jit_train_step", 1, 0, 200_000)],
        steps=[(0, 0, 0, 200_000)],
        host_steps=[(0, 0, 200_000)],
    )
    write_run(tmp_path, {"tpu_host": data})
    r = collectives.analyze(AnalysisInputs(load(tmp_path)))
    (k,) = r.by_kind
    assert (k.kind, k.count) == ("all-reduce", 2)
    assert k.total_ms == pytest.approx(0.045)
    assert k.overlap_fraction == pytest.approx(0.0)
    fine = collectives.analyze(AnalysisInputs(load(tmp_path), thresholds=Thresholds(min_finding_ms=0.01)))
    (f,) = [f for f in fine.findings if f.kind == "exposed_collective"]
    assert f.suggestion.startswith("A guess (not tested by jaxdiag on TPU)") and "LIBTPU_INIT_ARGS" in f.suggestion


def test_collectives_outside_every_step_are_named_not_dropped():
    # Two devices each run a 100 us all-reduce before the first step (a psum at start-up, say).
    events = [ar(0, 100, device=d) for d in range(2)] + [ar(500, 50, device=d) for d in range(2)]
    r = analyze(events, steps=((400, 600),))
    assert r.total_ms == pytest.approx(0.05)  # only the one inside the step counts
    (finding,) = [f for f in r.findings if f.kind == "collectives_outside_steps"]
    assert finding.evidence["by_kind"] == {"all-reduce": {"count": 2, "ms_per_device": 0.1}}
    assert "2 all-reduce op(s) over 2 device(s), 0.1 ms per device" in finding.message
    assert finding.time_lost_ms == 0


def test_collectives_in_steps_left_out_by_a_step_filter_are_not_outside_every_step():
    events = [ar(100, 50), ar(500, 50)]
    r = collectives.analyze(AnalysisInputs(frames(events, steps=[(0, 300), (400, 600)]), steps=[1]))
    assert r.by_kind[0].count == 1
    assert not [f for f in r.findings if f.kind == "collectives_outside_steps"]
