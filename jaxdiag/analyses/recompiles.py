"""Compiles on the timeline, joined to the compile log's reasons, and the recompiles among them.

Each compile comes from ``compile_spans`` (function, wall span, the step it
stalled). A compile is a *recompile* when the compile log says so
(``compile_index > 1``) or, without a log, when the same function already ran
or compiled earlier in the capture: its program existed, so this compile
replaced or added to it. Compiles the trace does not name (``UNNAMED``) are never
known to be of one function, so none of them is a recompile by name.

The join with the log (records as ``CompileRecord.to_dict()``) matches by
function name (or the program's name the record read, as ``jax.pmap`` names every
program ``jit__fun``; the compile then takes the record's function name), then by time when ``frames.meta`` has the profile's start (the
log's ``time_unix`` and the trace run on different clocks; ``profile_start_time``
relates them), else by order: the last records of a function pair with its
compiles in the capture, as compiles before the capture (warm-up) come first.

Findings group the recompiles by what the user would change: one per function
(``train_step recompiled 2 times, at steps 6 and 9: 1,642 ms; causes ...``), and,
for JAX's own helpers that eager code compiles (records with
``origin="jax-internal"``), one per line of the user's code that called them,
since that line is what to change. ``time_lost_ms`` of a finding is what its
compiles cost the steps: the part of each compile inside a step during which the
device waited (``device_waiting``: idle, nothing in flight or queued). A compile that
ran while the device worked through executions the host had queued ahead cost nothing;
one outside every step (before step 0, between steps) belongs to the time around the
steps (``between_steps`` counts work there), so it is not counted again here.

A function whose recompiles cost the steps (next to) nothing (less than
``min_finding_ms``) is not a varying shape in the training loop: code that runs once,
an optimizer's init or an eager evaluation, compiles each new shape it meets once.
Its finding says so (``evidence.one_off``), is ``info``, and advises no buckets. So is,
without a compile log, a function whose compiles in steps all lie in the warm-up step (the
step that first compiled the training step's program): there a "recompile" is inferred from
the name alone, and an eager operation's first compile at another shape, made where
everything first runs and never after, is not a shape that varies in the loop.
So is a line of eager code whose JAX helpers the compile log shows each compiling for the first
time: paid once, as a jitted function's first compile (which has no finding). So is, with a
compile log, a function whose recompiles each came from a call site none of its
earlier compiles did (``evidence.other_caller``): an evaluation calling the training step's
function at its own size compiles that size once; that is no shape varying in the loop.
The findings are built in ``recompile_findings``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.recompile_section import RecompileRow
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.booking import compile_step
from jaxdiag.analyses.compile_spans import UNNAMED, CompileSpan, compile_spans, function_name
from jaxdiag.analyses.device_waiting import device_waiting
from jaxdiag.analyses.device_work import hosts_of, step_windows
from jaxdiag.analyses.recompile_findings import findings
from jaxdiag.config import Settings
from jaxdiag.recording.records import FIRST_COMPILE, unseen_cause
from jaxdiag.trace import frames as F

#: A log record and a timeline compile this far apart (after clock alignment) do not match.
MATCH_TOLERANCE_S = 5.0
_META_START = ("profile_start_time", "profile_start_ns", "profile_start_unix_ns")


@dataclasses.dataclass(frozen=True, slots=True)
class Compile:
    """One compile on the timeline, with what the compile log says about it.

    Attributes:
      function: function name (``train_step``).
      host: host it ran on.
      step: the step it stalled (-1 outside every step).
      compile_ms: wall span, tracing through backend compile.
      start_ns: start on the host clock.
      recompile: whether an earlier version of the function existed.
      cause: the log's explanation summary, ``FIRST_COMPILE`` for a logged first
        compile, or ``None`` when unknown.
      changes: the log's machine-readable changes (dicts), empty when unknown.
      logged: whether a compile-log record was joined to it.
      origin: the record's ``origin`` (``"jit"``, ``"watch"``, ``"jax-internal"``), ``None`` unlogged.
      call_site: the record's ``file:line`` of the user's call, ``None`` when unknown.
      device_wait_ms: the part of ``compile_ms`` the device waited for (``device_waiting``): idle,
        nothing in flight or queued. 0 for a compile that ran while the device worked through
        executions the host had queued ahead.
      place: where a compile outside every step lies: ``"before step N"``, ``"between steps"``,
        ``"after step N"``; ``""`` inside a step.
      step_wait_ms: the part of ``device_wait_ms`` inside the step windows, what the compile cost the
        steps: a compile that began in a step may run on past its end, into work between steps.
    """

    function: str
    host: str
    step: int
    compile_ms: float
    start_ns: int
    recompile: bool
    cause: str | None = None
    changes: tuple[Mapping[str, Any], ...] = ()
    logged: bool = False
    origin: str | None = None
    call_site: str | None = None
    device_wait_ms: float = 0.0
    place: str = ""
    step_wait_ms: float = 0.0

    def row(self) -> RecompileRow:
        """This compile's row of the report's ``recompiles`` section (times in ms to 3 decimals)."""
        return RecompileRow(
            function=self.function,
            step=None if self.step < 0 else self.step,
            compile_ms=round(self.compile_ms, 3),
            device_wait_ms=round(self.device_wait_ms, 3),
            recompile=self.recompile,
            cause=self.cause,
            logged=self.logged,
            origin=self.origin,
            call_site=self.call_site,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class RecompilesResult:
    """Every compile in the capture; findings for the recompiles."""

    compiles: tuple[Compile, ...]
    wall_ms: float
    findings: tuple[Finding, ...] = ()

    @property
    def recompiles(self) -> tuple[Compile, ...]:
        return tuple(c for c in self.compiles if c.recompile)

    def section(self) -> tuple[RecompileRow, ...]:
        """The report's ``recompiles`` section: a row per compile."""
        return tuple(c.row() for c in self.compiles)


def analyze(inputs: AnalysisInputs) -> RecompilesResult:
    """List the capture's compiles with their causes, and flag each recompile."""
    frames = inputs.frames
    windows = step_windows(frames, inputs.host, inputs.steps)
    wall_ns = 0
    compiles: list[Compile] = []
    for host in hosts_of(frames, inputs.host):
        win = windows.loc[windows[F.HOST] == host]
        wall_ns = max(wall_ns, int((win["end_ns"] - win[F.START_NS]).sum()))
        spans = compile_spans(frames, host)
        ran_before = _first_run(frames, host)
        records = _match(spans, inputs.compile_log, _profile_start_ns(frames.meta), inputs.thresholds)
        seen: set[str] = set()
        waiting = _device_waiting(inputs, host, spans, win)
        lo, hi = win[F.START_NS].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
        waiting_in_steps = iv.intersect(waiting, np.stack([lo, hi], axis=1))
        steps_here = win[F.STEP].to_numpy(np.int64)
        for span, rec in zip(spans, records):
            span = dataclasses.replace(span, step=compile_step(frames, host, span))
            wall = np.array([[span.start_ns, span.end_ns]], dtype=np.int64)
            waited = iv.intersection_length(wall, waiting)
            compile = _compile(span, rec, seen, ran_before)
            place = "" if span.step >= 0 else _place(span.start_ns, lo, hi, steps_here)
            compiles.append(
                dataclasses.replace(
                    compile,
                    device_wait_ms=waited / 1e6,
                    place=place,
                    step_wait_ms=iv.intersection_length(wall, waiting_in_steps) / 1e6,
                )
            )
            seen.add(span.function)
    if inputs.steps is not None:
        wanted = set(inputs.steps)
        compiles = [c for c in compiles if c.step in wanted]
    result = RecompilesResult(tuple(compiles), wall_ns / 1e6)
    return dataclasses.replace(result, findings=findings(result, inputs))


def _device_waiting(inputs: AnalysisInputs, host: str, spans: Sequence[CompileSpan], win: Any) -> np.ndarray:
    """When ``host``'s devices waited on it (``device_waiting``), over its compiles and steps."""
    if not spans:
        return iv.EMPTY
    start = min([s.start_ns for s in spans] + [int(x) for x in win[F.START_NS].to_numpy(np.int64)[:1]])
    end = max([s.end_ns for s in spans] + [int(x) for x in win["end_ns"].to_numpy(np.int64)[-1:]])
    return device_waiting(inputs.frames, host, start, end, int(inputs.thresholds.host_wait_min_us * 1000))


def _place(start_ns: int, lo: np.ndarray, hi: np.ndarray, steps: np.ndarray) -> str:
    """Where a compile outside every step window lies, by the windows' order."""
    if not len(lo):
        return "outside the captured steps"
    if start_ns < int(lo.min()):
        return f"before step {int(steps[int(np.argmin(lo))])}"
    if start_ns >= int(hi.max()):
        return f"after step {int(steps[int(np.argmax(hi))])}"
    return "between steps"


def _compile(span: CompileSpan, rec: Mapping[str, Any] | None, seen: set[str], ran_before: dict[str, int]) -> Compile:
    explanation = (rec or {}).get("explanation") or {}
    if rec is not None and rec.get("compile_index") is not None:
        # A first compile seen while JAX's cache already held a trace of the function (recording began
        # after its first call, as a capture window's does) is a recompile all the same.
        recompile = int(rec["compile_index"]) > 1 or bool(rec.get("earlier_unseen"))
    else:
        # Two compiles the trace does not name are not known to be of one function.
        first_run = ran_before.get(span.module or f"jit_{span.function}")
        recompile = (span.function != UNNAMED and span.function in seen) or (
            first_run is not None and first_run < span.start_ns
        )
    cause = explanation.get("summary") or None
    if cause is None and rec is not None and rec.get("compile_index") is not None and int(rec["compile_index"]) <= 1:
        # A first compile that recording saw after the function had compiled unseen is a recompile of unknown cause.
        unseen = rec.get("earlier_unseen")
        cause = unseen_cause(unseen) if isinstance(unseen, int) and unseen > 0 else FIRST_COMPILE
    if cause is not None and rec is not None and rec.get("persistent_cache_hit") is True:
        cause += " (loaded from the persistent compilation cache)"
    # Joined through its program's name (``jax.pmap``'s ``jit__fun``): the user's function names it.
    function = str(rec["function"]) if rec is not None and _key(span.function) != _key(str(rec["function"])) else None
    return Compile(
        function=function or span.function,
        host=span.host,
        step=span.step,
        compile_ms=span.dur_ms,
        start_ns=span.start_ns,
        recompile=recompile,
        cause=cause,
        changes=tuple(explanation.get("changes") or ()),
        logged=rec is not None,
        origin=None if rec is None else (rec.get("origin") or None),
        call_site=None if rec is None else (rec.get("call_site") or None),
    )


def _first_run(frames: Any, host: str) -> dict[str, int]:
    """Module -> start of its first device op on ``host``."""
    import pandas as pd

    ev = frames.events
    keep = ((ev[F.CATEGORY] == "device") & (ev[F.HOST] == host) & (ev[F.HLO_MODULE] != "")).to_numpy()
    rows = np.flatnonzero(keep)
    if not len(rows):
        return {}
    module, modules = pd.factorize(ev[F.HLO_MODULE].take(rows), sort=False)  # in order of first appearance
    starts = ev[F.START_NS].to_numpy(np.int64)[rows]
    first = np.full(len(modules), np.iinfo(np.int64).max, dtype=np.int64)
    named = module >= 0
    np.minimum.at(first, module[named], starts[named])
    return {str(m): int(t) for m, t in zip(modules.tolist(), first.tolist())}


def _profile_start_ns(meta: Mapping[str, Any]) -> int | None:
    for key in _META_START:
        value = meta.get(key)
        if isinstance(value, (int, float, np.integer)) and value > 0:
            return int(value)
    return None


def _key(name: str) -> str:
    return re.sub(r"\W", "_", function_name(str(name)))


def _match(
    spans: Sequence[CompileSpan], log: Sequence[Mapping[str, Any]], start_ns: int | None, settings: Settings
) -> list[Mapping[str, Any] | None]:
    """For each span, its compile record, or ``None`` (matched in time within ``log_match_tolerance_s``)."""
    tolerance_ns = settings.log_match_tolerance_s * 1e9
    out: list[Mapping[str, Any] | None] = [None] * len(spans)
    by_fn: dict[str, list[Mapping[str, Any]]] = {}
    for rec in log:
        if rec.get("compiled", True) and rec.get("function") and not rec.get("before_capture"):
            for name in _trace_names(rec, start_ns is not None):
                by_fn.setdefault(name, []).append(rec)
    for fn, recs in by_fn.items():
        recs.sort(key=lambda r: (float(r.get("time_unix", 0.0)), int(r.get("compile_index", 0))))
        idx = [i for i, s in enumerate(spans) if _key(s.function) == fn]
        if not idx:
            continue
        if start_ns is not None:
            taken: set[int] = set()
            for i in idx:
                j = _nearest(recs, spans[i], start_ns, taken, tolerance_ns)
                if j is not None:
                    taken.add(j)
                    out[i] = recs[j]
        else:
            for i, rec in zip(idx[::-1], recs[::-1]):
                out[i] = rec
    return out


def _trace_names(rec: Mapping[str, Any], by_time: bool) -> list[str]:
    """The names a record's compile may have on the timeline: its function's, and, joined by time, its
    program's where the record read it and it differs (``jax.pmap`` runs a jitted wrapper, ``jit__fun``,
    whatever it maps: by order alone, the compiles of two mapped functions would pair with each other's)."""
    names = [_key(rec["function"])]
    if not by_time:
        return names
    facts = rec.get("sharding")
    module = facts.get("module") if isinstance(facts, Mapping) else None
    if isinstance(module, str) and module and _key(module) not in names:
        names.append(_key(module))
    return names


def _nearest(
    recs: Sequence[Mapping[str, Any]], span: CompileSpan, start_ns: int, taken: set[int], tolerance_ns: float
) -> int | None:
    """The untaken record whose start lies nearest the span, within ``tolerance_ns``."""
    best, best_d = None, tolerance_ns
    for j, rec in enumerate(recs):
        if j in taken:
            continue
        t = float(rec.get("time_unix", 0.0)) * 1e9 - start_ns
        d = 0.0 if span.start_ns <= t <= span.end_ns else min(abs(t - span.start_ns), abs(t - span.end_ns))
        if d < best_d:
            best, best_d = j, d
    return best
