"""Compiles on the timeline, joined to the compile log's reasons, and the recompiles among them.

Each compile comes from ``compile_spans`` (function, wall span, the step it
stalled). A compile is a *recompile* when the compile log says so
(``compile_index > 1``) or, without a log, when the same function already ran
or compiled earlier in the capture: its program existed, so this compile
replaced or added to it.

The join with the log (records as ``CompileRecord.to_dict()``) matches by
function name, then by time when ``frames.meta`` has the profile's start (the
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
Its finding says so (``evidence.one_off``), is ``info``, and advises no buckets.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.base import AnalysisInputs, Finding, Severity, severity_for
from jaxdiag.analyses.booking import compile_step
from jaxdiag.analyses.compile_spans import CompileSpan, compile_spans, function_name
from jaxdiag.analyses.device_waiting import device_waiting
from jaxdiag.analyses.device_work import hosts_of, step_windows
from jaxdiag.analyses.step_pattern import describe_steps, fmt_ms, join
from jaxdiag.config import current
from jaxdiag.trace import frames as F

#: ``origin`` of compile records of JAX's own jitted helpers (``recording.records.JAX_INTERNAL_ORIGIN``).
JAX_INTERNAL = "jax-internal"
#: ``cause`` of a compile the log records as the function's first.
FIRST_COMPILE = "first compile"

#: A log record and a timeline compile this far apart (after clock alignment) do not match.
MATCH_TOLERANCE_S = 5.0
_META_START = ("profile_start_time", "profile_start_ns", "profile_start_unix_ns")

_ADVICE = {
    "shape": "Pad the varying axis to a few fixed sizes (buckets) so that each size compiles once{detail}.",
    "weak_type": (
        "Pass consistently typed values: a Python scalar (weakly typed) and a jnp array of the same "
        "dtype compile separately; convert once, e.g. `jnp.float32(x)`, or make it a static argument."
    ),
    "dtype": "Cast the argument to one dtype before the call (e.g. `x.astype(jnp.float32)`).",
    "static": (
        "A static argument changed value; each value compiles anew. Pass it as a traced array "
        "instead, or limit it to a few values."
    ),
    "sharding": "Give the argument the same sharding every call (`jax.device_put(x, sharding)` with one `NamedSharding`).",
    "memory_kind": "Keep the argument in the same memory kind (device vs pinned host) every call.",
    "structure": "Keep the argument's pytree structure fixed (same keys, no `None` that comes and goes).",
    "function": "A new function object (a closure or lambda made per call) is a new cache entry; create the jitted function once, outside the loop.",
    "context": "A jax config option or mesh context changed between calls; set it once, before the first call.",
}
_EAGER = (
    "Eager jnp code outside jit compiles one of JAX's helpers for each new shape and dtype it sees: "
    "make the inputs with NumPy and convert them once (`jnp.asarray` of a fixed shape), move the "
    "code inside the jitted step, or keep its shapes and dtypes fixed."
)
_GENERIC = (
    "Find what changed between calls: wrap the function with `jaxdiag.jit` (or set "
    "`jax_explain_cache_misses`) to log the reason. Common causes: varying shapes (pad to buckets), "
    "Python scalars vs arrays (weak types), changing static arguments, new closures per call."
)


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "step": None if self.step < 0 else self.step,
            "compile_ms": round(self.compile_ms, 3),
            "device_wait_ms": round(self.device_wait_ms, 3),
            "recompile": self.recompile,
            "cause": self.cause,
            **({"logged": True, "origin": self.origin, "call_site": self.call_site} if self.logged else {}),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class RecompilesResult:
    """Every compile in the capture; findings for the recompiles."""

    compiles: tuple[Compile, ...]
    wall_ms: float
    findings: tuple[Finding, ...] = ()

    @property
    def recompiles(self) -> tuple[Compile, ...]:
        return tuple(c for c in self.compiles if c.recompile)

    def to_dict(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.compiles]


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
        records = _match(spans, inputs.compile_log, _profile_start_ns(frames.meta))
        seen: set[str] = set()
        waiting = _device_waiting(inputs, host, spans, win)
        lo, hi = win[F.START_NS].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
        steps_here = win[F.STEP].to_numpy(np.int64)
        for span, rec in zip(spans, records):
            span = dataclasses.replace(span, step=compile_step(frames, host, span))
            waited = iv.intersection_length(np.array([[span.start_ns, span.end_ns]], dtype=np.int64), waiting)
            compile = _compile(span, rec, seen, ran_before)
            place = "" if span.step >= 0 else _place(span.start_ns, lo, hi, steps_here)
            compiles.append(dataclasses.replace(compile, device_wait_ms=waited / 1e6, place=place))
            seen.add(span.function)
    if inputs.steps is not None:
        wanted = set(inputs.steps)
        compiles = [c for c in compiles if c.step in wanted]
    result = RecompilesResult(tuple(compiles), wall_ns / 1e6)
    return dataclasses.replace(result, findings=_findings(result, inputs))


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
        first_run = ran_before.get(span.module or f"jit_{span.function}")
        recompile = span.function in seen or (first_run is not None and first_run < span.start_ns)
    cause = explanation.get("summary") or None
    if cause is None and rec is not None and rec.get("compile_index") is not None and int(rec["compile_index"]) <= 1:
        cause = FIRST_COMPILE
    return Compile(
        function=span.function,
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
    spans: Sequence[CompileSpan], log: Sequence[Mapping[str, Any]], start_ns: int | None
) -> list[Mapping[str, Any] | None]:
    """For each span, its compile record, or ``None``."""
    out: list[Mapping[str, Any] | None] = [None] * len(spans)
    by_fn: dict[str, list[Mapping[str, Any]]] = {}
    for rec in log:
        if rec.get("compiled", True) and rec.get("function") and not rec.get("before_capture"):
            by_fn.setdefault(_key(rec["function"]), []).append(rec)
    for fn, recs in by_fn.items():
        recs.sort(key=lambda r: (float(r.get("time_unix", 0.0)), int(r.get("compile_index", 0))))
        idx = [i for i, s in enumerate(spans) if _key(s.function) == fn]
        if not idx:
            continue
        if start_ns is not None:
            taken: set[int] = set()
            for i in idx:
                j = _nearest(recs, spans[i], start_ns, taken)
                if j is not None:
                    taken.add(j)
                    out[i] = recs[j]
        else:
            for i, rec in zip(idx[::-1], recs[::-1]):
                out[i] = rec
    return out


def _nearest(recs: Sequence[Mapping[str, Any]], span: CompileSpan, start_ns: int, taken: set[int]) -> int | None:
    """The untaken record whose start lies nearest the span, within the tolerance."""
    best, best_d = None, current().log_match_tolerance_s * 1e9
    for j, rec in enumerate(recs):
        if j in taken:
            continue
        t = float(rec.get("time_unix", 0.0)) * 1e9 - start_ns
        d = 0.0 if span.start_ns <= t <= span.end_ns else min(abs(t - span.start_ns), abs(t - span.end_ns))
        if d < best_d:
            best, best_d = j, d
    return best


def suggestion_for(changes: Sequence[Mapping[str, Any]]) -> str:
    """The change to make for a recompile, from the log's changes (generic without them).

    One tip per kind of change; shape changes of several arguments share one tip
    that lists each axis.
    """
    kinds: list[str] = []
    shape_details: list[str] = []
    for ch in changes:
        what = str(ch.get("what", ""))
        if what not in _ADVICE:
            continue
        if what not in kinds:
            kinds.append(what)
        if what == "shape" and ch.get("axis") is not None:
            shape_details.append(
                f"axis {ch['axis']} of {ch.get('label') or ch.get('path') or 'the argument'}: {ch.get('old')} -> {ch.get('new')}"
            )
    tips = []
    for what in kinds:
        detail = f" ({'; '.join(shape_details)})" if what == "shape" and shape_details else ""
        tips.append(_ADVICE[what].format(detail=detail))
    return " ".join(tips) if tips else _GENERIC


def remainder_advice(changes: Sequence[Mapping[str, Any]]) -> str | None:
    """Advice for a batch that shrank once, as the last batch of an epoch does; ``None`` for other changes.

    Buckets are for sizes that keep changing; a remainder batch compiles once, for
    one smaller size, and the full size comes back from the cache.
    """
    shapes = [ch for ch in changes if ch.get("what") == "shape"]
    if not shapes or len(shapes) != len(changes):
        return None
    sizes = {(str(ch.get("old")), str(ch.get("new"))) for ch in shapes}
    axes = {ch.get("axis") for ch in shapes}
    if None in axes or len(axes) != 1 or len(sizes) != 1:
        return None
    old, new = next(iter(sizes))
    if not (old.isdigit() and new.isdigit() and int(new) < int(old)):
        return None
    return (
        f"A remainder batch: axis {next(iter(axes))} shrank once, {old} -> {new}, as the last batch of an "
        "epoch does. Drop it (`drop_remainder=True`, or stop each epoch at `len(data) // batch_size` batches) or "
        f"pad it to {old} rows and mask the padding, so no size but {old} is compiled."
    )


def _findings(r: RecompilesResult, inputs: AnalysisInputs) -> tuple[Finding, ...]:
    """One finding per recompiling function, and one per user line whose eager code recompiled JAX helpers."""
    groups: dict[tuple[str, str], list[Compile]] = {}
    for c in r.compiles:
        if c.origin == JAX_INTERNAL:  # any compile of a helper mid-run stalls the line that called it
            groups.setdefault(("line", c.call_site or c.function), []).append(c)
        elif c.recompile:
            groups.setdefault(("function", c.function), []).append(c)
    all_steps = sorted({int(s) for s in inputs.frames.steps[F.STEP]}) if len(inputs.frames.steps) else []
    if inputs.steps is not None:
        all_steps = [s for s in all_steps if s in set(inputs.steps)]
    out = []
    for (kind, name), group in groups.items():
        # Hosts compile at the same time: the run lost the slowest host's share, not their sum.
        host_ms = _slowest_host(group, lambda c: c.compile_ms)
        # What the steps lost: compile time inside them that the device waited for. Compiles outside
        # every step belong to the time around the steps (``between_steps`` counts that), not to a step.
        lost = _slowest_host(group, lambda c: c.device_wait_ms if c.step >= 0 else 0.0)
        if host_ms < inputs.thresholds.min_finding_ms:
            continue
        if kind == "function" and lost < inputs.thresholds.min_finding_ms:
            out.append(_one_off_finding(name, group, host_ms, lost, all_steps))
            continue
        out.append(_group_finding(kind, name, group, host_ms, lost, r.wall_ms, all_steps))
    return tuple(out)


def _slowest_host(group: list[Compile], ms: Any) -> float:
    per_host: dict[str, float] = {}
    for c in group:
        per_host[c.host] = per_host.get(c.host, 0.0) + ms(c)
    return max(per_host.values())


def _where(group: list[Compile], all_steps: list[int]) -> str:
    """``at steps 6 and 9``, ``before step 0``, ``at step 12 and between steps``: inside steps by number,
    outside them by where they lie in the capture."""
    inside = [c.step for c in group if c.step >= 0]
    places = list(dict.fromkeys(c.place or "outside the captured steps" for c in group if c.step < 0))
    parts = ([describe_steps(inside, all_steps)] if inside else []) + places
    return join(parts)


_ONE_OFF = (
    "Each of these compiles made a new version of the function once, outside the steady loop: code that runs "
    "once (an optimizer's init, an evaluation or eager ops run at a few shapes) compiles each new shape it "
    "sees. It is a one-time cost, not a varying shape in the training step, so padding to buckets would not "
    "help. If it recurs (an evaluation each epoch), put that code in one jitted function, so it compiles once "
    "per input shape rather than op by op; or run it once before timing."
)


def _one_off_finding(name: str, group: list[Compile], host_ms: float, lost: float, all_steps: list[int]) -> Finding:
    """Compiles of a function that cost the steps (next to) nothing: one-off compiles, not a loop's recompiles."""
    hosts = sorted({c.host for c in group})
    count = max(sum(1 for c in group if c.host == h) for h in hosts)
    times = "once more" if count == 1 else f"{count} more times"
    shown = f"`{name}`" if name != "<unknown>" else "a function the trace does not name"
    notes = []
    if any(c.step < 0 for c in group):
        notes.append("outside the steps: part of the time around them (see work between steps), not of any step")
    if any(c.step >= 0 for c in group):
        notes.append(
            "inside the steps: the device kept running work the host had queued ahead"
            + (f" (it waited {fmt_ms(lost)} ms)" if lost > 0 else "")
        )
    message = (
        f"{shown} compiled {times}, {_where(group, all_steps)}: {fmt_ms(host_ms)} ms of host compile time, "
        f"one-off compiles that cost the steps "
        + ("nothing" if lost <= 0 else "little")
        + f" ({'; '.join(notes)}){_causes(group)}."
    )
    return Finding(
        kind="recompile",
        severity=Severity.INFO,
        time_lost_ms=lost,
        message=message,
        suggestion=_ONE_OFF,
        evidence={
            **_evidence("function", name, group),
            "one_off": True,
            "host_compile_ms": round(host_ms, 3),
        },
    )


def _evidence(kind: str, name: str, group: list[Compile]) -> dict[str, Any]:
    changes = [ch for c in group for ch in c.changes]
    return {
        "function": group[0].function if kind == "function" else None,
        "functions": sorted({c.function for c in group}),
        "call_site": name if kind == "line" else group[0].call_site,
        "origin": group[0].origin,
        "count": len(group),
        "steps": [c.step for c in group],
        "step": group[0].step,
        "hosts": sorted({c.host for c in group}),
        "compile_ms": [round(c.compile_ms, 3) for c in group],
        "device_wait_ms": [round(c.device_wait_ms, 3) for c in group],
        "places": [c.place for c in group],
        "causes": [c.cause for c in group],
        "changes": [dict(ch) for ch in changes],
    }


def _group_finding(
    kind: str, name: str, group: list[Compile], host_ms: float, total: float, wall_ms: float, all_steps: list[int]
) -> Finding:
    hosts = sorted({c.host for c in group})
    count = max(sum(1 for c in group if c.host == h) for h in hosts)
    times = "once" if count == 1 else f"{count} times"
    where = _where(group, all_steps) + (f" (on {len(hosts)} hosts; the slowest's time)" if len(hosts) > 1 else "")
    changes = [ch for c in group for ch in c.changes]
    if kind == "function":
        head = f"`{name}` recompiled {times}, {where}: {fmt_ms(total)} ms"
        if host_ms - total >= 0.5:
            head += f" the steps waited for (of {fmt_ms(host_ms)} ms compiling)"
        suggestion = (remainder_advice(changes) if count == 1 else None) or suggestion_for(changes)
    else:
        helpers = sorted({c.function for c in group})
        again = sum(1 for c in group if c.recompile)
        head = (
            f"Eager code at {_short_site(name)} compiled JAX's {join([f'`{h}`' for h in helpers])} {times}, {where}: "
            f"{fmt_ms(host_ms)} ms"
            + (
                f" ({again} of them recompiles)"
                if 1 < again < len(group)
                else " (1 a recompile)"
                if again == 1 < len(group)
                else ""
            )
        )
        if host_ms - total >= 0.5:
            head += f", of which the steps waited for {fmt_ms(total)} ms"
        # The log's changes compare unrelated calls of a shared helper: they say nothing about this line.
        suggestion = _EAGER
    return Finding(
        kind="recompile",
        severity=severity_for(total, wall_ms) if total > 0 else Severity.INFO,
        time_lost_ms=total,
        message=f"{head}{_causes(group)}.",
        suggestion=suggestion,
        evidence={**_evidence(kind, name, group), "host_compile_ms": round(host_ms, 3)},
    )


def _short_site(site: str) -> str:
    """``/home/me/proj/examples/train.py:63`` -> ``.../examples/train.py:63``: the file's folder and name (evidence keeps the path)."""
    parts = site.replace("\\", "/").split("/")
    return site if len(parts) <= 3 else ".../" + "/".join(parts[-2:])


def _causes(group: list[Compile]) -> str:
    """``; cause: ...`` or ``; causes: ... (at step 6); ... (at step 9)``: each distinct cause once, with its steps."""
    if not any(c.logged for c in group):
        return " (cause unknown without a compile log)"
    by_cause: dict[str, list[int]] = {}
    for c in group:
        cause = c.cause or "unknown (not in the compile log)"
        if cause.startswith(f"{c.function}: "):
            cause = cause[len(c.function) + 2 :]
        by_cause.setdefault(cause, []).append(c.step)
    if len(by_cause) == 1:
        return f"; cause: {next(iter(by_cause))}"
    same_steps = len({tuple(sorted(set(v))) for v in by_cause.values()}) == 1
    parts = [cause if same_steps else f"{cause} ({describe_steps(steps)})" for cause, steps in by_cause.items()]
    return "; causes: " + "; ".join(parts)
