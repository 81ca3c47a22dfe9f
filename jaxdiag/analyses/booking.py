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
from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.analyses.device_work import executions_of, host_events, step_windows, StepWindows
from jaxdiag.analyses.shared import once
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.frames import TraceFrames

_MODULE_FUNCTION = re.compile(r"^(?:jit|pjit)[_(](.*?)\)?$")


@dataclasses.dataclass(frozen=True)
class Booked:
    """One host's executions of the step's program, by start.

    Attributes:
      module: the step's program (``jit_train_step``).
      starts, ends: each execution's first op's start and last op's end.
      dispatch: when its dispatch began, -1 where unpaired.
      by_time: the step whose window holds its start (-1: none).
      by_dispatch: the step whose window holds its dispatch (-1: unpaired or none); where the
        steps are the executions themselves (no annotations), each execution's own.
      ahead: steps the host had queued beyond the device when it dispatched this one
        (executions dispatched, minus those finished); -1 where unpaired.
    """

    module: str
    starts: np.ndarray
    ends: np.ndarray
    dispatch: np.ndarray
    by_time: np.ndarray
    by_dispatch: np.ndarray
    ahead: np.ndarray


def step_program(frames: "TraceFrames") -> str:
    """The program whose executions are the steps (``trace.steps.step_module``), or ``""``."""

    def compute() -> str:
        from jaxdiag.trace.steps import step_module

        if frames.step_source == "module" and len(frames.steps):
            return str(frames.steps["step_name"].iloc[0])
        ev = frames.events
        device = ev[(ev[F.CATEGORY] == "device") & (ev[F.HLO_MODULE] != "")] if len(ev) else ev
        return "" if device.empty else step_module(device, executions_of(frames))

    return once(frames, ("step_program",), compute)


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
    dispatch = _pair(_dispatches(frames, host, module), starts)
    paired = dispatch >= 0
    by_time = windows.step_of(starts)
    if frames.step_source == "module":  # the steps are these executions: each is its own step's
        by_dispatch = np.where(paired, by_time, -1)
    else:
        by_dispatch = np.where(paired, windows.step_of(np.where(paired, dispatch, 0)), -1)
    finished = np.searchsorted(np.sort(ends), dispatch, side="right")  # executions done when it was dispatched
    ahead = np.where(paired, np.arange(len(starts)) - finished, -1)
    return Booked(module, starts, ends, dispatch, by_time, by_dispatch, ahead)


def _dispatches(frames: "TraceFrames", host: str, module: str) -> np.ndarray:
    """Starts of the host's outermost ``PjitFunction(f)`` spans for ``module`` (``jit_f``), sorted."""
    m = _MODULE_FUNCTION.match(module)
    if not m:
        return np.zeros(0, dtype=np.int64)
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
    return starts[keep]


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
