"""Device-idle time inside steps, each stretch attributed to what the host was doing then.

A *wait* is a stretch of a step where no device op of the host runs (a gap in
the union of ``device_work.device_ops``) at least ``thresholds.host_wait_min_us``
long; shorter gaps are launch jitter. Each wait is split, innermost first, by
what the host was doing, on any of its threads:

1. ``compile``: inside a compile span (``compile_spans``);
2. ``device_to_host_sync``: inside a device-to-host read such as ``float(loss)``,
   ``np.asarray``, ``jax.device_get`` or ``block_until_ready`` (``np.asarray(jax.Array)``,
   ``ToLiteral``, ``BlockUntilReady``, ``CopyRawDeviceToHost``, ``D2H ...`` events);
3. a user annotation (``TraceAnnotation("load_batch")``), the innermost one where
   several nest; step annotations themselves never count;
4. ``dispatch``: launching jitted code (``PjitFunction(f)``, ``...Execute``, ``DevicePut``);
5. ``unattributed``: plain Python with no marker.

``time_lost_ms`` of a finding is the device-idle time given to that cause: what
removing the stall saves at most, if the device then has work queued.

A device waits for the host only when nothing is in flight. Where the trace tells
executions apart (``device_work.in_flight``: XLA:CPU run ids, TPU module spans), idle
stretches while an execution runs are the program's own gaps (XLA:CPU's thread pool
between thunks), whatever the host did then: they are counted apart, as
``in_execution``, and are never a host wait. A host blocked in a dispatch while an
execution runs (the queue is full) leaves no idle device, so it is no wait either.

The findings, and the advice for each cause, are built in ``host_wait_findings``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.booking import in_flight
from jaxdiag.analyses.host_wait_section import CauseWait, HostWaits, InExecution, StepCause, StepMs, StepWaits
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows, wall_outside_compiles
from jaxdiag.analyses.device_waiting import device_idle
from jaxdiag.analyses.device_work import (
    END_NS,
    classify_names,
    device_rows,
    host_events,
    hosts_of,
    StepWindows,
    isin,
    name_matches,
    step_of,
    step_windows,
    strings_at,
)
from jaxdiag.analyses.shared import once
from jaxdiag.analyses.waits import WaitTable
from jaxdiag.trace import frames as F
from jaxdiag.trace.steps import reads_back

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames

COMPILE, SYNC, DISPATCH, UNATTRIBUTED = "compile", "device_to_host_sync", "dispatch", "unattributed"
_D2H_COPY = re.compile("MemcpyD2H")
#: Dispatch events: a name starting ``PjitFunction(``, ``ExecuteReplicated`` or ``DevicePut`` (all
#: of it), or holding ``Execute`` (a word's end) or ``BufferFromHostBuffer``; two patterns, since an
#: anchored branch stops ``re`` from skipping ahead to the branches' first letters.
_DISPATCH_AT_START = re.compile(r"PjitFunction\(|ExecuteReplicated|DevicePut$")
_DISPATCH_ANYWHERE = re.compile(r"Execute\b|BufferFromHostBuffer")


def _dispatches(name: str) -> bool:
    return _DISPATCH_AT_START.match(name) is not None or _DISPATCH_ANYWHERE.search(name) is not None


_PJIT_CALL = re.compile(r"^PjitFunction\((.+)\)$")


def _launched_function(name: str) -> str:
    """The function a ``PjitFunction(f)`` event launched, else ``""``."""
    m = _PJIT_CALL.match(name)
    return m[1] if m else ""


@dataclasses.dataclass(frozen=True, slots=True)
class CauseTotal:
    """Device-idle time given to one cause over the analysed steps."""

    cause: str
    kind: str
    ms: float
    steps: int


@dataclasses.dataclass(frozen=True, slots=True)
class HostWaitsResult:
    """Device-idle waits, attributed.

    Attributes:
      waits: every attributed stretch, in time order per host.
      by_cause: totals per cause, largest first.
      wall_ms: wall time of the analysed steps, on the host where it is largest.
      steady_wall_ms: the same without compile time, which severities are graded against.
      sync_steps: steps with a device-to-host read, whether or not it left the device idle.
      in_execution: device-idle stretches while an execution was in flight (not waits), by step.
      in_execution_label: what those are on this platform, e.g. "gaps inside executions
        (XLA:CPU thread scheduling)"; ``""`` where the trace does not tell executions apart.
      findings: one ``host_wait`` finding per cause that matters (compiles are left
        to the recompile findings, so their time is not reported twice).
    """

    waits: WaitTable
    by_cause: tuple[CauseTotal, ...]
    wall_ms: float
    steady_wall_ms: float
    sync_steps: tuple[int, ...] = ()
    findings: tuple[Finding, ...] = ()
    in_execution: WaitTable = dataclasses.field(default_factory=WaitTable.empty)
    in_execution_label: str = ""

    @property
    def total_ms(self) -> float:
        return sum(c.ms for c in self.by_cause)

    @property
    def in_execution_ms(self) -> float:
        return int((self.in_execution.end_ns - self.in_execution.start_ns).sum()) / 1e6

    def by_step(self) -> dict[int, dict[str, float]]:
        """Step -> cause -> milliseconds (the causes of a step in the order they first come)."""
        out: dict[int, dict[str, float]] = {}
        for (step, cause), ms in self.waits.totals("step", "cause").items():
            out.setdefault(step, {})[cause] = ms
        return dict(sorted(out.items()))

    def section(self) -> HostWaits:
        """The report's ``host_waits`` section: totals per cause and per step, in ms to 3 decimals."""
        in_steps = {step: ms for (step,), ms in self.in_execution.totals("step").items()}
        return HostWaits(
            in_execution=InExecution(
                self.in_execution_label,
                round(self.in_execution_ms, 3),
                tuple(StepMs(k, round(v, 3)) for k, v in sorted(in_steps.items())),
            ),
            total_ms=round(self.total_ms, 3),
            by_cause=tuple(CauseWait(c.cause, c.kind, round(c.ms, 3)) for c in self.by_cause),
            by_step=tuple(
                StepWaits(
                    step,
                    round(sum(causes.values()), 3),
                    tuple(StepCause(k, round(v, 3)) for k, v in sorted(causes.items(), key=lambda kv: -kv[1])),
                )
                for step, causes in self.by_step().items()
            ),
        )


def analyze(inputs: AnalysisInputs) -> HostWaitsResult:
    """Find device-idle stretches in steps and attribute each to a host activity."""
    frames = inputs.frames
    windows = step_windows(frames, inputs.host, inputs.steps)
    step_names = set(frames.steps["step_name"].astype(str)) if "step_name" in frames.steps else set()
    waits: list[WaitTable] = []
    inside: list[WaitTable] = []
    label = ""
    sync_steps: set[int] = set()
    wall_ns = steady_ns = 0
    for host in hosts_of(frames, inputs.host):
        win = windows.loc[windows[F.HOST] == host]
        if win.empty:
            continue
        lo, hi = win[F.START_NS].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
        compiles = compile_windows(compile_spans(frames, host)).get(host, iv.EMPTY)
        wall_ns = max(wall_ns, int((hi - lo).sum()))
        steady_ns = max(steady_ns, wall_outside_compiles(lo, hi, compiles))
        flight, named = in_flight(frames, host)
        label = label or named
        host_waits, host_inside = _host_waits(inputs, host, win, compiles, step_names, flight, named)
        waits.append(host_waits)
        inside.append(host_inside)
        sync_steps |= _sync_steps(frames, host, win)
    table = WaitTable.joined(waits)
    ms, steps = table.totals("cause", "kind"), table.distinct_steps("cause", "kind")
    by_cause = tuple(sorted((CauseTotal(c, k, ms[(c, k)], steps[(c, k)]) for c, k in ms), key=lambda c: -c.ms))
    result = HostWaitsResult(
        table,
        by_cause,
        wall_ns / 1e6,
        steady_ns / 1e6,
        tuple(sorted(sync_steps)),
        in_execution=WaitTable.joined(inside),
        in_execution_label=label,
    )
    all_steps = sorted(int(x) for x in windows[F.STEP].unique())
    from jaxdiag.analyses.host_wait_findings import findings  # not at the top: it imports this module's cause kinds

    return dataclasses.replace(result, findings=findings(result, inputs, all_steps))


def _sync_steps(frames: "TraceFrames", host: str, win: "pd.DataFrame") -> set[int]:
    """Steps with a device-to-host read: a host read-back event or a device ``MemcpyD2H``.

    The device copy still marks a read when the host side left no named event.
    """
    ev = host_events(frames, host)
    starts = [ev[F.START_NS].to_numpy(np.int64)[_reads_back(frames, host)]]
    ops = np.flatnonzero(device_rows(frames, host))
    copies = ops[name_matches(frames.events[F.NAME], _D2H_COPY, at_start=True, rows=ops)]
    starts.append(frames.events[F.START_NS].to_numpy(np.int64)[copies])
    steps = step_of(np.concatenate(starts), win)
    return {int(s) for s in steps if s >= 0}


def _reads_back(frames: "TraceFrames", host: str) -> np.ndarray:
    """Which of ``host_events(frames, host)`` read results back from the device (``trace.steps.reads_back``)."""
    names = host_events(frames, host)[F.NAME]
    return once(frames, ("reads_back", host), lambda: classify_names(names, reads_back, key=reads_back, dtype=bool))


def _host_waits(
    inputs: AnalysisInputs,
    host: str,
    win: "pd.DataFrame",
    compiles: np.ndarray,
    step_names: set[str],
    flight: np.ndarray = iv.EMPTY,
    flight_label: str = "",
) -> tuple[WaitTable, WaitTable]:
    """The host's waits, and its device-idle stretches while an execution was in flight (``flight``)."""
    frames = inputs.frames
    lo = win[F.START_NS].to_numpy(np.int64)
    hi = win["end_ns"].to_numpy(np.int64)
    min_ns = int(inputs.thresholds.host_wait_min_us * 1000)
    idle = iv.intersect(device_idle(frames, host, int(lo.min()), int(hi.max()), min_ns), np.stack([lo, hi], axis=1))
    in_exec = WaitTable.empty()
    if flight.size and idle.size:
        in_exec = _pieces(host, _Bounds.of(win), iv.intersect(idle, flight), flight_label, "in_execution", "")
        idle = iv.subtract(idle, flight)
    if idle.size == 0:
        return WaitTable.empty(), in_exec
    ev = host_events(frames, host)
    starts, ends = ev[F.START_NS].to_numpy(np.int64), ev[END_NS].to_numpy(np.int64)
    near = (starts < int(idle[-1, 1])) & (ends > int(idle[0, 0]))
    names = ev[F.NAME]
    sync = near & _reads_back(frames, host)
    dispatch = near & classify_names(names, _dispatches, key=_dispatches, dtype=bool) & ~sync
    is_ann = near & (ev[F.CATEGORY] == "annotation").to_numpy() & ~sync & ~dispatch & ~isin(names, step_names)
    durs = ev[F.DUR_NS].to_numpy(np.int64)
    # Only rows that touch an idle stretch can explain one (the stretches left only shrink):
    # covering the others would change no layer's share.
    touches = np.zeros(len(ev), dtype=bool)
    candidates = np.flatnonzero(sync | dispatch | is_ann)
    after = np.searchsorted(idle[:, 1], starts[candidates], side="right")
    inside = after < len(idle)
    touches[candidates[inside]] = idle[after[inside], 0] < ends[candidates[inside]]

    def cover(rows: np.ndarray) -> np.ndarray:  # positions, or a mask over ``ev``
        rows = np.flatnonzero(rows & touches) if rows.dtype == bool else rows[touches[rows]]
        return iv.union(np.stack([starts[rows], ends[rows]], axis=1))

    layers: list[tuple[str, str, str, np.ndarray]] = [(COMPILE, COMPILE, "", compiles), (SYNC, SYNC, "", cover(sync))]
    # Innermost first: annotations of a name that is usually shorter come first,
    # so load_batch inside a user's "train_loop" annotation keeps its own name.
    ann = np.flatnonzero(is_ann)
    for name, rows in _shortest_first(strings_at(names, ann), durs[ann]):
        layers.append((name, "annotation", "", cover(ann[rows])))
    # Dispatch, by the function launched: innermost PjitFunction(f) first, then
    # launches outside any (Execute, DevicePut).
    disp = np.flatnonzero(dispatch)
    launched = classify_names(names, _launched_function, key=_launched_function, rows=disp)
    for name, rows in _shortest_first(launched, durs[disp]):
        if name and touches[disp[rows]].any():
            layers.append((DISPATCH, DISPATCH, name, cover(disp[rows])))
    layers.append((DISPATCH, DISPATCH, "", cover(disp)))
    out: list[WaitTable] = []
    bounds = _Bounds.of(win)
    remaining = idle
    for cause, kind, detail, cover in layers:
        if remaining.size == 0:
            break
        if not iv.unions_overlap(remaining, cover):  # most layers: a quick look spares the sweep (both are unions)
            continue
        part = iv.intersect(remaining, cover)
        if part.size:
            out.append(_pieces(host, bounds, part, cause, kind, detail))
            remaining = iv.subtract(remaining, part)
    out.append(_pieces(host, bounds, remaining, UNATTRIBUTED, UNATTRIBUTED, ""))
    table = WaitTable.joined(out)
    return table.take(np.argsort(table.start_ns, kind="stable")), in_exec


def _shortest_first(keys: np.ndarray, durs: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Each distinct key with the positions of its rows, by median duration (ties: by key)."""
    distinct, which = np.unique(keys, return_inverse=True)
    groups = [np.flatnonzero(which == i) for i in range(len(distinct))]
    median = [float(np.median(durs[g])) for g in groups]
    return [(str(distinct[i]), groups[i]) for i in sorted(range(len(distinct)), key=median.__getitem__)]


@dataclasses.dataclass(frozen=True)
class _Bounds:
    """One host's step windows, read from the frame once for every layer's pieces."""

    edges: np.ndarray  # every window's start and end, sorted, once each
    windows: StepWindows

    @classmethod
    def of(cls, win: "pd.DataFrame") -> "_Bounds":
        starts, ends = win[F.START_NS].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
        return cls(np.unique(np.concatenate([starts, ends])), StepWindows.of(win))


def _pieces(host: str, bounds: _Bounds, part: np.ndarray, cause: str, kind: str, detail: str) -> WaitTable:
    """``part``'s stretches as waits, each in the step whose window holds it.

    Steps tile the run, so an idle stretch merged across a boundary (intervals that
    touch are one) is cut there: its time after the boundary is the next step's.
    """
    edges = bounds.edges
    first = np.searchsorted(edges, part[:, 0], side="right")  # the edges inside a stretch: edges[first:first + inner]
    inner = np.searchsorted(edges, part[:, 1], side="left") - first
    if (inner > 0).any():  # cut each stretch at the edges inside it, all at once
        pieces = np.maximum(inner, 0) + 1
        row = np.repeat(np.arange(len(part)), pieces)
        k = np.arange(len(row)) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # a piece's place in its stretch
        at = first[row] + k
        starts = np.where(k == 0, part[row, 0], edges[np.clip(at - 1, 0, len(edges) - 1)])
        ends = np.where(k == pieces[row] - 1, part[row, 1], edges[np.clip(at, 0, len(edges) - 1)])
        part = np.stack([starts, ends], axis=1)
    return WaitTable.of(host, bounds.windows.step_of(part[:, 0]), part, cause, kind, detail)
