"""Step times per chip: how long each device took over each step.

The steps table has one row per step per host, which is what the host saw. On a
TPU slice (or a GPU node) each chip runs its own copy of the step, and the
slowest chip sets the pace of a synchronous program: a straggler shows only
when the chips are timed apart.

Two sources, best first:

* ``steps``: a TPU capture's device "Steps" lines (``line_kind == "steps"``),
  the runtime's own step boundaries on each core, numbered by their names (else
  by the step they start in).
* ``ops``: every other capture, per step window of the steps table: from the
  first device op that starts in the window to the last op's end, on each
  device plane, with the time the device was busy inside that span.

A device with no op in a step has no row for that step: it did not take part,
and a zero would read as "infinitely fast".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.trace.frames import (
    CATEGORY,
    DEVICE,
    DUR_NS,
    HOST,
    LINE_KIND,
    NAME,
    PLANE,
    START_NS,
    STEP,
    TraceFrames,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: ``busy_ns`` is the union of the device's ops inside ``[start_ns, end_ns)``
#: (NaN for ``steps`` rows, whose ops are not counted); ``source`` is ``steps`` or ``ops``.
CHIP_STEP_COLUMNS = (HOST, PLANE, DEVICE, STEP, START_NS, "end_ns", "busy_ns", "source")
#: Lines whose events are ops occupying a core (see ``LINE_KINDS``).
_OP_LINES = ("compute", "memcpy", "collective", "xla_ops", "xla_cpu", "other")


def chip_steps(frames: TraceFrames) -> "pd.DataFrame":
    """One row per (host, device plane, step): the step's span on that device (``CHIP_STEP_COLUMNS``)."""
    import pandas as pd

    ev = frames.events
    marked = ev.loc[(ev[LINE_KIND] == "steps").to_numpy()] if len(ev) else ev
    rows = _from_step_lines(marked) if len(marked) else _from_ops(frames)
    table = pd.DataFrame(rows, columns=list(CHIP_STEP_COLUMNS))
    table = table.astype(
        {
            DEVICE: "int64",
            STEP: "int64",
            START_NS: "int64",
            "end_ns": "int64",
            "busy_ns": "float64",
            HOST: "object",
            PLANE: "object",
            "source": "object",
        }
    )
    return table.sort_values([HOST, STEP, PLANE], kind="stable").reset_index(drop=True)


def _from_step_lines(marked: "pd.DataFrame") -> list[tuple]:
    """Rows from device "Steps" lines; a step's number is its event name when that is a number."""
    rows = []
    for (host, plane, device), events in marked.groupby([HOST, PLANE, DEVICE], sort=True, observed=True):
        events = events.sort_values(START_NS, kind="stable")
        for i, (name, start, dur, found) in enumerate(
            zip(events[NAME].tolist(), events[START_NS].tolist(), events[DUR_NS].tolist(), events[STEP].tolist())
        ):
            step = int(name) if str(name).isdigit() else found if found >= 0 else i
            rows.append((str(host), str(plane), int(device), step, int(start), int(start + dur), np.nan, "steps"))
    return rows


def _from_ops(frames: TraceFrames) -> list[tuple]:
    """Rows from device ops inside the steps table's windows."""
    ev, steps = frames.events, frames.steps
    if not len(ev) or not len(steps):
        return []
    ops = ev.loc[((ev[CATEGORY] == "device") & ev[LINE_KIND].isin(_OP_LINES)).to_numpy()]
    rows = []
    for (host, plane, device), on_device in ops.groupby([HOST, PLANE, DEVICE], sort=True, observed=True):
        windows = steps.loc[steps[HOST] == host].sort_values(START_NS, kind="stable")
        if windows.empty:
            continue
        starts = on_device[START_NS].to_numpy(np.int64)
        ends = starts + on_device[DUR_NS].to_numpy(np.int64)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        lo = np.searchsorted(starts, windows[START_NS].to_numpy(np.int64), side="left")
        hi = np.searchsorted(starts, windows["end_ns"].to_numpy(np.int64), side="left")
        for step, a, b in zip(windows[STEP].tolist(), lo.tolist(), hi.tolist()):
            if a == b:
                continue
            first, last = int(starts[a]), int(ends[a:b].max())
            rows.append(
                (
                    str(host),
                    str(plane),
                    int(device),
                    int(step),
                    first,
                    last,
                    float(_covered(starts[a:b], ends[a:b])),
                    "ops",
                )
            )
    return rows


def _covered(starts: np.ndarray, ends: np.ndarray) -> int:
    """The length of the union of ``[starts, ends)`` (``starts`` sorted)."""
    reach = np.maximum.accumulate(ends)
    # An interval adds what it reaches past every earlier one: from max(its start, the reach so far).
    before = np.concatenate(([starts[0]], reach[:-1]))
    return int(np.maximum(reach - np.maximum(starts, before), 0).sum())
