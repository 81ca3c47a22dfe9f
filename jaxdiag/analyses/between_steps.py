"""Work between steps: an evaluation, a checkpoint or a reshard run between two training steps.

``trace.steps`` cuts executions of programs that run in fewer than half of the steps
(before a step's mark) out of the step they preceded, leaving a hole in the tiling of
the steps. Each hole is a row here, with the programs that ran in it: it is no
step's time, so step statistics, steady throughput and the per-step op tables leave
it out. Programs other than the step's that run after the last step ends (a final
evaluation) are a row too, ``after step N``, as are those cut out of the first step
(work queued before the loop, run once its trace began), ``before step 0``. A finding says what it cost when that matters.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.base import AnalysisInputs, Finding, severity_for
from jaxdiag.analyses.booking import step_program
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

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def describe(self) -> str:
        """``between steps 468 and 469: `accuracy` x2, 15.0 s``."""
        listed = ", ".join(f"`{name}` x{count}" for name, count in self.programs) or "no device program"
        took = f"{self.ms / 1e3:.1f} s" if self.ms >= 1000 else f"{self.ms:.1f} ms"
        return f"{self.where()}: {listed}, {took}"

    def where(self) -> str:
        """``between steps 468 and 469``, ``before step 0`` or ``after step 469``."""
        if self.after_step < 0:
            return f"before step {self.before_step}"
        if self.before_step < 0:
            return f"after step {self.after_step}"
        return f"between steps {self.after_step} and {self.before_step}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "after_step": self.after_step,
            "before_step": self.before_step,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "ms": round(self.ms, 4),
            "device_busy_ms": round(self.device_busy_ms, 4),
            "programs": [{"function": n, "executions": c} for n, c in self.programs],
        }


@dataclasses.dataclass(frozen=True, slots=True)
class BetweenSteps:
    """Every stretch of work between steps, by host then time."""

    rows: tuple[BetweenRow, ...]
    findings: tuple[Finding, ...] = ()

    @property
    def total_ms(self) -> float:
        return sum(r.ms for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"total_ms": round(self.total_ms, 4), "rows": [r.to_dict() for r in self.rows]}


def function_of(module: str) -> str:
    """``jit_train_step`` -> ``train_step``; other names unchanged."""
    m = _MODULE_FUNCTION.match(module)
    return m[1] if m else module


def analyze(inputs: AnalysisInputs) -> BetweenSteps:
    """Find the holes between steps and the programs that ran in them."""
    frames = inputs.frames
    rows: list[BetweenRow] = []
    wall_ns = 0
    for host in hosts_of(frames, inputs.host):
        win = step_windows(frames, host)
        if win.empty or (win[F.STEP] < 0).all():
            continue
        lo, hi = win[F.START_NS].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
        steps = win[F.STEP].to_numpy(np.int64)
        wall_ns = max(wall_ns, int(hi.max() - lo.min()))
        from jaxdiag.trace.executions import END_NS

        execs = executions_of(frames)
        execs = execs.loc[execs[F.HOST] == host]
        e_start, e_end = execs[F.START_NS].to_numpy(np.int64), execs[END_NS].to_numpy(np.int64)
        spans = [(int(k), int(hi[k]), int(lo[k + 1])) for k in np.flatnonzero(lo[1:] > hi[:-1])]
        before = (e_start < lo[0]) & (execs[F.HLO_MODULE].to_numpy(object) != step_program(frames))
        if before.any() and frames.step_source == "module":  # the first step began at the host's first
            # event, so this is work cut out of it: queued before the loop, run once the trace began
            spans.insert(0, (-1, int(e_start[before].min()), int(lo[0])))
        after = (e_start >= hi[-1]) & (execs[F.HLO_MODULE].to_numpy(object) != step_program(frames))
        if after.any():
            spans.append((len(steps) - 1, int(hi[-1]), int(e_end[after].max())))
        if not spans:
            continue
        wall_ns = max(wall_ns, max(b for _k, _a, b in spans) - int(lo.min()))
        busy = iv.union(intervals_of(device_ops(frames, host)))
        devices = execs[F.DEVICE].to_numpy(np.int64)
        for k, a, b in spans:
            after_step = int(steps[k]) if k >= 0 else -1
            before_step = int(steps[k + 1]) if k + 1 < len(steps) else -1
            if inputs.steps is not None and not {after_step, before_step} & set(inputs.steps):
                continue
            inside = (e_start < b) & (e_end > a)
            per_device: dict[tuple[str, int], int] = {}  # TPU module spans and GPU runs are per device
            for module, device in zip(execs[F.HLO_MODULE].to_numpy(object)[inside], devices[inside].tolist()):
                key = (function_of(str(module)), int(device))
                per_device[key] = per_device.get(key, 0) + 1
            counts: dict[str, int] = {}
            for (name, _device), n in per_device.items():
                counts[name] = max(counts.get(name, 0), n)
            programs = tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
            busy_ms = iv.covered_in_windows(busy, np.array([a]), np.array([b]))[0] / 1e6
            rows.append(BetweenRow(host, after_step, before_step, a, b, float(busy_ms), programs))
    result = BetweenSteps(tuple(rows))
    return dataclasses.replace(result, findings=_findings(result, inputs, wall_ns / 1e6))


def _findings(r: BetweenSteps, inputs: AnalysisInputs, wall_ms: float) -> tuple[Finding, ...]:
    """One finding for the work between steps and after the last; setup before the first step
    (which may hold the first compiles) is a row, not a cost of the loop."""
    rows = [row for row in r.rows if row.after_step >= 0]
    total = sum(row.ms for row in rows)
    if not rows or total < inputs.thresholds.min_finding_ms:
        return ()
    largest = sorted(rows, key=lambda row: -row.ms)
    listed = "; ".join(row.describe() for row in largest[:3])
    more = f"; and {len(largest) - 3} more" if len(largest) > 3 else ""
    names = sorted({n for row in rows for n, _ in row.programs})
    return (
        Finding(
            kind="between_steps",
            severity=severity_for(total, wall_ms),
            time_lost_ms=total,
            message=(
                f"Work between steps took {total:.1f} ms ({total / wall_ms * 100 if wall_ms > 0 else 0:.0f}% of the "
                f"run), outside every step: {listed}{more}. It is left out of the step figures and steady throughput."
            ),
            suggestion=(
                "This is the run's time spent on "
                + (", ".join(f"`{n}`" for n in names) or "other work")
                + " between training steps (evaluation, checkpointing, a reshard). If the run's wall time matters, "
                "run it less often or on fewer batches; it does not slow the training step itself."
            ),
            evidence={"rows": [row.to_dict() for row in rows[:20]], "total_ms": round(total, 3)},
        ),
    )
