"""Is the capture whole? What the trace cannot tell, said before any figure is read.

Every other analysis reads the trace as if it held the whole window. It may not:

- ``device_work_missing``: a host launched a jitted program (``PjitFunction(f)``)
  after the last op of ``jit_f`` in the trace, so the trace stopped before the
  devices ran the last launches (the host runs ahead of the device, and a trace
  stopped without waiting loses the queued work). The steps that launched them
  show too little device work. Only programs seen running in the trace count,
  unless no device op ran at all (then every launch lacks its work). A call traced
  rather than run (a jitted ``jnp`` function in the body of an eager ``lax.scan``)
  makes a launch span with no execute event in it: where launches show their execute
  events, such a launch is not counted.
- ``events_dropped``: the profiler says it dropped events (a stat with ``drop``
  in its name on a metadata plane, as profilers write when their buffers fill).
- ``hosts_missing``: the capture sidecars say the run had more processes than
  host files were read (a process crashed, or its file is elsewhere).
- ``short_window``: fewer than two steps, so there is no step to compare with
  and no steady throughput; or no step at all, the whole capture read as one.

Each ``CaptureNote`` says what the capture lacks and what to change in it. The
notes cost no time: they qualify every figure after them, so reports print them
first. The Python tracer's share of the capture is the loader's note.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.analyses.capture_section import CaptureNote, CaptureSection
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.categories import classify_names, column_codes
from jaxdiag.analyses.collectives import platform_of
from jaxdiag.analyses.device_work import device_ops, host_events, hosts_of, name_matches, step_windows
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames

_LAUNCH = re.compile(r"^PjitFunction\((.+)\)$")
#: The runtime handing a program to the devices, inside the launch that dispatched it
#: (``CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice``, ``ExecuteReplicated.__call__``, ...).
_EXECUTE = re.compile(r"Execute")
#: A program's module name from the function jit wrapped: ``jit_f`` (``jit(f)`` in some releases).
_MODULE = re.compile(r"^(?:jit|pjit)[_(](.+?)\)?(?:\.\d+)?$")


@dataclasses.dataclass(frozen=True)
class CompletenessResult:
    """The notes on what the capture lacks; ``whole`` when there are none."""

    notes: tuple[CaptureNote, ...] = ()
    findings: tuple[Finding, ...] = ()

    @property
    def whole(self) -> bool:
        return not self.notes

    def section(self) -> CaptureSection:
        """The report's ``capture`` section."""
        return CaptureSection(self.whole, self.notes)


def analyze(inputs: AnalysisInputs) -> CompletenessResult:
    """Check the capture for missing device work, dropped events, missing hosts and a short window."""
    frames = inputs.frames
    notes: list[CaptureNote] = []
    for host in hosts_of(frames, inputs.host):
        notes += _device_work_missing(frames, host)
    notes += _events_dropped(frames)
    notes += _hosts_missing(frames, inputs)
    notes += _short_window(frames, inputs)
    return CompletenessResult(tuple(notes))


def _device_work_missing(frames: "TraceFrames", host: str) -> list[CaptureNote]:
    """Launches of a program that came after its last op in the trace: the trace ended before they ran.

    How many launches lack their work: those after the program's last op, or, on
    XLA:CPU, where an op's name is the same in every execution of a program, the
    launches beyond the executions the trace holds (the last ones, as executions
    run in launch order), when that is more: an execution running when the trace
    stopped may have ended ops after a later launch, or after every launch. (A GPU runs a command buffer's
    kernels under names that alternate between executions, so there the ops do
    not count executions.)
    """
    ops = device_ops(frames, host)
    runs = _executions(ops) if platform_of(frames) == "cpu" else {}
    last_end = _last_ends(ops)
    events = host_events(frames, host)
    launches = _launches(events, None if ops.empty else set(last_end))
    ended: dict[str, list[int]] = {}
    for function, starts in launches.items():
        after = sum(1 for s in starts if s > last_end.get(function, -1))
        # Counted executions tell even when every launch came before the last op ended (the host
        # launched them all while the device ran the first).
        missing = max(len(starts) - runs[function] if function in runs else 0, after)
        if missing > 0:
            ended[function] = starts[-missing:]
    if not ended:
        return []
    listed, steps = _listed(frames, host, ended, launches)
    return [
        CaptureNote(
            "device_work_missing",
            (
                f"The trace of {host} ends before its devices ran all the work the host launched: {listed} "
                "have no device work in it, so those steps show too little device work and throughput reads high."
            ),
            (
                "Wait for the last step's outputs before stopping the trace (`jax.block_until_ready(state)`; "
                "`jaxdiag.capture` and `@jaxdiag.step` do)."
            ),
            {"host": host, "steps": steps, "launches": _counts(ended, launches)},
        )
    ]


def _listed(
    frames: "TraceFrames", host: str, missing: dict[str, list[int]], launches: dict[str, list[int]]
) -> tuple[str, list[int]]:
    """``"N of M launches of `f` (steps ...)"`` for the launches ``missing``, and those steps."""
    windows = step_windows(frames, host)
    steps = sorted(
        {
            int(st)
            for starts in missing.values()
            for s in starts
            for st, lo, hi in zip(windows[F.STEP], windows[F.START_NS], windows["end_ns"])
            if lo <= s < hi and st >= 0
        }
    )
    listed = ", ".join(f"{len(v)} of {len(launches[f])} launches of `{f}`" for f, v in sorted(missing.items()))
    return listed + (f" (steps {_span(steps)})" if steps else ""), steps


def _counts(missing: dict[str, list[int]], launches: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    return {f: {"missing": len(v), "of": len(launches[f])} for f, v in missing.items()}


def _last_ends(ops: "pd.DataFrame") -> dict[str, int]:
    """Per jitted function, when its last op in the trace ended."""
    out: dict[str, int] = {}
    if ops.empty:
        return out
    for module, end in ops.groupby(F.HLO_MODULE, sort=False, observed=True)["end_ns"].max().items():
        function = _function_of(str(module))
        if function:
            out[function] = max(out.get(function, -1), int(end))
    return out


def _executions(ops: "pd.DataFrame") -> dict[str, int]:
    """Per jitted function, how many times its programs ran, on the device that ran them most.

    One execution runs each op of a program once, so the commonest number of
    occurrences of an op (kernel and HLO op) is the program's executions: ops in a
    loop body run more often, a GPU command buffer's update copies less often, and a
    kernel XLA reuses for identical fusions more often, but fewer ops than the rest.
    Where every op of a program carries its execution's run id (XLA:CPU writes them), the distinct
    ids count its executions exactly, one the trace cut short included. Each compile of a function
    (``program_id``) counts apart.
    """
    import pandas as pd

    out: dict[str, int] = {}
    if ops.empty:
        return out
    numbered = ops.groupby([F.HLO_MODULE, F.PROGRAM_ID, F.PLANE, F.DEVICE], sort=False, observed=True).ngroup()
    group = numbered.fillna(-1).to_numpy(np.int64)  # NaN: a row with a missing key, which is no group's
    names, hlo_ops = pd.factorize(ops[F.NAME])[0], pd.factorize(ops[F.HLO_OP])
    op = (names.astype(np.int64) + 1) * (len(hlo_ops[1]) + 1) + hlo_ops[0] + 1  # one number >= 0 per (kernel, op)
    kept = np.flatnonzero(group >= 0)
    if not len(kept):
        return out
    # How often each op of a group occurs; then how many of a group's ops occur each number of times.
    width = int(np.max(op)) + 1
    pairs, occurrences = np.unique(group[kept] * width + op[kept], return_counts=True)
    most = int(np.max(occurrences)) + 1
    counted, how_often = np.unique((pairs // width) * most + occurrences, return_counts=True)
    of_group, count = counted // most, counted % most
    # Per group, the count most ops share (a tie: the most occurrences): last by (group, how often, count).
    order = np.lexsort((count, how_often, of_group))
    last = order[np.r_[of_group[order][1:] != of_group[order][:-1], True]]
    runs_of_group = count[last]
    if F.RUN_ID in ops:  # ops that carry their execution's run id count executions exactly, one cut short too
        run = ops[F.RUN_ID].to_numpy(np.int64)[kept]
        whole = np.bincount(group[kept], weights=run < 0, minlength=len(last)) == 0  # groups with every run id
        distinct = np.unique(np.stack([group[kept], run], axis=1), axis=0)[:, 0]
        by_ids = np.bincount(distinct, minlength=len(last))
        runs_of_group = np.where(whole[of_group[last]], by_ids[of_group[last]], runs_of_group)
    first_row = kept[np.unique(group[kept], return_index=True)[1]]  # groups by number: a row of each
    modules = ops[F.HLO_MODULE].to_numpy(object)[first_row]
    programs = ops[F.PROGRAM_ID].to_numpy()[first_row]
    best: dict[tuple[str, int], int] = {}
    for g, runs in zip(of_group[last].tolist(), runs_of_group.tolist()):
        key = (str(modules[g]), int(programs[g]))
        best[key] = max(best.get(key, 0), runs)
    for (module, _program), runs in best.items():
        function = _function_of(module)
        if function:
            out[function] = out.get(function, 0) + runs
    return out


def _launches(events: "pd.DataFrame", functions: set[str] | None) -> dict[str, list[int]]:
    """Start times of each launch of ``functions`` (``None``: any) (``PjitFunction(f)``), outermost events only.

    Launches made inside another (the ``jnp`` functions a first call traces) are part of it.
    """
    rows = np.flatnonzero(name_matches(events[F.NAME], _LAUNCH, at_start=True))  # tested once per distinct name
    every = classify_names(events[F.NAME], _launched, key=_launched, rows=rows).tolist()
    chosen = [i for i, f in enumerate(every) if f and (functions is None or f in functions)]
    rows, launched = rows[chosen], [every[i] for i in chosen]
    starts, ends = events[F.START_NS].to_numpy(np.int64)[rows], events["end_ns"].to_numpy(np.int64)[rows]
    rank = {f: i for i, f in enumerate(sorted(set(launched)))}
    order = np.lexsort((np.array([rank[f] for f in launched], dtype=np.int64), ends, starts))  # as tuples sort
    starts, ends = starts[order], ends[order]
    # Launches nest (Python's and the runtime's, jnp calls traced inside): the outer one counts, one that starts
    # when every earlier one has ended.
    reach = np.maximum.accumulate(np.concatenate([[-1], ends[:-1]])) if len(ends) else ends
    outer = starts >= reach
    ran = _executes_inside(events, rows[order], outer)
    if ran.any():  # launches show their execute events: one without is a call traced, not run
        outer &= ran
    out: dict[str, list[int]] = {}
    for s, i in zip(starts[outer].tolist(), order[outer].tolist()):
        out.setdefault(launched[i], []).append(s)
    return out


def _executes_inside(events: "pd.DataFrame", rows: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """Whether each launch at ``rows`` (where ``outer``) holds an execute event on its own thread."""
    out = np.zeros(len(rows), dtype=bool)
    executes = np.flatnonzero(name_matches(events[F.NAME], _EXECUTE))
    if not len(executes) or not outer.any():
        return out
    plane, _planes = column_codes(events[F.PLANE])
    line, lines = column_codes(events[F.LINE])
    thread = plane.astype(np.int64) * (len(lines) + 1) + line
    starts, ends = events[F.START_NS].to_numpy(np.int64), events["end_ns"].to_numpy(np.int64)
    launches = rows[outer]
    for key in np.unique(thread[launches]).tolist():
        times = np.sort(starts[executes[thread[executes] == key]])
        mine = thread[launches] == key
        at = launches[mine]
        out[np.flatnonzero(outer)[mine]] = np.searchsorted(times, ends[at]) > np.searchsorted(times, starts[at])
    return out


def _launched(name: str) -> str:
    m = _LAUNCH.match(name)
    return m[1] if m else ""


def _function_of(module: str) -> str:
    m = _MODULE.match(module)
    return m[1] if m else ""


def _events_dropped(frames: "TraceFrames") -> list[CaptureNote]:
    dropped = {
        k: v
        for k, v in frames.meta.items()
        if "drop" in k.lower() and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
    }
    if not dropped:
        return []
    listed = ", ".join(f"{k} = {v:,}" for k, v in sorted(dropped.items()))
    return [
        CaptureNote(
            "events_dropped",
            f"The profiler dropped events ({listed}): device and host time are undercounted where they fell.",
            "Capture fewer steps, or raise the profiler's buffer limits (e.g. `options={'host_tracer_level': 1}` "
            "records fewer host events).",
            {"stats": dropped},
        )
    ]


def _hosts_missing(frames: "TraceFrames", inputs: AnalysisInputs) -> list[CaptureNote]:
    expected = max((int(p.get("process_count") or 0) for p in inputs.processes), default=0)
    read = len(frames.hosts) if inputs.host is None else 0
    if expected <= 1 or read == 0 or read >= expected:
        return []
    seen = sorted({int(p["process_index"]) for p in inputs.processes if isinstance(p.get("process_index"), int)})
    missing = sorted(set(range(expected)) - set(seen))
    which = f" (no sidecar from process {', '.join(map(str, missing))})" if missing else ""
    return [
        CaptureNote(
            "hosts_missing",
            f"The run had {expected} processes but the trace holds {read} host file(s){which}: stragglers, "
            "collectives and step times describe only the hosts read.",
            "Copy every process's host file into the run folder (each process writes its own), or rerun if a "
            "process failed.",
            {"expected": expected, "read": read, "missing_processes": missing},
        )
    ]


def _short_window(frames: "TraceFrames", inputs: AnalysisInputs) -> list[CaptureNote]:
    windows = step_windows(frames, inputs.host, inputs.steps)
    steps = sorted({int(s) for s in windows[F.STEP]}) if len(windows) else []
    if steps == [-1]:
        return [
            CaptureNote(
                "short_window",
                "The capture marks no steps, so it is read as one: nothing per step, and no steady throughput.",
                "Mark each step with `jax.profiler.StepTraceAnnotation` (`jaxdiag.capture` and `@jaxdiag.step` do).",
                {"steps": 0},
            )
        ]
    if len(steps) < 2:
        return [
            CaptureNote(
                "short_window",
                f"The window holds {len(steps)} step(s): no step to compare it with and no steady throughput.",
                "Capture at least 3 steps after the compiles (e.g. `jaxdiag.capture(..., skip=2, take=5)`).",
                {"steps": len(steps)},
            )
        ]
    return []


def _span(steps: list[int]) -> str:
    if len(steps) > 1 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}"
    return ", ".join(map(str, steps))
