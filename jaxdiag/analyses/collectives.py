"""Collective communication: how much of it compute hides, and how much the step waits on.

A collective is any device op ``device_work.collective_kind`` recognises (NCCL
kernels, HLO ``all-reduce``/``all-gather``/``reduce-scatter``/``all-to-all``/
``collective-permute`` ops and their ``-start``/``-done`` halves, XLA:CPU collective
thunks) or any op on a line the loader marked ``collective``.

For each device, its collective time is the union of its collective ops, and
the *exposed* part is what the union of its compute ops (kernels that are not
copies or collectives) does not overlap. ``overlap_fraction`` is
``1 - exposed / total``. Millisecond figures are per device, averaged over the
devices that ran any op, so that they read against wall time: 8 GPUs each
waiting 10 ms on the same all-reduce report 10 ms, not 80 ms.
``time_lost_ms`` is the exposed time summed over the analysed steps: the upper
bound of what perfect overlap would save. Time a device spent in a collective
waiting for a late host (``stragglers``) is not exposed communication: it is
left out, and the straggler finding books it. Nor is time a device of one host
spent in a collective waiting for a later device of that host (``peer_waits``):
it is ``waiting_for_devices_ms``, with the late device named in a
``collective_wait`` finding, and only the transfer itself (the shortest
participant's duration) counts as communication. Advice names the flags of the
platform the run used; the GPU and TPU flag advice is a guess, not applied by jaxdiag's tests (they run on CPU),
and says so.

It runs past 400 lines because exposure per device, the two waits it hands to other analyses and the
platform's flag advice are one computation over one set of collective ops.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses import peer_waits
from jaxdiag.analyses.base import AnalysisInputs, Finding, Severity, severity_for
from jaxdiag.analyses.collective_section import CollectiveKind, Collectives, LateDevice, StepComm
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.device_work import COLLECTIVE, device_ops, hosts_of, intervals_of, kind_is, step_windows
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames

SUGGESTION = (
    "A guess (not tested by jaxdiag on GPU): let compute hide communication: turn on XLA's latency-hiding scheduler "
    "(XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true), keep collectives "
    "asynchronous, and combine small ones (--xla_gpu_all_reduce_combine_threshold_bytes, "
    "--xla_gpu_all_gather_combine_threshold_bytes, --xla_gpu_reduce_scatter_combine_threshold_bytes) "
    "so fewer, larger transfers overlap the next layer's compute; on TPU the same "
    "holds for the async collective fusion flags."
)
#: Advice by the platform the run used: flags of another platform would do nothing.
SUGGESTIONS = {
    "gpu": SUGGESTION,
    "tpu": (
        "A guess (not tested by jaxdiag on TPU): let compute hide communication: keep collectives asynchronous and fused with compute "
        "(LIBTPU_INIT_ARGS=--xla_tpu_enable_async_collective_fusion=true "
        "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true "
        "--xla_tpu_overlap_compute_collective_tc=true), and combine small collectives into fewer, larger ones."
    ),
    "cpu": (
        "XLA:CPU runs each collective on the calling thread, so no scheduler flag makes compute hide it: "
        "move fewer bytes (gather or reduce once per step rather than per array, keep data on the "
        "process that uses it), or run the communication-heavy part on accelerators."
    ),
}


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceComm:
    """One device's collective time as interval sets: all of it, and the exposed part."""

    host: str
    device: str
    collective: np.ndarray
    exposed: np.ndarray
    by_kind: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # kind -> (op starts, all, exposed)


def per_device(ops: "pd.DataFrame") -> tuple[list[DeviceComm], int]:
    """Collective and exposed intervals per device, and the number of devices with ops.

    Within a report the answer for one ``device_ops`` frame is shared (see ``analyses.shared``).
    """
    from jaxdiag.analyses.shared import in_scope

    held, (comms, n_devices) = in_scope(("per_device", id(ops)), lambda: (ops, _per_device(ops)))
    if held is not ops:  # another frame now has that id
        comms, n_devices = _per_device(ops)
    return list(comms), n_devices


def _per_device(ops: "pd.DataFrame") -> tuple[list[DeviceComm], int]:
    out: list[DeviceComm] = []
    if len(ops) and not kind_is(ops, "collective").any():  # no communication: only count the devices
        return out, _device_count(ops)
    groups = ops.groupby([F.HOST, F.PLANE, F.DEVICE], sort=True, observed=True) if len(ops) else []
    n_devices = 0
    for (host, plane, device), rows in groups:
        n_devices += 1
        coll_rows = rows.loc[kind_is(rows, "collective")]
        if coll_rows.empty:
            continue
        compute = iv.union(intervals_of(rows.loc[kind_is(rows, "compute")]))
        kinds: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for kind, krows in coll_rows.groupby(COLLECTIVE, sort=True, observed=True):
            k_all = iv.union(intervals_of(krows))
            starts = np.sort(krows[F.START_NS].to_numpy(np.int64))
            kinds[str(kind)] = (starts, k_all, iv.subtract(k_all, compute))
        coll = iv.union(intervals_of(coll_rows))
        out.append(DeviceComm(str(host), f"{plane}#{device}", coll, iv.subtract(coll, compute), kinds))
    return out, n_devices


def _device_count(ops: "pd.DataFrame") -> int:
    """How many (host, plane, device) groups ``ops`` has, as ``groupby`` counts them (missing keys left out)."""
    import pandas as pd

    key = np.zeros(len(ops), dtype=np.int64)
    named = np.ones(len(ops), dtype=bool)
    for column in (F.HOST, F.PLANE, F.DEVICE):
        codes, uniques = pd.factorize(ops[column], sort=False)
        key = key * (len(uniques) + 1) + codes
        named &= codes >= 0
    return len(np.unique(key[named]))


@dataclasses.dataclass(frozen=True, slots=True)
class KindStats:
    """Collectives of one kind: count, per-device time, exposed time, overlap."""

    kind: str
    count: int
    total_ms: float
    exposed_ms: float

    @property
    def overlap_fraction(self) -> float | None:
        return None if self.total_ms <= 0 else 1.0 - self.exposed_ms / self.total_ms


@dataclasses.dataclass(frozen=True, slots=True)
class CollectivesResult:
    """Communication/compute overlap over the analysed steps.

    Attributes:
      total_ms: collective time per device (mean over devices), in steps.
      exposed_ms: the part no compute overlapped, per device (mean).
      overlap_fraction: ``1 - exposed_ms / total_ms``; ``None`` with no collectives.
      by_kind: the same, per collective kind.
      per_step: the same, per step.
      n_devices: devices that ran any op.
      findings: one ``exposed_collective`` finding when exposed time matters.
    """

    total_ms: float
    exposed_ms: float
    by_kind: tuple[KindStats, ...]
    per_step: tuple[StepComm, ...]
    n_devices: int
    findings: tuple[Finding, ...] = ()
    waiting_ms: float = 0.0  # per device (mean): time in collectives waiting for a late host, left out above
    waiting_for_devices_ms: float = 0.0  # per device (mean): waiting for a later device of the same host, left out
    late_devices: tuple[LateDevice, ...] = ()

    @property
    def overlap_fraction(self) -> float | None:
        return None if self.total_ms <= 0 else 1.0 - self.exposed_ms / self.total_ms

    def section(self) -> Collectives:
        """The report's ``collectives`` section, times in ms to 3 decimals, fractions to 4."""
        return Collectives(
            overlap_fraction=_round(self.overlap_fraction),
            exposed_ms=round(self.exposed_ms, 3),
            total_ms=round(self.total_ms, 3),
            waiting_for_hosts_ms=round(self.waiting_ms, 3),
            waiting_for_devices_ms=round(self.waiting_for_devices_ms, 3),
            late_devices=self.late_devices,
            by_kind=tuple(
                CollectiveKind(
                    k.kind, k.count, round(k.total_ms, 3), round(k.exposed_ms, 3), _round(k.overlap_fraction)
                )
                for k in self.by_kind
            ),
            per_step=tuple(StepComm(s.step, round(s.total_ms, 3), round(s.exposed_ms, 3)) for s in self.per_step),
        )


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def analyze(inputs: AnalysisInputs) -> CollectivesResult:
    """Measure how much collective time compute overlaps, per kind and per step."""
    frames = inputs.frames
    windows_all = step_windows(frames, inputs.host, inputs.steps)
    windows_every = step_windows(frames, inputs.host) if inputs.steps is not None else windows_all
    per_step: dict[int, list[float]] = {}
    kinds: dict[str, list[float]] = {}
    n_devices = 0
    wall_ns = waiting_ns = peer_ns = 0
    late: dict[tuple[str, str], list[Any]] = {}  # (host, device) -> [runs, wait ns, max ns, transfer ns, ops]
    runs = 0
    outside: dict[str, list[float]] = {}  # kind -> [ops, ns] of collectives that start outside every step
    for host in hosts_of(frames, inputs.host):
        win = windows_all.loc[windows_all[F.HOST] == host]
        if win.empty:
            continue
        lo = win[F.START_NS].to_numpy(np.int64)
        hi = win["end_ns"].to_numpy(np.int64)
        wall_ns = max(wall_ns, int((hi - lo).sum()))
        ops = device_ops(frames, host, compile_windows(compile_spans(frames, host)))
        steps_iv = iv.union(np.stack([lo, hi], axis=1))
        comms, n = per_device(ops)
        waited = without_waiting(frames, host, comms)
        waiting_ns += (
            sum(
                iv.intersection_length(iv.subtract(c.collective, w.collective), steps_iv) for c, w in zip(comms, waited)
            )
            if waited is not comms
            else 0
        )
        comms, waited_ns, runs_here = _less_peer_waits(ops, waited, steps_iv, host, late)
        peer_ns += waited_ns
        runs += runs_here
        n_devices += n
        every = windows_every.loc[windows_every[F.HOST] == host]  # every step, not only those asked for
        every_iv = iv.union(
            np.stack([every[F.START_NS].to_numpy(np.int64), every["end_ns"].to_numpy(np.int64)], axis=1)
        )
        for c in comms:
            t = iv.covered_in_windows(c.collective, lo, hi)
            x = iv.covered_in_windows(c.exposed, lo, hi)
            for step, ti, xi in zip(win[F.STEP].to_numpy(), t, x):
                acc = per_step.setdefault(int(step), [0.0, 0.0])
                acc[0] += ti
                acc[1] += xi
            for kind, (starts, k_all, k_exp) in c.by_kind.items():
                acc = kinds.setdefault(kind, [0.0, 0.0, 0.0])
                acc[0] += _starts_inside(starts, steps_iv)
                acc[1] += iv.intersection_length(k_all, steps_iv)
                acc[2] += iv.intersection_length(k_exp, steps_iv)
                in_any = _starts_inside(starts, every_iv) if len(every_iv) else 0
                if in_any < len(starts):
                    out = outside.setdefault(kind, [0.0, 0.0])
                    out[0] += len(starts) - in_any
                    out[1] += _length(k_all) - iv.intersection_length(k_all, every_iv)
    d = max(n_devices, 1)
    by_kind = tuple(
        KindStats(kind, int(v[0]), float(v[1]) / d / 1e6, float(v[2]) / d / 1e6)
        for kind, v in sorted(kinds.items())
        if v[0] or v[1]
    )
    steps = tuple(StepComm(s, float(v[0]) / d / 1e6, float(v[1]) / d / 1e6) for s, v in sorted(per_step.items()))
    total = sum(s.total_ms for s in steps)
    exposed = sum(s.exposed_ms for s in steps)
    late_devices = tuple(
        LateDevice(h, dev, int(v[0]), runs, v[1] / d / 1e6, v[2] / 1e6, v[3] / 1e6, tuple(sorted(v[4])))
        for (h, dev), v in sorted(late.items(), key=lambda kv: -kv[1][1])
    )
    result = CollectivesResult(
        total,
        exposed,
        by_kind,
        steps,
        n_devices,
        waiting_ms=waiting_ns / d / 1e6,
        waiting_for_devices_ms=peer_ns / d / 1e6,
        late_devices=late_devices,
    )
    findings = _findings(result, wall_ns / 1e6, inputs)
    findings += peer_waits.late_device_finding(
        late_devices, result.waiting_for_devices_ms, wall_ns / 1e6, inputs, platform_of(frames) == "cpu"
    )
    findings += _outside_steps(outside, d)
    return dataclasses.replace(result, findings=findings)


def _less_peer_waits(
    ops: "pd.DataFrame",
    comms: list[DeviceComm],
    steps_iv: np.ndarray,
    host: str,
    late: dict[tuple[str, str], list[Any]],
) -> tuple[list[DeviceComm], int, int]:
    """``comms`` less each device's wait for a later device of its host (``peer_waits``).

    Returns the new ``comms``, the waiting left out inside the steps (ns, summed over
    devices), and the collective runs inside the steps; ``late`` gathers, per late
    device, its runs, the wait it caused, the longest wait, the transfer and the ops.
    """
    found = [r for r in peer_waits.instances(ops) if _starts_inside(r.starts_ns[:1], steps_iv)]
    if not found:
        return comms, 0, 0
    for run in found:
        acc = late.setdefault((host, run.late_device), [0, 0, 0, 0, set()])
        acc[0] += 1
        acc[1] += int(run.waits_ns.sum())
        acc[2] = max(acc[2], int(run.waits_ns.max()))
        acc[3] += run.transfer_ns
        acc[4].add(run.name)
    waiting = peer_waits.waiting_by_device(found)
    out, waited = [], 0
    for c in comms:
        stretch = waiting.get(c.device)
        if stretch is not None:
            waited += iv.intersection_length(iv.intersect(c.collective, stretch), steps_iv)
            c = _less(c, stretch)
        out.append(c)
    return out, waited, len(found)


def _less(c: DeviceComm, waiting: np.ndarray) -> DeviceComm:
    """``c`` without the time in ``waiting``."""
    return dataclasses.replace(
        c,
        collective=iv.subtract(c.collective, waiting),
        exposed=iv.subtract(c.exposed, waiting),
        by_kind={
            k: (starts, iv.subtract(k_all, waiting), iv.subtract(k_exp, waiting))
            for k, (starts, k_all, k_exp) in c.by_kind.items()
        },
    )


def _length(intervals: np.ndarray) -> float:
    return float((intervals[:, 1] - intervals[:, 0]).sum()) if len(intervals) else 0.0


def _outside_steps(outside: dict[str, list[float]], n_devices: int) -> tuple[Finding, ...]:
    """An info finding naming the collectives that ran outside every analysed step (not counted above)."""
    if not outside:
        return ()
    kinds = sorted(outside.items(), key=lambda kv: -kv[1][1])
    ms = sum(ns for _, ns in outside.values()) / n_devices / 1e6
    listed = ", ".join(f"{int(n)} {kind}" for kind, (n, _) in kinds)
    return (
        Finding(
            kind="collectives_outside_steps",
            severity=Severity.INFO,
            time_lost_ms=0.0,
            message=(
                f"collectives ran outside every step: {listed} op(s) over {n_devices} device(s), "
                f"{ms:.1f} ms per device; the collective figures count only time inside steps."
            ),
            suggestion="Capture the steps that run these collectives, or mark them with "
            "jax.profiler.StepTraceAnnotation so they are analysed.",
            evidence={
                "by_kind": {
                    k: {"count": int(n), "ms_per_device": round(ns / n_devices / 1e6, 3)} for k, (n, ns) in kinds
                }
            },
        ),
    )


def without_waiting(
    frames: "TraceFrames", host: str, comms: list[DeviceComm], ops: "pd.DataFrame | None" = None
) -> list[DeviceComm]:
    """``comms`` less the time spent waiting for a late host (``stragglers``): that is the straggler's cost.

    Given ``ops`` (``comms``' device ops), also less each device's wait for a later
    device of its own host (``peer_waits``).
    """
    out = comms
    if len(frames.hosts) >= 2:
        from jaxdiag.analyses.stragglers import waiting_intervals

        out = []
        for c in comms:
            waiting = waiting_intervals(frames, host, int(c.device.rsplit("#", 1)[-1]))
            out.append(_less(c, waiting) if len(waiting) else c)
    if ops is not None:
        peers = peer_waits.waiting_by_device(peer_waits.instances(ops))
        out = [_less(c, peers[c.device]) if c.device in peers else c for c in out]
    return out


def platform_of(frames: "TraceFrames") -> str:
    """``gpu``, ``tpu`` or ``cpu``: the platform of the run's devices (``gpu`` when unknown or mixed)."""
    devices = frames.devices
    platforms = set(devices["platform"].astype(str)) if "platform" in devices and len(devices) else set()
    return platforms.pop() if len(platforms) == 1 and next(iter(platforms)) in SUGGESTIONS else "gpu"


def _starts_inside(starts: np.ndarray, windows: np.ndarray) -> int:
    """How many of the sorted ``starts`` fall inside the disjoint ``windows``."""
    return int((np.searchsorted(starts, windows[:, 1]) - np.searchsorted(starts, windows[:, 0])).sum())


def _findings(r: CollectivesResult, wall_ms: float, inputs: AnalysisInputs) -> tuple[Finding, ...]:
    if r.exposed_ms < inputs.thresholds.min_finding_ms or r.overlap_fraction is None:
        return ()
    worst = max(r.by_kind, key=lambda k: k.exposed_ms)
    worst_step = max(r.per_step, key=lambda s: s.exposed_ms)
    msg = (
        f"{r.exposed_ms:.1f} ms of collective communication per device is exposed "
        f"({(1 - r.overlap_fraction) * 100:.0f}% of {r.total_ms:.1f} ms not overlapped by compute); "
        f"most from {worst.kind} ({worst.exposed_ms:.1f} ms exposed), worst step {worst_step.step} "
        f"({worst_step.exposed_ms:.1f} ms)."
    )
    if r.waiting_ms >= 0.05:
        msg += (
            f" Not counted: {r.waiting_ms:.1f} ms per device spent in collectives waiting for a late host "
            "(see the straggler finding)."
        )
    return (
        Finding(
            kind="exposed_collective",
            severity=severity_for(r.exposed_ms, wall_ms, inputs.thresholds),
            time_lost_ms=r.exposed_ms,
            message=msg,
            suggestion=SUGGESTIONS[platform_of(inputs.frames)],
            evidence={
                "overlap_fraction": round(r.overlap_fraction, 4),
                "by_kind": {k.kind: round(k.exposed_ms, 3) for k in r.by_kind},
                "worst_step": worst_step.step,
                "devices": r.n_devices,
            },
        ),
    )
