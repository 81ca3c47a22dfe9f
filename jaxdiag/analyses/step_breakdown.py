"""Per step: wall time, and where it went (device busy or idle, host waits, compiles, communication).

Definitions, per step window on one host (all in milliseconds):

- ``wall_ms``: the step window (from its ``StepTraceAnnotation``, TPU step or module run,
  tiled so that the time between two marks belongs to the step after it; see ``trace.steps``).
- ``device_busy_ms``: the union of device ops (see ``device_work``) across all the
  host's devices: time when at least one device was working. Overlapping kernels
  on two streams or two devices count once. Where annotated steps are told apart from
  the executions of the step's program (XLA:CPU run ids, each paired with its dispatch,
  see ``booking``), each such execution's busy time is its dispatching step's, wherever
  the device ran it: a loop that never reads runs ahead, and its steps' work runs later. ``device_busy_mean_ms`` (on the row,
  not in the JSON) is the per-device mean instead, lower when devices take turns.
- ``device_idle_ms``: ``wall_ms - device_busy_ms``.
- ``compile_ms``: host time inside compile spans (``compile_spans``) in the step,
  whether or not the device waited for it (see ``compile_wait_ms``).
- ``host_wait_ms``: device-idle stretches at least ``thresholds.host_wait_min_us``
  long (shorter ones are launch jitter), minus the time an execution was in flight or
  queued (``booking.in_flight``): a device waits for the host only when nothing runs.
  Compiles with nothing in flight count: this is the same quantity, from the same
  computation (``device_waiting``), as the host-wait breakdown by cause, whose per-step
  totals it equals. An idle stretch counts in full once it is long enough, even where a
  step boundary cuts it.
- ``compile_wait_ms``: the part of ``host_wait_ms`` spent compiling: what the step's
  compiles cost the device. A compile that ran while the device worked through
  executions the host had queued ahead costs nothing here, though ``compile_ms`` holds it.
- ``in_execution_gap_ms``: those idle stretches while an execution was in flight (XLA:CPU's
  thread pool between thunks, a TPU module's own gaps); 0 where the trace cannot tell.
- ``collective_ms`` / ``exposed_collective_ms``: collective time, and its part no
  compute overlapped, per device (mean), as in ``collectives`` (waiting there
  for a late host or device is left out).
- ``tokens``: from ``AnalysisInputs.tokens_per_step``, else ``None``.

With several hosts, each step is shown for its slowest host (largest wall time),
the one the others waited for; ``StepRow.host`` names it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.step_section import StepFigures
from jaxdiag.analyses.collectives import without_waiting, per_device
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.booking import booked_runs, in_flight, op_steps
from jaxdiag.analyses.steps_work import between_programs
from jaxdiag.analyses.device_waiting import device_busy, device_idle, device_waiting
from jaxdiag.analyses.categories import isin
from jaxdiag.analyses.device_work import category_codes, device_ops, hosts_of, intervals_of, step_windows
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclasses.dataclass(frozen=True, slots=True)
class StepRow:
    """Where one step's wall time went (see the module docstring for each figure)."""

    step: int
    host: str
    wall_ms: float
    device_busy_ms: float
    device_busy_mean_ms: float
    device_idle_ms: float
    host_wait_ms: float
    compile_ms: float
    collective_ms: float
    exposed_collective_ms: float
    tokens: float | None
    n_devices: int
    in_execution_gap_ms: float = 0.0
    compile_wait_ms: float = 0.0

    def figures(self) -> StepFigures:
        """This step's row of the report's ``steps`` section (ms to 4 decimals)."""
        return StepFigures(
            step=self.step,
            wall_ms=round(self.wall_ms, 4),
            device_busy_ms=round(self.device_busy_ms, 4),
            device_idle_ms=round(self.device_idle_ms, 4),
            host_wait_ms=round(self.host_wait_ms, 4),
            in_execution_gap_ms=round(self.in_execution_gap_ms, 4),
            compile_ms=round(self.compile_ms, 4),
            compile_wait_ms=round(self.compile_wait_ms, 4),
            collective_ms=round(self.collective_ms, 4),
            exposed_collective_ms=round(self.exposed_collective_ms, 4),
            tokens=self.tokens,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class StepBreakdown:
    """One row per step, in step order. It has no findings: the other analyses explain the rows."""

    rows: tuple[StepRow, ...]
    findings: tuple[Finding, ...] = ()

    def section(self) -> tuple[StepFigures, ...]:
        """The report's ``steps`` section: a row per step."""
        return tuple(r.figures() for r in self.rows)


def analyze(inputs: AnalysisInputs) -> StepBreakdown:
    """Break each step's wall time down into device work, waits, compiles and communication."""
    frames = inputs.frames
    best: dict[int, StepRow] = {}
    for host in hosts_of(frames, inputs.host):
        for row in _host_rows(inputs, host):
            if row.step not in best or row.wall_ms > best[row.step].wall_ms:
                best[row.step] = row
    return StepBreakdown(rows=tuple(best[s] for s in sorted(best)))


def _host_rows(inputs: AnalysisInputs, host: str) -> list[StepRow]:
    frames = inputs.frames
    win = step_windows(frames, host, inputs.steps)
    if win.empty:
        return []
    lo = win[F.START_NS].to_numpy(np.int64)
    hi = win["end_ns"].to_numpy(np.int64)
    compiles = compile_windows(compile_spans(frames, host)).get(host, iv.EMPTY)
    ops = device_ops(frames, host, {host: compiles})
    busy = device_busy(frames, host)
    busy_ns = _booked_busy(frames, host, ops, win)
    if busy_ns is None:
        busy_ns = iv.covered_in_windows(busy, lo, hi)
    spans = intervals_of(ops)
    per_dev = [iv.covered_in_windows(iv.union(spans.take(rows, axis=0)), lo, hi) for rows in _device_groups(ops)]
    n_devices = len(per_dev)
    busy_mean_ns = np.mean(per_dev, axis=0) if per_dev else np.zeros(len(lo))
    min_ns = int(inputs.thresholds.host_wait_min_us * 1000)
    idle = device_idle(frames, host, int(lo.min()), int(hi.max()), min_ns)
    flight, _label = in_flight(frames, host)
    waiting = device_waiting(frames, host, int(lo.min()), int(hi.max()), min_ns)
    wait_ns = iv.covered_in_windows(waiting, lo, hi)
    compile_wait_ns = iv.covered_in_windows(iv.intersect(waiting, compiles), lo, hi)
    inside_ns = iv.covered_in_windows(iv.intersect(idle, flight), lo, hi) if flight.size else np.zeros(len(lo))
    compile_ns = iv.covered_in_windows(compiles, lo, hi)
    coll_ns = np.zeros(len(lo))
    exposed_ns = np.zeros(len(lo))
    comms, _ = per_device(ops)
    comms = without_waiting(inputs.frames, host, comms, ops)  # waiting for a late host or device is not exposed
    for c in comms:
        coll_ns = coll_ns + iv.covered_in_windows(c.collective, lo, hi)
        exposed_ns = exposed_ns + iv.covered_in_windows(c.exposed, lo, hi)
    d = max(n_devices, 1)
    rows = []
    for i, step in enumerate(win[F.STEP].to_numpy(np.int64)):
        wall = (hi[i] - lo[i]) / 1e6
        rows.append(
            StepRow(
                step=int(step),
                host=host,
                wall_ms=float(wall),
                device_busy_ms=float(busy_ns[i]) / 1e6,
                device_busy_mean_ms=float(busy_mean_ns[i]) / 1e6,
                device_idle_ms=float(max(wall - busy_ns[i] / 1e6, 0.0)),
                host_wait_ms=float(wait_ns[i]) / 1e6,
                compile_ms=float(compile_ns[i]) / 1e6,
                collective_ms=float(coll_ns[i]) / d / 1e6,
                exposed_collective_ms=float(exposed_ns[i]) / d / 1e6,
                tokens=inputs.tokens_for(int(step)),
                n_devices=n_devices,
                in_execution_gap_ms=float(inside_ns[i]) / 1e6,
                compile_wait_ms=float(compile_wait_ns[i]) / 1e6,
            )
        )
    return rows


def _booked_busy(frames: Any, host: str, ops: "pd.DataFrame", win: "pd.DataFrame") -> np.ndarray | None:
    """Busy time per window, the step program's executions booked to the steps that dispatched them
    (the rest by time); ``None`` where that booking is unknown (inferred steps, which are those
    executions; no run ids; an execution not paired with its dispatch)."""
    booking = booked_runs(frames, host, ops)
    if booking is None:
        return None
    rows, steps = booking
    lo, hi = win[F.START_NS].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
    spans = intervals_of(ops)
    mine = np.zeros(len(ops), dtype=bool)
    mine[rows] = True
    # Work between steps (an evaluation queued behind the steps) is no step's, wherever it ran: its
    # rows in ``between_steps`` hold it, as small ops and top ops leave it out.
    modules = ops[F.HLO_MODULE]
    between = between_programs(
        frames, modules, op_steps(frames, host, ops, win), int(win.loc[win[F.STEP] >= 0, F.STEP].nunique())
    )
    others = ~mine & ~isin(modules, between) if between else ~mine
    index = {int(s): k for k, s in enumerate(win[F.STEP].to_numpy(np.int64))}
    out = iv.covered_in_windows(iv.union(spans[others]), lo, hi).astype(np.int64)
    order = np.argsort(ops[F.RUN_ID].to_numpy(np.int64)[rows], kind="stable")
    runs = ops[F.RUN_ID].to_numpy(np.int64)[rows[order]]
    new_run = np.r_[True, runs[1:] != runs[:-1]]
    busy = iv.totals(spans[rows[order]], np.cumsum(new_run) - 1, int(new_run.sum()))
    for step, run_busy in zip(steps[order[new_run]].tolist(), busy.tolist()):  # in the step it is booked to
        if step in index:
            out[index[step]] += run_busy
    return out


def _device_groups(ops: "pd.DataFrame") -> list[np.ndarray]:
    """Positions of each device's ops, devices by plane and ordinal (``groupby([plane, device], sort=True)``'s
    groups, without a frame for each)."""
    import pandas as pd

    column = ops[F.PLANE]
    if isinstance(column.dtype, pd.CategoricalDtype):
        plane = category_codes(column)  # categories in their order, as groupby sorts them
    else:
        plane = pd.factorize(column, sort=True)[0]
    device = ops[F.DEVICE].to_numpy()
    named = np.flatnonzero(plane >= 0)  # a missing plane is no group
    if not len(named):
        return []
    order = named[np.lexsort((device[named], plane[named]))]  # stable: each group's rows stay in order
    p, d = plane[order], device[order]
    return np.split(order, np.flatnonzero((p[1:] != p[:-1]) | (d[1:] != d[:-1])) + 1)
