"""Work between steps: an evaluation, a checkpoint or a reshard run between two training steps.

``trace.steps`` cuts executions of programs that run in fewer than half of the steps
(before a step's mark) out of the step they preceded, leaving a hole in the tiling of
the steps. Each hole is a row here, with the programs that ran in it: it is no
step's time, so step statistics, steady throughput and the per-step op tables leave
it out. Programs other than the step's that run after the last step ends (a final
evaluation) are a row too, ``after step N``, as are those cut out of the first step
(work queued before the loop, run once its trace began), ``before step 0``. A finding says what it cost when that matters.

A row holds only other programs' executions: the step's program runs in the steps, even when a
host that ran ahead queued it long before the device ran it, and so does a program queued in at least
half of the steps (a learning rate computed eagerly), its runs queued before the trace began included. Where executions pair with their
dispatches (XLA:CPU run ids, TPU module spans), an execution belongs to the row between the steps
whose dispatches surround its own, and the rows are those the dispatches make, wherever the device ran
the work (it may run inside a later step's time, with no hole cut there); a row is narrowed to end and
begin clear of the step's executions.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.base import AnalysisInputs, Finding, severity_for
from jaxdiag.analyses.between_step_section import BetweenStepsRow, BetweenStepsSection, ProgramRuns, where
from jaxdiag.analyses.booking import UNBOOKED, dispatched_at, queued_after, step_program
from jaxdiag.analyses.steps_work import steps_work
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows, wall_outside_compiles
from jaxdiag.analyses.device_work import device_ops, executions_of, hosts_of, intervals_of, step_windows
from jaxdiag.trace import frames as F

_MODULE_FUNCTION = re.compile(r"^(?:jit|pjit|pmap)[_(](.*?)\)?$")


@dataclasses.dataclass(frozen=True, slots=True)
class BetweenRow:
    """One stretch of work between two steps on one host."""

    host: str
    after_step: int  # -1: before the first step
    before_step: int  # -1: after the last step
    start_ns: int
    end_ns: int
    device_busy_ms: float
    programs: tuple[tuple[str, int], ...]  # (function, executions), most run first
    compile_ms: float = 0.0  # the host's compile spans inside the stretch

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def describe(self) -> str:
        """``between steps 468 and 469: `accuracy` x2, 15.0 s (12.1 s of it compiling)``."""
        listed = ", ".join(f"`{name}` x{count}" for name, count in self.programs) or "no device program"
        compiling = f" ({_took(self.compile_ms)} of it compiling)" if self.compile_ms >= 0.1 * self.ms else ""
        return f"{self.where()}: {listed}, {_took(self.ms)}{compiling}"

    def where(self) -> str:
        """``between steps 468 and 469``, ``before step 0`` or ``after step 469``."""
        return where(self.after_step, self.before_step)

    def row(self) -> BetweenStepsRow:
        """This stretch's row of the report's ``between_steps`` section."""
        return BetweenStepsRow(
            self.host,
            self.after_step,
            self.before_step,
            self.start_ns,
            self.end_ns,
            round(self.ms, 4),
            round(self.device_busy_ms, 4),
            tuple(ProgramRuns(n, c) for n, c in self.programs),
            round(self.compile_ms, 4),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class BetweenSteps:
    """Every stretch of work between steps, by host then time."""

    rows: tuple[BetweenRow, ...]
    findings: tuple[Finding, ...] = ()

    @property
    def total_ms(self) -> float:
        return sum(r.ms for r in self.rows)

    def section(self) -> BetweenStepsSection:
        """The report's ``between_steps`` section."""
        return BetweenStepsSection(round(self.total_ms, 4), tuple(r.row() for r in self.rows))


def function_of(module: str) -> str:
    """``jit_train_step`` -> ``train_step``; other names unchanged."""
    m = _MODULE_FUNCTION.match(module)
    return m[1] if m else module


def analyze(inputs: AnalysisInputs) -> BetweenSteps:
    """Find the holes between steps and the programs that ran in them."""
    from jaxdiag.trace.executions import END_NS

    frames = inputs.frames
    rows: list[BetweenRow] = []
    steady_ns = 0
    step_module = step_program(frames)
    for host in hosts_of(frames, inputs.host):
        win = step_windows(frames, host)
        if win.empty or (win[F.STEP] < 0).all():
            continue
        lo, hi = win[F.START_NS].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
        steps = win[F.STEP].to_numpy(np.int64)
        compiles = compile_windows(compile_spans(frames, host)).get(host, iv.EMPTY)
        graded = step_windows(frames, host, inputs.steps)  # what the report grades against
        steady_ns = max(
            steady_ns,
            wall_outside_compiles(graded[F.START_NS].to_numpy(np.int64), graded["end_ns"].to_numpy(np.int64), compiles),
        )
        execs = executions_of(frames)
        execs = execs.loc[execs[F.HOST] == host]
        own = execs[F.HLO_MODULE].to_numpy(object) == step_module
        s_start, s_end = execs[F.START_NS].to_numpy(np.int64)[own], execs[END_NS].to_numpy(np.int64)[own]
        execs = execs.loc[~own]  # the step's program runs in the steps, never between them
        e_start, e_end = execs[F.START_NS].to_numpy(np.int64), execs[END_NS].to_numpy(np.int64)
        dispatch = dispatched_at(frames, host, execs)
        queued = queued_after(frames, host, dispatch)
        modules = execs[F.HLO_MODULE].to_numpy(object)
        queued[np.isin(modules, list(steps_work(frames, host, len(steps))))] = _IN_THE_STEPS
        spans = [(int(k), int(hi[k]), int(lo[k + 1])) for k in np.flatnonzero(lo[1:] > hi[:-1])]
        before = e_start < lo[0]
        if before.any() and frames.step_source == "module":  # the first step began at the host's first
            # event, so this is work cut out of it: queued before the loop, run once the trace began
            spans.insert(0, (-1, int(e_start[before].min()), int(lo[0])))
        after = np.where(queued != UNBOOKED, queued == steps[-1], e_start >= hi[-1])
        if after.any():
            spans.append((len(steps) - 1, int(hi[-1]), int(e_end[after].max())))
        by_dispatch = bool((queued != UNBOOKED).any())
        if by_dispatch:  # a row wherever work was dispatched between steps, whenever the device ran it
            spans = _dispatched_spans(spans, steps, queued, e_start, e_end)
        if not spans:
            continue
        ops = device_ops(frames, host)
        busy = iv.union(intervals_of(ops.loc[ops[F.HLO_MODULE].to_numpy(object) != step_module]))
        devices = execs[F.DEVICE].to_numpy(np.int64)
        for k, a, b in spans:
            after_step = int(steps[k]) if k >= 0 else -1
            before_step = int(steps[k + 1]) if k + 1 < len(steps) else -1
            if inputs.steps is not None and not {after_step, before_step} & set(inputs.steps):
                continue
            # Booked by the dispatch that queued it where executions pair with dispatches: a host that
            # runs ahead queues the work between two steps long before the device runs it.
            inside = np.where(queued != UNBOOKED, queued == after_step, (e_start < b) & (e_end > a))
            if not inside.any() and not by_dispatch:
                inside = (e_start < b) & (e_end > a)
            if not inside.any():
                continue
            a, b = _clear_of_the_steps(a, b, int(e_start[inside].min()), int(e_end[inside].max()), s_start, s_end)
            per_device: dict[tuple[str, int], int] = {}  # TPU module spans and GPU runs are per device
            for module, device in zip(modules[inside], devices[inside].tolist()):
                key = (function_of(str(module)), int(device))
                per_device[key] = per_device.get(key, 0) + 1
            counts: dict[str, int] = {}
            for (name, _device), n in per_device.items():
                counts[name] = max(counts.get(name, 0), n)
            programs = tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
            busy_ms = iv.covered_in_windows(busy, np.array([a]), np.array([b]))[0] / 1e6
            compile_ms = iv.covered_in_windows(compiles, np.array([a]), np.array([b]))[0] / 1e6
            rows.append(BetweenRow(host, after_step, before_step, a, b, float(busy_ms), programs, float(compile_ms)))
    result = BetweenSteps(tuple(rows))
    return dataclasses.replace(result, findings=_findings(result, inputs, steady_ns / 1e6))


def _dispatched_spans(
    spans: list[tuple[int, int, int]],
    steps: np.ndarray,
    queued_after: np.ndarray,
    e_start: np.ndarray,
    e_end: np.ndarray,
) -> list[tuple[int, int, int]]:
    """The stretches between steps where executions are booked by dispatch: one for each step (by position
    in ``steps``; -1 before the first) after which other programs' work was dispatched, and each gap of
    ``spans`` (cut by time) that holds unbooked work. A gap that holds the row's work is its stretch (as
    without dispatches); otherwise the stretch is that work's own, wherever the device ran it."""
    position = {int(s): k for k, s in enumerate(steps.tolist())}
    gaps = {k: (a, b) for k, a, b in spans}
    unbooked = queued_after == UNBOOKED
    out: dict[int, tuple[int, int]] = {}
    for k, (a, b) in gaps.items():
        if (unbooked & (e_start < b) & (e_end > a)).any():
            out[k] = (a, b)
    for step in set(queued_after[queued_after >= -1].tolist()):
        k = position.get(int(step), -1)
        if k < 0 and step != -1:  # a step left out of the windows
            continue
        first, last = int(e_start[queued_after == step].min()), int(e_end[queued_after == step].max())
        a, b = gaps.get(k, (first, last))
        out[k] = (a, b) if a < last and b > first else (first, last)
    return [(k, a, b) for k, (a, b) in sorted(out.items())]


#: Of a program that is the steps' own work (``steps_work``), never between them.
_IN_THE_STEPS = -3


def _clear_of_the_steps(
    a: int, b: int, first: int, last: int, s_start: np.ndarray, s_end: np.ndarray
) -> tuple[int, int]:
    """The stretch ``[a, b)`` between two steps, narrowed so that it holds no execution of the step's
    program (one queued earlier that the device ran late, or one queued later that it ran early)
    but still holds the work between the steps, ``[first, last)``."""
    earlier = s_end[(s_start < first) & (s_end > a)]
    if len(earlier):
        a = max(a, int(earlier.max()))
    later = s_start[(s_start >= last) & (s_start < b)]
    if len(later):
        b = min(b, int(later.min()))
    return min(a, first), max(b, last)


def _took(ms: float) -> str:
    """``15.0 s`` or ``250.0 ms``."""
    return f"{ms / 1e3:.1f} s" if ms >= 1000 else f"{ms:.1f} ms"


def _findings(r: BetweenSteps, inputs: AnalysisInputs, steady_ms: float) -> tuple[Finding, ...]:
    """One finding for the work between steps and after the last; setup before the first step
    (which may hold the first compiles) is a row, not a cost of the loop, and the message says so.
    Its share is of the steps' wall time outside compiles, the total the report grades it against.

    Where compiling is most of it (an evaluation's first run compiles its programs), the advice says
    so: running the work less often does not shorten a compile, and a compile paid once is not paid again.
    """
    rows = [row for row in r.rows if row.after_step >= 0]
    total = sum(row.ms for row in rows)
    if not rows or total < inputs.thresholds.min_finding_ms:
        return ()
    largest = sorted(rows, key=lambda row: -row.ms)
    listed = "; ".join(row.describe() for row in largest[:3])
    more = f"; and {len(largest) - 3} more" if len(largest) > 3 else ""
    names = sorted({n for row in rows for n, _ in row.programs})
    setup = sum(row.ms for row in r.rows if row.after_step < 0)
    left_out = (
        f" The {setup:.1f} ms before step 0 (work queued before the loop) is not counted here." if setup > 0 else ""
    )
    compiling = sum(row.compile_ms for row in rows)
    work = (
        "This is the run's time spent on "
        + (", ".join(f"`{n}`" for n in names) or "other work")
        + " between training steps (evaluation, checkpointing, a reshard)"
    )
    rest = "If the run's wall time matters, run it less often or on fewer batches; it does not slow the training step itself."
    if compiling >= 0.5 * total:
        compiled_in = [row for row in rows if row.compile_ms >= 0.1 * row.ms]
        once = (
            f"all of it {compiled_in[0].where()}, paid once while the shapes stay the same"
            if len(compiled_in) == 1
            else f"in {len(compiled_in)} of the {len(rows)} stretches: it compiled again each time; the "
            "recompile findings say what compiled"
        )
        suggestion = (
            f"Most of it, {_took(compiling)}, was compiling ({once}): running the work less often does not "
            "shorten that. Where the work is eager jnp code (a program per operation, named after it), one "
            "`jax.jit` function around it compiles one program per input shape instead. "
            f"{work}: {_took(total - compiling)} besides compiling. {rest}"
        )
    else:
        suggestion = f"{work}. {rest}"
    return (
        Finding(
            kind="between_steps",
            severity=severity_for(total, steady_ms, inputs.thresholds),
            time_lost_ms=total,
            message=(
                f"Work between steps took {total:.1f} ms, outside every "
                f"step: {listed}{more}. It is left out of the step figures and steady throughput.{left_out}"
            ),
            suggestion=suggestion,
            evidence={
                "rows": [dataclasses.asdict(row.row()) for row in rows[:20]],
                "total_ms": round(total, 3),
                "compile_ms": round(compiling, 3),
                "before_step_0_ms": round(setup, 3),
            },
        ),
    )
