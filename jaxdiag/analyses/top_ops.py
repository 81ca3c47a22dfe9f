"""Top ops: the ops and fusions that take the most device time per step, and what bounds them.

From the trace alone each row has its device time (summed over the op's
executions, divided by the number of devices that ran ops on that host, as in
``device_time``), its share of all device op time, its time per step (ops inside steps
only: work between steps is no step's), its kind
(compute, memcpy, collective) and the jitted function its module belongs to
(``jit_train_step`` -> ``train_step``), with that function's source line when
a compile record names it.

FLOPs, bytes, arithmetic intensity and the source line of the op itself are not
in the trace's events: XProf computes them from the HLO the trace carries, and
``xprof_tools.top_ops_join`` adds them from XProf's ``hlo_stats`` (``jaxdiag report --deep``).

Rows are numbered ``op1``, ``op2`` ... by time; findings about small ops and
collectives name the rows they concern (see ``finding_places``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from jaxdiag.analyses import device_work as W
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.top_op_section import OpRow, TopOpsSection, round_or_none
from jaxdiag.analyses.booking import op_steps
from jaxdiag.analyses.steps_work import between_programs
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.mfu import positive as _positive
from jaxdiag.trace import frames as F

#: Rows kept in the section.
TOP = 25
#: Rows kept for the ops of work between steps, shown apart.
BETWEEN_TOP = 10
_MODULE_FUNCTION = re.compile(r"^(?:jit|pjit|pmap|xmap|shard_map)[_(](.*?)\)?$")


@dataclasses.dataclass(frozen=True, slots=True)
class TopOps:
    """The costliest ops, the device roofline they are judged against, and where the facts came from.

    Attributes:
      rows: ``OpRow``s by time, largest first.
      total_ms: all device op time of the analysed steps (per device), the share's denominator.
      steps: how many steps the per-step figures divide by (0: no step markers).
      peak_flops: one device's peak FLOP/s, ``None`` when unknown.
      memory_bandwidth_bps: one device's memory bandwidth (bytes/s), ``None`` when unknown.
      roofline_source: where the peak and bandwidth came from.
      deep: whether XProf's ``hlo_stats`` was joined.
      between_rows: the costliest ops of work between steps (programs other than the step's run in
        fewer than half of the steps: an evaluation, a checkpoint), apart from ``rows``: no step's
        work, so with totals and no time per step.
    """

    rows: tuple[OpRow, ...]
    total_ms: float
    steps: int
    peak_flops: float | None
    memory_bandwidth_bps: float | None
    roofline_source: str
    deep: bool = False
    peak_by_dtype: dict[str, float] = dataclasses.field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    between_rows: tuple[OpRow, ...] = ()

    @property
    def ridge_point(self) -> float | None:
        """FLOPs per byte above which an op is compute-bound on this device."""
        if not self.peak_flops or not self.memory_bandwidth_bps:
            return None
        return self.peak_flops / self.memory_bandwidth_bps

    def section(self) -> TopOpsSection:
        """The report's ``top_ops`` section (rounded as ``OpRow.rounded``; peaks to 1 decimal)."""
        return TopOpsSection(
            rows=tuple(r.rounded() for r in self.rows),
            total_ms=round(self.total_ms, 4),
            steps=self.steps,
            peak_flops=round_or_none(self.peak_flops, 1),
            memory_bandwidth_bps=round_or_none(self.memory_bandwidth_bps, 1),
            ridge_point=round_or_none(self.ridge_point, 3),
            roofline_source=self.roofline_source,
            peak_flops_by_dtype={k: round_or_none(v, 1) for k, v in self.peak_by_dtype.items()},
            deep=self.deep,
            between_rows=tuple(r.rounded() for r in self.between_rows),
        )


def function_of(module: str) -> str:
    """The jitted function a module name belongs to: ``jit_train_step`` -> ``train_step``."""
    m = _MODULE_FUNCTION.match(module)
    return m[1] if m else module


def analyze(inputs: AnalysisInputs) -> TopOps:
    """The ops with the most device time, from the trace (and compile records for source lines)."""
    frames = inputs.frames
    peak, bandwidth, roofline_source = device_roofline(frames, inputs.host)
    ops = W.device_ops(frames, inputs.host, compile_windows(compile_spans(frames, inputs.host)))
    if ops.empty:
        return TopOps((), 0.0, 0, peak, bandwidth, roofline_source, peak_by_dtype=peaks_by_dtype(frames, inputs.host))
    windows = W.step_windows(frames, inputs.host, inputs.steps)
    _by_time, scale = W.steps_and_device_share(frames, ops, inputs.host, inputs.steps)
    step = _booked_steps(frames, ops, windows)
    ms = ops[F.DUR_NS].to_numpy(dtype=np.float64) / 1e6 * scale
    keep = step >= 0 if inputs.steps is not None else np.ones(len(ops), dtype=bool)
    counted = windows.loc[windows[F.STEP] >= 0, F.STEP].nunique() if len(windows) else 0
    group, names, modules, kinds = _groups(ops)
    group, ms, step = group[keep], ms[keep], step[keep]
    in_step = step >= 0
    total = float(ms.sum())
    sums = np.bincount(group, weights=ms, minlength=len(names))
    # Per step: only ops inside a step (work between steps, an evaluation, is no step's).
    step_sums = np.bincount(group[in_step], weights=ms[in_step], minlength=len(names))
    counts = np.bincount(group, minlength=len(names))
    between = between_programs(frames, ops[F.HLO_MODULE], step, counted, rows=np.flatnonzero(keep))
    apart = np.array([m in between for m in modules], dtype=bool)
    ranked = [int(g) for g in np.argsort(-sums, kind="stable") if counts[g] > 0]
    top = [g for g in ranked if not apart[g]][:TOP]
    top_between = [g for g in ranked if apart[g]][:BETWEEN_TOP]
    programs = _programs(group, ops[F.PROGRAM_ID].fillna(-1).to_numpy(np.int64)[keep], top + top_between)
    sources = _function_sources(inputs.compile_log)

    def row(g: int, id: str, per_step: bool) -> OpRow:
        module = modules[g]
        function = function_of(module) if module else ""
        return OpRow(
            id=id,
            name=names[g],
            module=module,
            function=function,
            kind=kinds[g],
            count=int(counts[g]),
            total_ms=float(sums[g]),
            per_step_ms=float(step_sums[g]) / counted if per_step and counted and step_sums[g] > 0 else None,
            share=float(sums[g]) / total if total > 0 else 0.0,
            source=sources(function, programs.get(g, ())),
            programs=programs.get(g, ()),
        )

    rows = [row(g, f"op{i}", True) for i, g in enumerate(top, start=1)]
    return TopOps(
        tuple(rows),
        total,
        int(counted),
        peak,
        bandwidth,
        roofline_source,
        peak_by_dtype=peaks_by_dtype(frames, inputs.host),
        between_rows=tuple(row(g, f"between{i}", False) for i, g in enumerate(top_between, start=1)),
    )


def _booked_steps(frames: Any, ops: Any, windows: Any) -> np.ndarray:
    """Each op's step, booked as the per-step device busy time is (``booking.op_steps``), host by host."""
    step = np.full(len(ops), -1, dtype=np.int64)
    for host, rows in W.row_groups(ops[F.HOST]):
        win = windows.loc[windows[F.HOST] == host]
        if len(win):
            step[rows] = op_steps(frames, str(host), ops.take(rows), win)
    return step


def _groups(ops: Any) -> tuple[np.ndarray, list[str], list[str], list[str]]:
    """Each row's ``(op, module, kind)`` group number, and each group's op, module and kind.

    The op is the HLO op where the trace names one, else the event (kernel) name.
    Distinct names are few, rows many: the work is on integer codes.
    """
    import pandas as pd

    op_codes, op_names = pd.factorize(ops[F.HLO_OP], sort=False)
    name_codes, kernel_names = pd.factorize(ops[F.NAME], sort=False)
    op_names = [str(x) for x in op_names.tolist()]
    kernel_names = [str(x) for x in kernel_names.tolist()]
    use_kernel = (op_codes < 0) | np.isin(op_codes, [i for i, n in enumerate(op_names) if not n])
    op_key = np.where(use_kernel, len(op_names) + name_codes, op_codes)
    label = op_names + kernel_names
    mod_codes, mod_names = pd.factorize(ops[F.HLO_MODULE], sort=False)
    kind_codes, kind_names = pd.factorize(ops[W.OP_KIND], sort=False)
    n_mod, n_kind = len(mod_names) + 1, len(kind_names) + 1
    combined = (op_key.astype(np.int64) * n_mod + (mod_codes + 1)) * n_kind + (kind_codes + 1)
    group, keys = pd.factorize(combined, sort=False)
    keys = np.asarray(keys, dtype=np.int64)
    kind_of = keys % n_kind - 1
    mod_of = (keys // n_kind) % n_mod - 1
    op_of = keys // n_kind // n_mod
    mod_names, kind_names = mod_names.tolist(), kind_names.tolist()
    names = [label[o] for o in op_of.tolist()]
    modules = ["" if m < 0 else str(mod_names[m]) for m in mod_of.tolist()]
    kinds = ["" if k < 0 else str(kind_names[k]) for k in kind_of.tolist()]
    return group.astype(np.int64), names, modules, kinds


def _programs(group: np.ndarray, pid: np.ndarray, wanted: list[int]) -> dict[int, tuple[int, ...]]:
    """The program ids (XLA module ids) each wanted group ran under."""
    rows = np.isin(group, wanted) & (pid >= 0)
    g, p = group[rows], pid[rows]
    if not len(g):
        pairs = np.zeros((0, 2), int)
    elif int(g.max()) < 2**31 and int(p.max()) < 2**31:  # one number per pair: sorting pairs of numbers costs more
        span = int(p.max()) + 1
        key = np.unique(g.astype(np.int64) * span + p)
        pairs = np.stack([key // span, key % span], axis=1)
    else:
        pairs = np.unique(np.stack([g, p], axis=1), axis=0)
    out: dict[int, list[int]] = {}
    for g, p in pairs.tolist():
        out.setdefault(int(g), []).append(int(p))
    return {g: tuple(sorted(p)) for g, p in out.items()}


def device_roofline(frames: Any, host: str | None = None) -> tuple[float | None, float | None, str]:
    """One device's bf16 peak FLOP/s and memory bandwidth from the trace's device stats, and their source.

    Devices of one capture are alike; the first device plane with either known is used.
    """
    peaks = peaks_by_dtype(frames, host)
    for row in _device_records(frames, host):
        bw = _positive(row.get("memory_bandwidth_bps"))
        peak = peaks.get("bfloat16")
        if peak is not None or bw is not None:
            name = row.get("device_name") or row.get("plane") or "device"
            return peak, bw, f"trace device stats of {name} ({row.get('plane', '')})"
    return None, None, "unknown: the trace's device planes carry no peak FLOP/s or bandwidth"


def peaks_by_dtype(frames: Any, host: str | None = None) -> dict[str, float]:
    """One device's peak FLOP/s for each dtype it has one for (see ``analyses.mfu``)."""
    from jaxdiag.analyses.mfu import _device_peak

    rows = _device_records(frames, host)
    if not rows:
        return {}
    out = {}
    for dtype in ("bfloat16", "float16", "float32", "float8"):
        peak, _ = _device_peak(rows[0], dtype)
        if peak is not None:
            out[dtype] = peak
    return out


def _device_records(frames: Any, host: str | None) -> list[dict[str, Any]]:
    """The device table's rows (of ``host``) as dicts, shared by a report's analyses: read, never changed."""
    from jaxdiag.analyses.shared import once

    def records() -> list[dict[str, Any]]:
        dev = frames.devices
        if host is not None and len(dev):
            dev = dev.loc[dev[F.HOST] == host]
        return dev.to_dict("records")

    return once(frames, ("device_records", host), records)


def _function_sources(records: Iterable[Mapping[str, Any]]) -> Callable[[str, tuple[int, ...]], str]:
    """The source line (``file:line``) of a function's program, from compile records.

    Two jit objects may share a function name (and, when they lower to the same
    program, JAX compiles once): a record whose ``program_id`` ran the op names
    the line; without one, a name with one recorded line gives it, and a name
    with several gives none rather than a guess.
    """
    by_program: dict[tuple[str, int], str] = {}
    lines: dict[str, dict[str, None]] = {}
    for r in records:
        name, line, program = r.get("function"), r.get("source"), r.get("program_id")
        if not (isinstance(name, str) and isinstance(line, str) and line):
            continue
        if isinstance(program, int):
            by_program.setdefault((name, program), line)
        lines.setdefault(name, {})[line] = None

    def source_of(function: str, programs: tuple[int, ...]) -> str:
        for p in programs:
            if (function, p) in by_program:
                return by_program[(function, p)]
        known = lines.get(function, {})
        return next(iter(known)) if len(known) == 1 else ""

    return source_of
