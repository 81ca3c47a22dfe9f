"""``diff``: two reports side by side: step figures, what got slower or faster, new recompiles, host waits.

Per-op and per-module figures are device milliseconds *per step* (the report's
totals over its step count), so captures of different lengths compare. What the
report breaks device time down by decides what can be named: modules and ops from
its ``device_time`` section when it has one, small ops (``small_ops.top``) and
collective kinds (``collectives.by_kind``) always. Ops and modules are matched by
their names without XLA's numbering (``fusion.4`` and ``fusion.5`` are both
``fusion.*``), which changes from one compile to the next; ops that share such a
name are summed.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections import Counter
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from jaxdiag.checks import stats
from jaxdiag.checks.baseline import Baseline, Recompile, baseline_from_report, module_device_ms, steady_steps

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.small_op_section import OpTotal
    from jaxdiag.analyses.step_section import StepFigures
    from jaxdiag.reporting.model import Report

#: Per-step figures shown side by side.
STEP_FIGURES = ("wall_ms", "device_busy_ms", "host_wait_ms", "compile_ms", "exposed_collective_ms")
#: A change smaller than this (ms per step) or than ``MIN_RELATIVE`` of the old figure is noise.
MIN_DELTA_MS = 0.01
MIN_RELATIVE = 0.05


@dataclasses.dataclass(frozen=True, slots=True)
class FigureChange:
    """One summary figure in both reports."""

    name: str
    a: float | None
    b: float | None
    unit: str

    @property
    def change(self) -> float | None:
        """Relative change from ``a`` to ``b``, ``None`` when either is unknown or ``a`` is 0."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return (self.b - self.a) / abs(self.a)


@dataclasses.dataclass(frozen=True, slots=True)
class StepPair:
    """One step number's figures in each report (``None`` where a report lacks the step)."""

    step: int
    a: Mapping[str, float | None] | None
    b: Mapping[str, float | None] | None


@dataclasses.dataclass(frozen=True, slots=True)
class TimeChange:
    """Device (or host-wait) time of one named thing, in ms per step, in both reports."""

    kind: str  # "module", "op", "small_op", "collective", "host_wait"
    name: str
    a_ms: float
    b_ms: float

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms


@dataclasses.dataclass(frozen=True)
class ReportDiff:
    """What changed from report ``a`` to report ``b``.

    Attributes:
      a_source, b_source: the run folders compared.
      summary: steady-state figures of each (median step time, tokens/s, shares, compiles).
      steps: per-step figures, paired by step number.
      slower, faster: modules and ops whose time per step changed, largest change first.
      host_waits: host-wait causes whose time per step changed, largest change first.
      new_recompiles: recompiles in ``b`` with no like (same function and cause) in ``a``.
      gone_recompiles: recompiles in ``a`` with no like in ``b``.
      notes: what could not be compared.
    """

    a_source: str
    b_source: str
    summary: tuple[FigureChange, ...]
    steps: tuple[StepPair, ...]
    slower: tuple[TimeChange, ...]
    faster: tuple[TimeChange, ...]
    host_waits: tuple[TimeChange, ...]
    new_recompiles: tuple[Recompile, ...]
    gone_recompiles: tuple[Recompile, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        def change(c: TimeChange) -> dict[str, Any]:
            return {
                "kind": c.kind,
                "name": c.name,
                "a_ms_per_step": c.a_ms,
                "b_ms_per_step": c.b_ms,
                "delta_ms_per_step": round(c.delta_ms, 4),
            }

        return {
            "diff_version": "1.0",
            "a": self.a_source,
            "b": self.b_source,
            "summary": [
                {
                    "name": f.name,
                    "a": f.a,
                    "b": f.b,
                    "unit": f.unit,
                    "change": None if f.change is None else round(f.change, 4),
                }
                for f in self.summary
            ],
            "steps": [
                {"step": p.step, "a": None if p.a is None else dict(p.a), "b": None if p.b is None else dict(p.b)}
                for p in self.steps
            ],
            "slower": [change(c) for c in self.slower],
            "faster": [change(c) for c in self.faster],
            "host_waits": [change(c) for c in self.host_waits],
            "new_recompiles": [dataclasses.asdict(r) for r in self.new_recompiles],
            "gone_recompiles": [dataclasses.asdict(r) for r in self.gone_recompiles],
            "notes": list(self.notes),
        }


def diff(a: "Report", b: "Report") -> ReportDiff:
    """Compare report ``a`` (before) with report ``b`` (after)."""
    fa, fb = baseline_from_report(a), baseline_from_report(b)
    times_a, times_b = _device_times(a), _device_times(b)
    changes = [
        TimeChange(kind, name, times_a.get((kind, name), 0.0), times_b.get((kind, name), 0.0))
        for kind, name in dict.fromkeys([*times_a, *times_b])
    ]
    notes = []
    if not (module_device_ms(a) or module_device_ms(b)):
        notes.append("per-module device time is not in these reports; only small ops and collectives are named")
    new, gone = _recompile_changes(fa.steady_recompiles, fb.steady_recompiles)
    return ReportDiff(
        a_source=str(a.source.get("run_dir", "")),
        b_source=str(b.source.get("run_dir", "")),
        summary=tuple(_summary(a, b, fa, fb)),
        steps=tuple(_steps(a.steps, b.steps)),
        slower=tuple(_ranked(c for c in changes if c.delta_ms > 0 and _matters(c))),
        faster=tuple(_ranked(c for c in changes if c.delta_ms < 0 and _matters(c))),
        host_waits=tuple(_ranked(c for c in _host_waits(a, b) if _matters(c))),
        new_recompiles=new,
        gone_recompiles=gone,
        notes=tuple(notes),
    )


def _summary(a: "Report", b: "Report", fa: Baseline, fb: Baseline) -> list[FigureChange]:
    def busy(r: "Report") -> float | None:
        vals = [s.device_busy_ms for s in steady_steps(r) if math.isfinite(s.device_busy_ms)]
        return round(statistics.median(vals), 4) if vals else None

    unit = fb.throughput_unit
    return [
        FigureChange("steps", float(fa.steps), float(fb.steps), "count"),
        FigureChange("steady steps", float(fa.steady_steps), float(fb.steady_steps), "count"),
        FigureChange("median steady step", fa.step_time_ms.median, fb.step_time_ms.median, "ms"),
        FigureChange("mean steady step", _mean(fa), _mean(fb), "ms"),
        FigureChange("p90 steady step", _p90(fa), _p90(fb), "ms"),
        FigureChange("step time IQR", fa.step_time_ms.iqr, fb.step_time_ms.iqr, "ms"),
        FigureChange("steady steps/s", _rate(fa, "steps"), _rate(fb, "steps"), "steps/s"),
        FigureChange(f"steady {unit}/s", _rate(fa, unit), _rate(fb, unit), f"{unit}/s"),
        FigureChange("median device busy", busy(a), busy(b), "ms"),
        FigureChange("median tokens/s", fa.tokens_per_s.median, fb.tokens_per_s.median, "tokens/s"),
        FigureChange("compiles", float(fa.compiles), float(fb.compiles), "count"),
        FigureChange(
            "recompiles after warm-up", float(len(fa.steady_recompiles)), float(len(fb.steady_recompiles)), "count"
        ),
        FigureChange("host-wait share", fa.host_wait_share, fb.host_wait_share, "share"),
        FigureChange("exposed-collective share", fa.exposed_collective_share, fb.exposed_collective_share, "share"),
        FigureChange("small ops per step", fa.small_op_count, fb.small_op_count, "count"),
        FigureChange("small-op share", fa.small_op_share, fb.small_op_share, "share"),
    ]


def _mean(f: Baseline) -> float | None:
    m = stats.mean(f.steady_wall_ms)
    return None if m is None else round(m.value, 4)


def _p90(f: Baseline) -> float | None:
    q = stats.quantile(f.steady_wall_ms, 0.9) if len(f.steady_wall_ms) >= 10 else None
    return None if q is None else round(q, 4)


def _rate(f: Baseline, what: str) -> float | None:
    """Steady steps/s (``what="steps"``) or tokens (samples)/s over the steps' periods."""
    if what == "steps":
        r = stats.rate([1.0] * len(f.steady_period_ms), f.steady_period_ms)
    else:
        known = [(t, p) for t, p in zip(f.steady_tokens, f.steady_period_ms) if t is not None]
        r = stats.rate([t for t, _ in known], [p for _, p in known])
    return None if r is None else round(r.per_s, 4)


def _steps(a: Sequence["StepFigures"], b: Sequence["StepFigures"]) -> list[StepPair]:
    def figures(s: "StepFigures | None") -> dict[str, float | None] | None:
        if s is None:
            return None
        values = {k: getattr(s, k) for k in STEP_FIGURES}
        return {k: (float(v) if v is not None and math.isfinite(v) else None) for k, v in values.items()}

    by_a = {s.step: s for s in a}
    by_b = {s.step: s for s in b}
    return [StepPair(n, figures(by_a.get(n)), figures(by_b.get(n))) for n in sorted({*by_a, *by_b})]


def _device_times(r: "Report") -> dict[tuple[str, str], float]:
    """(kind, name) -> device ms per step, from every breakdown the report has."""
    n = max(len(r.steps), 1)
    out: dict[tuple[str, str], float] = {}

    def add(key: tuple[str, str], ms: float) -> None:
        out[key] = round(out.get(key, 0.0) + ms, 4)

    for name, ms in module_device_ms(r).items():
        add(("module", stable_name(name)), ms)
    for op in r.device_time.top_ops:
        add(("op", _op_name(op)), _per_step(op.total_ms, n))
    for small in r.small_ops.top:
        add(("small_op", _op_name(small)), _per_step(small.total_ms, n))
    for kind in r.collectives.by_kind:
        add(("collective", kind.kind), _per_step(kind.total_ms, n))
    return out


#: XLA's numbering: ``.4`` in ``fusion.4``, ``.1`` twice in ``add.1.1``; not a version-like ``v1.5``.
_NUMBERING = re.compile(r"(?<=[A-Za-z_\-])(?:\.\d+)+(?=$|[.\s/)])")


def stable_name(name: str) -> str:
    """``name`` without XLA's instruction numbering, which changes between compiles: ``fusion.4`` -> ``fusion.*``."""
    return _NUMBERING.sub(".*", str(name).lstrip("%"))


def _host_waits(a: "Report", b: "Report") -> list[TimeChange]:
    def by_cause(r: "Report") -> dict[str, float]:
        n = max(len(r.steps), 1)
        out: dict[str, float] = {}
        for row in r.host_waits.by_cause:
            out[row.cause] = out.get(row.cause, 0.0) + _per_step(row.ms, n)
        return out

    wa, wb = by_cause(a), by_cause(b)
    return [TimeChange("host_wait", c, wa.get(c, 0.0), wb.get(c, 0.0)) for c in dict.fromkeys([*wa, *wb])]


def _recompile_changes(
    a: Sequence[Recompile], b: Sequence[Recompile]
) -> tuple[tuple[Recompile, ...], tuple[Recompile, ...]]:
    """Recompiles only in ``b`` and only in ``a``, matched by function and cause."""

    def key(r: Recompile) -> tuple[str, str | None]:
        return r.function, r.cause

    left_a, left_b = Counter(map(key, a)), Counter(map(key, b))
    new, gone = [], []
    for r in b:
        if left_a[key(r)] > 0:
            left_a[key(r)] -= 1
        else:
            new.append(r)
    for r in a:
        if left_b[key(r)] > 0:
            left_b[key(r)] -= 1
        else:
            gone.append(r)
    return tuple(new), tuple(gone)


def _op_name(op: "OpTotal") -> str:
    name = stable_name(op.name)
    return f"{name} ({stable_name(op.module)})" if op.module else name


def _per_step(total: Any, n: int) -> float:
    return round(float(total) / n, 4) if isinstance(total, (int, float)) and total == total else 0.0


def _matters(c: TimeChange) -> bool:
    return abs(c.delta_ms) >= MIN_DELTA_MS and abs(c.delta_ms) >= MIN_RELATIVE * abs(c.a_ms)


def _ranked(changes: Any) -> list[TimeChange]:
    return sorted(changes, key=lambda c: (-abs(c.delta_ms), c.kind, c.name))
