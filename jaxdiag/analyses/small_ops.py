"""Small device ops: kernels shorter than ``thresholds.small_op_us``, and the launch gaps between them.

Counted: compute ops only (``device_work.device_ops`` with ``op_kind ==
"compute"``): copies, memsets and collectives are left out, as fusion cannot
remove them, and so is autotuning noise. A *launch gap* is the idle time
between two consecutive small ops on the same stream (line), when shorter than
``thresholds.host_wait_min_us`` (longer gaps are host waits, reported there).

Each op counts in the step the per-step device busy time books it to
(``booking.op_steps``): an execution of the step's program in the step that
dispatched it, wherever the device ran it (a loop that never reads runs ahead).
Ops of work between steps (``steps_work.between_programs``: an evaluation) are no
step's and are left out.

``time_lost_ms`` is what fusing them could save at most: the union of the small
ops' own time and their launch gaps. A fused kernel still moves the same data,
so the real saving is lower; for ops this short most of the time is fixed
launch and tail cost, which fusion does remove.

Small ops that run inside a loop of their program (on XLA:CPU, inside a ``while``
op: a ``lax.scan`` body) are rolled up already, so their finding does not advise
``lax.scan``; it says what else might help, as a guess.

Its findings, and the advice that fits each kind of small op, are ``small_op_findings``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.booking import op_steps
from jaxdiag.analyses.steps_work import between_programs
from jaxdiag.analyses.categories import isin, name_matches, positions_by_code, strings_at
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows, wall_outside_compiles
from jaxdiag.analyses.device_work import (
    END_NS,
    device_ops,
    hosts_of,
    intervals_of,
    is_compute,
    places,
    step_windows,
)
from jaxdiag.analyses.small_op_labels import top as top_ops
from jaxdiag.analyses.small_op_section import OpTotal, SmallOps, SmallOpsStep
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

_TOP = 10
_MAX_FINDINGS = 3
_WHILE = re.compile("while")


@dataclasses.dataclass(frozen=True, slots=True)
class ModuleSmallOps:
    """Small ops of one module: what fusing inside it could save."""

    module: str
    count: int
    steps: int
    time_ms: float
    launch_gap_ms: float
    compute_ms: float
    step_numbers: tuple[int, ...] = ()  # the steps that ran its small ops in earnest (``_main_steps``)
    looped: int = 0  # of ``count``, small ops that ran more often than the module did: a loop body's

    @property
    def share(self) -> float:
        """Small-op share of the module's compute time."""
        return 0.0 if self.compute_ms <= 0 else min(1.0, self.time_ms / self.compute_ms)


@dataclasses.dataclass(frozen=True, slots=True)
class SmallOpsResult:
    """Small device ops over the analysed steps.

    Attributes:
      threshold_us: ops shorter than this count as small.
      count: small ops in the analysed steps.
      time_ms: their own time (union, so concurrent ops count once).
      device_time_ms: the time of all compute ops (union).
      launch_gap_ms: idle gaps between consecutive small ops on one stream.
      time_lost_ms: union of small-op time and launch gaps: the most fusion can save.
      per_step: per step figures.
      top: worst offenders by total time.
      by_module: per module, largest saving first.
    """

    threshold_us: float
    count: int
    time_ms: float
    device_time_ms: float
    launch_gap_ms: float
    time_lost_ms: float
    per_step: tuple[SmallOpsStep, ...]
    top: tuple[OpTotal, ...]
    by_module: tuple[ModuleSmallOps, ...] = ()
    findings: tuple[Finding, ...] = ()

    @property
    def device_time_share(self) -> float:
        return 0.0 if self.device_time_ms <= 0 else self.time_ms / self.device_time_ms

    def section(self) -> SmallOps:
        """The report's ``small_ops`` section, times in ms to 4 decimals."""
        return SmallOps(
            threshold_us=self.threshold_us,
            count=int(self.count),
            device_time_share=round(float(self.device_time_share), 4),
            per_step=tuple(
                SmallOpsStep(int(s.step), int(s.count), round(s.time_ms, 4), round(s.launch_gap_ms, 4))
                for s in self.per_step
            ),
            launch_gap_ms=round(self.launch_gap_ms, 4),
            top=tuple(OpTotal(o.name, o.module, int(o.count), round(o.total_ms, 4)) for o in self.top),
        )


def analyze(inputs: AnalysisInputs) -> SmallOpsResult:
    """Count device ops shorter than the threshold, their launch gaps, and who launches them."""
    frames, th = inputs.frames, inputs.thresholds
    small_ns = int(th.small_op_us * 1000)
    gap_cap_ns = int(th.host_wait_min_us * 1000)
    windows = step_windows(frames, inputs.host, inputs.steps)
    parts: list["pd.DataFrame"] = []
    modules: dict[str, list[float]] = {}
    per_step: dict[int, list[float]] = {}
    totals = np.zeros(4)  # small time, device time, gap time, lost time (ns)
    steady_ns = 0
    for host in hosts_of(frames, inputs.host):
        win = windows.loc[windows[F.HOST] == host]
        if win.empty:
            continue
        lo, hi = win[F.START_NS].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
        compiles = compile_windows(compile_spans(frames, host)).get(host, iv.EMPTY)
        steady_ns = max(steady_ns, wall_outside_compiles(lo, hi, compiles))
        ops = device_ops(frames, host, {host: compiles})
        step = op_steps(frames, host, ops, win)  # booked as the per-step device busy time is
        of = ops[F.HLO_MODULE]
        between = between_programs(frames, of, step, int(win.loc[win[F.STEP] >= 0, F.STEP].nunique()))
        if between:  # an evaluation's ops are no step's, wherever they ran
            step = np.where(isin(of, between), -1, step)
        rows = np.flatnonzero(is_compute(frames, ops) & (step >= 0))
        ops = ops.take(rows).assign(**{F.STEP: step[rows]})  # the compute ops in steps, one copy
        gaps, gap_module, gap_step = _launch_gaps(ops, small_ns, gap_cap_ns)
        small = ops.loc[ops[F.DUR_NS] < small_ns]
        parts.append(small)
        _add_modules(modules, ops, small, gaps, gap_module)
        small_iv, gap_iv = iv.union(intervals_of(small)), iv.union(gaps)
        totals += [
            iv.length(small_iv),
            iv.total(intervals_of(ops)),
            iv.length(gap_iv),
            iv.total(np.concatenate([small_iv, gap_iv])),
        ]
        counts = small.groupby(F.STEP).size().to_dict()
        t = _by_step(intervals_of(small), small[F.STEP].to_numpy(np.int64))
        g = _by_step(gaps, gap_step)
        for step in win[F.STEP].to_numpy(np.int64).tolist():
            acc = per_step.setdefault(int(step), [0, 0.0, 0.0])
            acc[0] += int(counts.get(step, 0))
            acc[1] += t.get(step, 0) / 1e6
            acc[2] += g.get(step, 0) / 1e6
    import pandas as pd

    small_all = (parts[0] if len(parts) == 1 else pd.concat(parts)) if parts else None
    result = SmallOpsResult(
        threshold_us=th.small_op_us,
        count=0 if small_all is None else len(small_all),
        time_ms=float(totals[0]) / 1e6,
        device_time_ms=float(totals[1]) / 1e6,
        launch_gap_ms=float(totals[2]) / 1e6,
        time_lost_ms=float(totals[3]) / 1e6,
        per_step=tuple(SmallOpsStep(s, int(v[0]), float(v[1]), float(v[2])) for s, v in sorted(per_step.items())),
        top=top_ops(small_all, inputs.thresholds.small_op_top),
        by_module=tuple(
            sorted(
                (
                    ModuleSmallOps(
                        m,
                        int(v[0]),
                        len(v[4]),  # type: ignore[arg-type]
                        v[1] / 1e6,
                        v[2] / 1e6,
                        v[3] / 1e6,
                        _main_steps(v[4]),  # type: ignore[arg-type]
                        int(v[5]),
                    )
                    for m, v in modules.items()
                    if v[0]
                ),
                key=lambda m: -(m.time_ms + m.launch_gap_ms),
            )
        ),
    )
    from jaxdiag.analyses.small_op_findings import findings

    return dataclasses.replace(result, findings=findings(result, inputs, steady_ns / 1e6))


def _by_step(spans: np.ndarray, steps: np.ndarray) -> dict[int, int]:
    """The union's length of each step's ``spans``: ops booked to a step count there wherever they ran."""
    keys, groups = np.unique(steps, return_inverse=True)
    return dict(zip(keys.tolist(), iv.totals(spans, groups, len(keys)).tolist()))


#: A step counts among a module's small-op steps with at least this share of its busiest step's
#: small ops: a few ops that ran on just after their step ended do not make another step.
MAIN_STEP_SHARE = 0.25


def _main_steps(per_step: dict[int, int]) -> tuple[int, ...]:
    """The steps that ran a module's small ops in earnest (see ``MAIN_STEP_SHARE``)."""
    most = max(per_step.values(), default=0)
    return tuple(sorted(s for s, n in per_step.items() if n >= MAIN_STEP_SHARE * most))


def _in_loop(
    program: np.ndarray, is_while: np.ndarray, is_small: np.ndarray, place: np.ndarray, spans: np.ndarray
) -> int:
    """How many of a program's small ops ran inside one of its loops (a ``while`` op on their device).

    XLA:CPU records a ``lax.scan``/``fori_loop``/``while_loop`` as a ``while`` op
    spanning its body's ops. Where loops leave no such span (GPU kernels), no op
    is counted: a repeated kernel name is no sign of a loop, since XLA reuses one
    kernel for identical fusions.

    Args:
      program: the positions of the program's ops among the arrays that follow, one per op.
      is_while: which ops are ``while`` ops; is_small: which are small; place: ``places`` of the ops.
      spans: each op's ``[start, end)``.
    """
    loops = program[is_while[program]]
    if not len(loops):
        return 0
    mine = program[is_small[program]]
    inside = 0
    for where in np.unique(place[mine]).tolist():
        if where < 0:  # no plane (``places``)
            continue
        body = iv.union(spans[loops[place[loops] == where]])
        if not len(body):
            continue
        rows = mine[place[mine] == where]
        at = np.searchsorted(body[:, 0], spans[rows, 0], side="right") - 1
        inside += int(((at >= 0) & (spans[rows, 1] <= body[np.maximum(at, 0), 1])).sum())
    return inside


def _add_modules(
    acc: dict[str, list], ops: "pd.DataFrame", small: "pd.DataFrame", gaps: np.ndarray, gap_module: np.ndarray
) -> None:
    """Accumulate per module: [count, small ns, gap ns, compute ns, steps, small ops in a loop body]."""
    import pandas as pd

    spans = intervals_of(ops)
    is_while = name_matches(ops[F.NAME], _WHILE, at_start=True)
    is_small = ops.index.isin(small.index)
    place = places(ops)
    program_ids = ops[F.PROGRAM_ID].to_numpy()
    code, modules = pd.factorize(ops[F.HLO_MODULE], sort=False)  # in order of first appearance; -1: missing
    compute = iv.totals(spans, code, len(modules))
    for k, rows in enumerate(positions_by_code(code, len(modules))):
        a = acc.setdefault(str(modules[k]), [0, 0, 0, 0, {}, 0])
        a[3] += int(compute[k])
        if not is_while[rows].any():  # no loop in the module: none of its ops ran in one
            continue
        programs = program_ids[rows]
        for program in np.unique(programs):  # each compile of the module runs its own program
            a[5] += _in_loop(rows[programs == program], is_while, is_small, place, spans)
    spans, steps = intervals_of(small), small[F.STEP].to_numpy(np.int64)
    code, modules = pd.factorize(small[F.HLO_MODULE], sort=False)
    busy, counts = iv.totals(spans, code, len(modules)), np.bincount(code[code >= 0], minlength=len(modules))
    named = [acc[str(m)] for m in modules]
    for a, n, ns in zip(named, counts.tolist(), busy.tolist()):
        a[0] += n
        a[1] += ns
    # each (module, step) pair once, with its count: a module's small ops per step
    kept = code >= 0
    low = int(steps[kept].min()) if kept.any() else 0
    width = int(steps[kept].max()) - low + 1 if kept.any() else 1
    pairs, times = np.unique(code[kept].astype(np.int64) * width + (steps[kept] - low), return_counts=True)
    for pair, n in zip(pairs.tolist(), times.tolist()):
        per_step, step = named[pair // width][4], pair % width + low
        per_step[step] = per_step.get(step, 0) + n
    code, modules = pd.factorize(pd.Series(gap_module, dtype=object), sort=False)
    lengths = np.clip(gaps[:, 1] - gaps[:, 0], 0, None) if len(gaps) else np.zeros(0, dtype=np.int64)
    gap_ns = np.bincount(code[code >= 0], weights=lengths[code >= 0], minlength=len(modules))
    for module, ns in zip(modules, gap_ns.tolist()):
        acc[str(module)][2] += int(ns)


def _launch_gaps(ops: "pd.DataFrame", small_ns: int, cap_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Idle gaps between consecutive small ops on one stream, shorter than ``cap_ns``, their module and
    step (the op after the gap's)."""
    if ops.empty:
        return iv.EMPTY.copy(), np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64)
    plane, line, device = _sort_keys(ops[F.PLANE]), _sort_keys(ops[F.LINE]), ops[F.DEVICE].to_numpy()
    starts = ops[F.START_NS].to_numpy(np.int64)
    o = np.lexsort((starts, line, device, plane))  # by stream, then start (a stable sort, as ``sort_values``)
    plane, line, device = plane[o], line[o], device[o]
    same = (plane[1:] == plane[:-1]) & (line[1:] == line[:-1]) & (device[1:] == device[:-1])
    is_small = ops[F.DUR_NS].to_numpy()[o] < small_ns
    start = ops[END_NS].to_numpy(np.int64)[o[:-1]]
    end = starts[o[1:]]
    keep = same & is_small[:-1] & is_small[1:] & (end > start) & (end - start < cap_ns)
    after = o[1:][keep]
    return (
        np.stack([start[keep], end[keep]], axis=1),
        strings_at(ops[F.HLO_MODULE], after),
        ops[F.STEP].to_numpy(np.int64)[after],
    )


def _sort_keys(column: "pd.Series") -> np.ndarray:
    """A column's values as keys that sort and compare as its values do: a categorical's codes (its
    categories' order, a missing value last)."""
    import pandas as pd

    if not isinstance(column.dtype, pd.CategoricalDtype):
        return column.to_numpy()
    codes = column.cat.codes.to_numpy(np.int64)
    return np.where(codes < 0, len(column.cat.categories), codes)
