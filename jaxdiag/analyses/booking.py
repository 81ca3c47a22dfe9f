"""Which step queued each execution of the step's program, and how far ahead of the device the host ran.

A loop that never reads a value back dispatches steps faster than the device runs
them: the host's step N queues work the device runs during the host's step N+8.
Booking device work by the time it ran gives it to whatever step the host was in
then; booking it by the dispatch that queued it gives it to its own step.

The dispatches of the step's program are the host's outermost ``PjitFunction(f)``
spans for the module ``jit_f``, the executions those of ``trace.executions``. They
pair in order: when the trace holds more executions than dispatches, the first ones
were queued before the trace began (paired from the end); with fewer, the last
dispatches' work ran after it ended (paired from the start). A pairing in which an
execution starts before its dispatch is no pairing: nothing is booked by dispatch.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.device_work import (
    executions_of,
    host_events,
    intervals_of,
    name_matches,
    step_windows,
    StepWindows,
)
from jaxdiag.analyses.shared import once
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames

_MODULE_FUNCTION = re.compile(r"^(?:jit|pjit)[_(](.*?)\)?$")


@dataclasses.dataclass(frozen=True)
class Booked:
    """One host's executions of the step's program, by start.

    Attributes:
      module: the step's program (``jit_train_step``).
      starts, ends: each execution's first op's start and last op's end.
      dispatch: when its dispatch began, -1 where unpaired.
      dispatch_end: when that dispatch returned, -1 where unpaired.
      by_time: the step whose window holds its start (-1: none).
      by_dispatch: the step whose window holds its dispatch (-1: unpaired or none); where the
        steps are the executions themselves (no annotations), each execution's own.
      ahead: steps the host had queued beyond the device when it dispatched this one
        (executions dispatched, minus those finished); -1 where unpaired.
      windows: the host's step windows these were booked against.
    """

    module: str
    starts: np.ndarray
    ends: np.ndarray
    dispatch: np.ndarray
    dispatch_end: np.ndarray
    by_time: np.ndarray
    by_dispatch: np.ndarray
    ahead: np.ndarray
    windows: StepWindows


def step_program(frames: "TraceFrames") -> str:
    """The program whose executions are the steps (``TraceFrames.step_program``, found by the loader), or ``""``."""
    return frames.step_program or ""


def booked(frames: "TraceFrames", host: str) -> Booked:
    """``host``'s executions of the step's program, each with its dispatch and its steps."""
    return once(frames, ("booked", host), lambda: _booked(frames, host))


def _booked(frames: "TraceFrames", host: str) -> Booked:
    from jaxdiag.trace.executions import END_NS

    module = step_program(frames)
    execs = executions_of(frames)
    mine = execs.loc[(execs[F.HOST] == host) & (execs[F.HLO_MODULE] == module)]
    if len(mine) and mine[F.DEVICE].nunique() > 1:  # per-device runs: one device's
        mine = mine.loc[mine[F.DEVICE] == mine[F.DEVICE].value_counts().idxmax()]
    starts, ends = mine[F.START_NS].to_numpy(np.int64), mine[END_NS].to_numpy(np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    windows = StepWindows.of(step_windows(frames, host))
    spans = _dispatches(frames, host, module)
    dispatch = _pair(spans[:, 0], starts)
    paired = dispatch >= 0
    dispatch_end = np.full(len(starts), -1, dtype=np.int64)
    if paired.any():
        dispatch_end[paired] = spans[np.searchsorted(spans[:, 0], dispatch[paired]), 1]
    by_time = windows.step_of(starts)
    if frames.step_source == "module":  # the steps are these executions: each is its own step's
        by_dispatch = np.where(paired, by_time, -1)
    else:
        by_dispatch = np.where(paired, windows.step_of(np.where(paired, dispatch, 0)), -1)
    finished = np.searchsorted(np.sort(ends), dispatch, side="right")  # executions done when it was dispatched
    ahead = np.where(paired, np.arange(len(starts)) - finished, -1)
    return Booked(module, starts, ends, dispatch, dispatch_end, by_time, by_dispatch, ahead, windows)


def _dispatches(frames: "TraceFrames", host: str, module: str) -> np.ndarray:
    """``(start, end)`` of the host's outermost ``PjitFunction(f)`` spans for ``module`` (``jit_f``), by start;
    shared within a report."""
    return once(frames, ("dispatches", host, module), lambda: _outermost_dispatches(frames, host, module))


def _outermost_dispatches(frames: "TraceFrames", host: str, module: str) -> np.ndarray:
    m = _MODULE_FUNCTION.match(module)
    if not m:
        return np.zeros((0, 2), dtype=np.int64)
    ev = host_events(frames, host)
    rows = ev.loc[(ev[F.NAME] == f"PjitFunction({m[1]})").to_numpy()]
    starts = rows[F.START_NS].to_numpy(np.int64)
    ends = starts + rows[F.DUR_NS].to_numpy(np.int64)
    order = np.lexsort((-ends, starts))
    starts, ends = starts[order], ends[order]
    keep = np.ones(len(starts), dtype=bool)
    reach = -1
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        if s < reach:  # a call shows as nested spans of one name: the outermost is the dispatch
            keep[i] = False
        else:
            reach = e
    return np.stack([starts[keep], ends[keep]], axis=1)


def _pair(dispatches: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each execution's dispatch start, or -1 (see the module docstring)."""
    out = np.full(len(starts), -1, dtype=np.int64)
    n = min(len(dispatches), len(starts))
    if n == 0:
        return out
    if len(starts) > len(dispatches):  # the first executions were queued before the trace began
        out[len(starts) - n :] = dispatches[:n]
    else:
        out[:n] = dispatches[:n]
    if (out[out >= 0] > starts[out >= 0]).any():
        return np.full(len(starts), -1, dtype=np.int64)
    return out


def dispatched_at(frames: "TraceFrames", host: str, execs: "pd.DataFrame") -> np.ndarray:
    """When the dispatch that queued each of ``execs`` (rows of ``executions_of`` on ``host``) began, -1 where
    unpaired: each program's executions on each device paired in order with its ``PjitFunction`` spans (as
    in the module docstring), where there are no more spans than executions. Only where the trace tells executions apart (XLA:CPU run ids, TPU module
    spans); elsewhere every row is unpaired."""
    from jaxdiag.trace.executions import SOURCE

    out = np.full(len(execs), -1, dtype=np.int64)
    if execs.empty:
        return out
    starts = execs[F.START_NS].to_numpy(np.int64)
    told = execs[SOURCE].isin(list(IN_EXECUTION_GAPS)).to_numpy()
    keys = list(zip(execs[F.HLO_MODULE].astype(object).tolist(), execs[F.DEVICE].tolist()))
    for module, device in dict.fromkeys(keys):
        rows = np.flatnonzero(np.array([k == (module, device) for k in keys], dtype=bool) & told)
        if not len(rows):
            continue
        rows = rows[np.argsort(starts[rows], kind="stable")]
        spans = _dispatches(frames, host, str(module))
        if len(spans) <= len(rows):  # one dispatch each, but for runs queued before the trace began (the
            # first ones: ``_pair``); more spans than runs (a nested call traced, not run, makes one too)
            # leave the pairing in doubt
            out[rows] = _pair(spans[:, 0], starts[rows])
    return out


#: XLA:CPU's executor running a program (``ThunkExecutor::Execute``, and its wait for the last thunk).
_CPU_EXECUTOR = re.compile(r"ThunkExecutor::Execute")
#: What device-idle time with work in flight or queued is, by where executions came from.
IN_EXECUTION_GAPS = {
    "run_id": "gaps inside or between queued executions (XLA:CPU thread scheduling)",
    "module_span": "gaps inside or between queued executions (TPU)",
}


def in_flight(frames: "TraceFrames", host: str) -> tuple[np.ndarray, str]:
    """When ``host`` had an execution in flight or queued (a union), and what device idle then is called.

    In flight: from an execution's first op to its last (and, on XLA:CPU, while its executor
    runs). Queued: from when the dispatch that queued an execution (paired as in the module
    docstring, for every program) handed it over (``_handed_over``) to its start, less any compile;
    before that the host is still launching it, and device idle then is the dispatch's wait (an
    eager op's whole launch: XLA:CPU runs it inline). Only where the trace tells executions apart
    (XLA:CPU run ids, TPU module spans): on GPU, where kernels get their launching execution's id
    (``trace.launch``), a gap between two of a program's kernels may be the host launching the
    next one late, so there nothing counts as in flight (``""``).
    """
    return once(frames, ("in_flight", host), lambda: _in_flight(frames, host))


def _in_flight(frames: "TraceFrames", host: str) -> tuple[np.ndarray, str]:
    from jaxdiag.trace.executions import END_NS, SOURCE

    execs = executions_of(frames)
    mine = execs.loc[(execs[F.HOST] == host) & execs[SOURCE].isin(list(IN_EXECUTION_GAPS))]
    if mine.empty:
        return iv.EMPTY, ""
    starts, ends = mine[F.START_NS].to_numpy(np.int64), mine[END_NS].to_numpy(np.int64)
    parts = [iv.as_intervals(starts, ends)]
    source = str(mine[SOURCE].value_counts().idxmax())
    ev = host_events(frames, host)
    if source == "run_id":  # XLA:CPU's executor runs a program from before its first op to after its last
        parts.append(intervals_of(ev.loc[name_matches(ev[F.NAME], _CPU_EXECUTOR, at_start=True)]))
    keys = list(zip(mine[F.HLO_MODULE].astype(object).tolist(), mine[F.DEVICE].tolist()))
    prepare = intervals_of(ev.loc[name_matches(ev[F.NAME], _EXECUTE_PREPARE)])
    prepare = prepare[np.argsort(prepare[:, 0], kind="stable")]
    groups: dict[tuple[object, int], list[int]] = {}  # each (module, device)'s executions, in order of the first
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    queued = []
    for (module, _device), positions in groups.items():
        rows = np.asarray(positions, dtype=np.intp)
        rows = rows[np.argsort(starts[rows], kind="stable")]
        spans = _dispatches(frames, host, str(module))
        dispatch = _pair(spans[:, 0], starts[rows])
        paired = dispatch >= 0
        handed = _handed_over(prepare, spans)[np.searchsorted(spans[:, 0], dispatch[paired])]
        began = starts[rows][paired]
        waiting = handed < began  # one that began before it was handed over was never queued
        queued.append(iv.as_intervals(handed[waiting], began[waiting]))
    # A dispatch that compiles first queues nothing until its compile ends: that wait is the compile's.
    compiles = compile_windows(compile_spans(frames, host)).get(host, iv.EMPTY)
    parts.append(iv.subtract(np.concatenate(queued), compiles) if queued else iv.EMPTY)
    return iv.union(np.concatenate(parts)), IN_EXECUTION_GAPS[source]


#: The runtime readying an execution's inputs and outputs inside a dispatch; it queues the work when done.
_EXECUTE_PREPARE = re.compile(r"ExecutePrepare$")


def _handed_over(prepare: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """When each dispatch (``spans``, by start) handed its work to the runtime: the end of the first
    ``ExecutePrepare`` (``prepare``, by start) inside it, else the dispatch's end. Before that the host is
    launching."""
    out = spans[:, 1].copy()
    first = np.searchsorted(prepare[:, 0], spans[:, 0], side="left")
    found = np.flatnonzero(first < len(prepare))
    inside = prepare[first[found], 1] <= spans[found, 1]
    out[found[inside]] = prepare[first[found[inside]], 1]
    return out


def compile_step(frames: "TraceFrames", host: str, span: Any) -> int:
    """The step a compile belongs to, where the host ran ahead of the device: not the step the device
    was in meanwhile, but

    - for the step's program: the step of the execution that waited for it (the first whose dispatch
      overlaps it: a compile runs inside the dispatch that needs it);
    - for another function that began inside a step, with steps found from the executions (whose
      windows are the device's time): the host's order, the step whose dispatch it ran in, else the one
      whose dispatch came next, or no step (-1) where work between steps separates that step from the
      one before it, or where no step was dispatched after it.

    Otherwise (annotated steps are the host's own spans; unpaired executions; a compile outside every
    step, such as set-up before the first): ``span.step``."""
    b = booked(frames, host)
    paired = b.dispatch >= 0
    if not paired.any():
        return int(span.step)
    if span.module == b.module:
        after = np.flatnonzero(paired & (b.dispatch <= span.end_ns) & (b.dispatch_end >= span.start_ns))
        return int(b.by_dispatch[after[0]]) if len(after) else int(span.step)
    if frames.step_source != "module" or span.step < 0:
        return int(span.step)
    following = np.flatnonzero(paired & (b.dispatch_end >= span.start_ns))  # the dispatch it ran in, or the next
    if not len(following):
        return -1
    step = int(b.by_dispatch[following[0]])
    if b.dispatch[following[0]] <= span.start_ns:  # inside that dispatch: a compile it needed
        return step
    k = np.flatnonzero(b.windows.steps == step)
    if not len(k):
        return int(span.step)
    k0 = int(k[0])
    return -1 if k0 > 0 and b.windows.starts[k0] > b.windows.ends[k0 - 1] else step


def op_steps(frames: "TraceFrames", host: str, ops: Any, windows: Any) -> np.ndarray:
    """Each of ``host``'s ``ops``' step, as the per-step figures book device work: the step program's
    executions to the step whose dispatch queued them (``booked``), every other op to the window of
    ``windows`` (one host's step windows) holding its start; -1 for none.

    Where that booking is unknown (steps inferred from the executions themselves, no run ids, an
    execution not paired with its dispatch), every op goes by the window holding its start.
    """
    starts = ops[F.START_NS].to_numpy(np.int64)
    win = StepWindows.of(windows)
    step = win.step_of(starts)
    runs = booked_runs(frames, host, ops)
    if runs is None:
        return step
    rows, booked_step = runs
    shown = np.isin(booked_step, win.steps)  # a step left out of ``windows`` holds none of them
    step[rows] = np.where(shown, booked_step, -1)
    return step


def booked_runs(frames: "TraceFrames", host: str, ops: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Positions in ``ops`` (``host``'s device ops) of the step program's ops, and the step their execution
    is booked to (``Booked.by_dispatch``); ``None`` where that booking is unknown (see ``op_steps``). Shared
    within a report for the same ``ops`` (the analyses ask it of ``device_ops``' shared frame)."""
    held = once(frames, ("booked_runs", host, id(ops)), lambda: (ops, _booked_runs(frames, host, ops)))
    return held[1] if held[0] is ops else _booked_runs(frames, host, ops)


def _booked_runs(frames: "TraceFrames", host: str, ops: Any) -> tuple[np.ndarray, np.ndarray] | None:
    if frames.step_source == "module" or F.RUN_ID not in ops:
        return None
    b = booked(frames, host)
    if not (b.dispatch >= 0).any():  # unpaired executions, queued before the trace began, are no step's
        return None
    runs = ops[F.RUN_ID].to_numpy(np.int64)
    rows = np.flatnonzero((ops[F.HLO_MODULE] == b.module).to_numpy() & (runs >= 0))
    if not len(rows):
        return None
    run_ids, inverse = np.unique(runs[rows], return_inverse=True)
    inverse = inverse.reshape(-1)
    first = np.full(len(run_ids), np.iinfo(np.int64).max)
    np.minimum.at(first, inverse, ops[F.START_NS].to_numpy(np.int64)[rows])
    if len(run_ids) != len(b.starts):
        return None
    rank = np.empty(len(run_ids), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(run_ids))  # executions by start, as ``booked``'s
    return rows, b.by_dispatch[rank[inverse]]


#: ``queued_after`` of an execution whose dispatch is not known.
UNBOOKED = -2


def queued_after(frames: Any, host: str, dispatch: np.ndarray) -> np.ndarray:
    """For each dispatch time (-1: unpaired), the step whose execution of the step's program was the last
    dispatched before it (-1: none, before the first), or ``UNBOOKED`` where that cannot be told: the
    dispatch is unpaired, or the step's program's executions dispatched in the trace do not all pair."""
    out = np.full(len(dispatch), UNBOOKED, dtype=np.int64)
    b = booked(frames, host)
    known = b.dispatch >= 0  # those queued before the trace began are not: they come first
    if not known.any() or (b.by_dispatch[known] < 0).any():
        return out
    dispatches, steps = b.dispatch[known], b.by_dispatch[known]
    order = np.argsort(dispatches, kind="stable")
    at = np.searchsorted(dispatches[order], dispatch, side="right") - 1
    paired = dispatch >= 0
    out[paired] = np.where(at[paired] >= 0, steps[order][np.maximum(at[paired], 0)], -1)
    return out
