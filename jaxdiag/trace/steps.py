"""Find step boundaries, and the step each event starts in.

In order of preference: ``StepTraceAnnotation`` events on the host (an event
named by the annotation with a ``step_num`` stat); a TPU "Steps" line; else the
executions of the dominant jitted module (the one with the most device time),
each extended over the gap up to the next execution. Steps are per host because
hosts do not share a clock.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING, Sequence

from jaxdiag import config

from jaxdiag.trace.frames import (
    CATEGORY, DEVICE, DUR_NS, HLO_MODULE, HOST, LINE_KIND, START_NS, STEP, STEP_COLUMNS,
)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

#: A device idle for longer than this between two events of the dominant module
#: starts a new execution, so back-to-back runs with a host sync between them split.
EXECUTION_GAP_NS = 1_000_000

#: ``(host, name, step_num, start_ns, end_ns)`` of one step-annotation event.
StepMark = tuple[str, str, int, int, int]
#: ``(host, device, step, start_ns, end_ns)`` of one event on a TPU "Steps" line.
DeviceStep = tuple[str, int, int, int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class FoundSteps:
    """Step boundaries and how they were found.

    Attributes:
      table: one row per step per host, columns ``STEP_COLUMNS``, by host then start.
      source: one of ``STEP_SOURCES``.
      notes: what was guessed, for the user.
    """

    table: "pd.DataFrame"
    source: str
    notes: tuple[str, ...]


def find_steps(events: "pd.DataFrame", marks: Sequence[StepMark] = (),
               device_steps: Sequence[DeviceStep] = ()) -> FoundSteps:
    """Find steps from annotations, TPU step lines or the dominant module, in that order.

    Args:
      events: the events frame (``EVENT_COLUMNS``; the ``step`` column is not read).
      marks: host events carrying a ``step_num`` stat.
      device_steps: events of TPU "Steps" lines.
    """
    if marks:
        rows, notes = _from_marks(marks)
        return FoundSteps(_table(rows), "annotation", notes)
    if device_steps:
        merged: dict[tuple[str, int], list[int]] = {}
        for host, _device, step, start, end in device_steps:
            span = merged.setdefault((host, step), [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
        rows = [(h, s, "Steps", a, b) for (h, s), (a, b) in merged.items()]
        return FoundSteps(_table(rows), "device_steps", ())
    return _from_module(events)


def assign_steps(events: "pd.DataFrame", steps: "pd.DataFrame") -> "np.ndarray":
    """The step each event starts in (``[start, end)``), or -1; an int64 array aligned with ``events``."""
    import numpy as np

    out = np.full(len(events), -1, dtype=np.int64)
    if steps.empty or events.empty:
        return out
    hosts = events[HOST].to_numpy()
    starts = events[START_NS].to_numpy()
    for host, group in steps.groupby(HOST, sort=False, observed=True):
        group = group.sort_values(START_NS)
        mask = hosts == host
        at = np.searchsorted(group[START_NS].to_numpy(), starts[mask], side="right") - 1
        inside = at >= 0
        ends = group["end_ns"].to_numpy()
        numbers = group[STEP].to_numpy()
        inside[inside] &= starts[mask][inside] < ends[at[inside]]
        out[np.flatnonzero(mask)[inside]] = numbers[at[inside]]
    return out


def _from_marks(marks: Sequence[StepMark]) -> tuple[list[tuple[str, int, str, int, int]], tuple[str, ...]]:
    """One step per (host, step_num) of the step name with the most events."""
    count: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for _host, name, _step, start, end in marks:
        count[name] += 1
        total[name] += end - start
    chosen = max(count, key=lambda n: (count[n], total[n]))
    notes: tuple[str, ...] = ()
    if len(count) > 1:
        others = ", ".join(f"{n!r} ({count[n]})" for n in sorted(count) if n != chosen)
        notes = (f"several step annotations; used {chosen!r} ({count[chosen]} events, the most), not {others}",)
    spans: dict[tuple[str, int], list[int]] = {}
    for host, name, step, start, end in marks:
        if name == chosen:
            span = spans.setdefault((host, step), [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
    return [(h, s, chosen, a, b) for (h, s), (a, b) in spans.items()], notes


def _from_module(events: "pd.DataFrame") -> FoundSteps:
    device = events[(events[CATEGORY] == "device") & (events[HLO_MODULE] != "")] if len(events) else events
    if device.empty:
        note = ("no step annotations and no device work with a module name; every event has step -1. "
                "Wrap each training step in jax.profiler.StepTraceAnnotation('train', step_num=i)")
        return FoundSteps(_table([]), "none", (note,))
    work = device[device[LINE_KIND] != "xla_modules"] if (device[LINE_KIND] != "xla_modules").any() else device
    module = str(work.groupby(HLO_MODULE, observed=True)[DUR_NS].sum().idxmax())
    rows: list[tuple[str, int, str, int, int]] = []
    for host, on_host in device.groupby(HOST, sort=False, observed=True):
        mine = on_host[on_host[HLO_MODULE] == module]
        if mine.empty:
            continue
        ordinal = mine[DEVICE].value_counts().sort_index().idxmax()
        runs = mine[(mine[DEVICE] == ordinal) & (mine[LINE_KIND] == "xla_modules")]
        if runs.empty:
            executions = _executions(on_host[on_host[DEVICE] == ordinal], module)
        else:
            executions = sorted(zip(runs[START_NS].tolist(), (runs[START_NS] + runs[DUR_NS]).tolist()))
        for i, (start, end) in enumerate(executions):
            stop = executions[i + 1][0] if i + 1 < len(executions) else end
            rows.append((str(host), i, module, start, stop))
    note = (f"no step annotations; each of the {len(rows)} executions of {module} (the module with the most "
            "device time), with the gap up to the next, is taken as a step. Wrap each training step in "
            "jax.profiler.StepTraceAnnotation('train', step_num=i) for exact steps")
    return FoundSteps(_table(rows), "module", (note,))


def _executions(device_events: "pd.DataFrame", module: str) -> list[tuple[int, int]]:
    """Split the module's events on one device into executions.

    A new execution starts where another module's work starts in between, or
    after an idle gap longer than ``EXECUTION_GAP_NS``.
    """
    ordered = device_events[device_events[LINE_KIND] != "xla_modules"].sort_values(START_NS, kind="stable")
    executions: list[tuple[int, int]] = []
    current: list[int] | None = None
    for name, start, dur in zip(ordered[HLO_MODULE].tolist(), ordered[START_NS].tolist(), ordered[DUR_NS].tolist()):
        if name != module:
            if current is not None:
                executions.append((current[0], current[1]))
                current = None
            continue
        if current is not None and start - current[1] > config.current().step_gap_us * 1000:
            executions.append((current[0], current[1]))
            current = None
        if current is None:
            current = [start, start + dur]
        else:
            current[1] = max(current[1], start + dur)
    if current is not None:
        executions.append((current[0], current[1]))
    return executions


def _table(rows: Sequence[tuple[str, int, str, int, int]]) -> "pd.DataFrame":
    import pandas as pd

    table = pd.DataFrame(list(rows), columns=list(STEP_COLUMNS))
    table = table.astype({STEP: "int64", START_NS: "int64", "end_ns": "int64", HOST: "object", "step_name": "object"})
    return table.sort_values([HOST, START_NS], kind="stable").reset_index(drop=True)
