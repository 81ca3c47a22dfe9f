"""Find every compile on the host timeline: which function, when, for how long.

Shared by the recompile, step-breakdown, host-wait and throughput analyses, so
that "the step compiled" means the same thing everywhere.

A compile is anchored on the backend-compile spans JAX and PjRt leave on the
calling thread (``backend_compile_and_load``, ``PjRtCApiClient::CompileAndLoad(jit_f)``,
``PJRT_Client_Compile``, ``PjRtCpuClient::Compile`` ...); nested anchors on one
thread merge into one compile. Work on XLA's compile threads
(``tf_pjrt_compile_thread_pool``, ``tf_PjRtCompilerThreadPool``, ``xla-cpu-codegen``)
that no anchor covers forms compiles of its own. The function is named from, in
order: ``CompileAndLoad(jit_f)``, ``HLO Transforms:jit_f`` or pass pipelines such as
``simplification (jit_f)`` overlapping the compile, then the innermost
``PjitFunction(f)`` around it. The span starts where that ``PjitFunction(f)``
starts, so it covers tracing and lowering, and ends with the backend compile:
the wall time the caller lost, not counting the run that follows.

A program JAX's persistent compilation cache served leaves no backend compile: the call
traces and lowers it (``lower_sharding_computation``) and loads it. Lowering inside a
``PjitFunction(f)`` that holds no compile found otherwise is such a compile, from the
call's start to the loaded program's launch.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.device_work import (
    END_NS,
    classify_names,
    host_events,
    hosts_of,
    name_matches,
    step_of,
    step_windows,
    strings_at,
)
from jaxdiag.analyses.shared import once
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames

_ANCHOR = re.compile(
    r"^backend_compile(?:_and_load)?$|CompileAndLoad\(|^PJRT_Client_Compile$|"
    r"^PjRt\w*Client::Compile|CompileInternal$|^CpuCompiler::RunBackend$|^XlaCompile$"
)
_ANCHOR_WORD = "ompile"  # in every branch of ``_ANCHOR``: names without it are not searched


def _is_anchor(name: str) -> bool:
    return _ANCHOR_WORD in name and _ANCHOR.search(name) is not None


#: Lowering, which JAX does for a compile and for a program it loads from the persistent compilation cache
#: (then there is no backend compile on the timeline).
_LOWERING = re.compile(r"^lower_sharding_computation$")
#: Launching the loaded program: where a compile served by the persistent cache ends at the latest.
_LAUNCH = re.compile(r"^shard_args$|Execute")
_COMPILE_THREAD = re.compile(r"compile_thread_pool|CompilerThreadPool|xla-cpu-codegen|XlaCompile", re.I)
_NAMED_MODULE = (
    re.compile(r"CompileAndLoad\((.+)\)$"),
    re.compile(r"^HLO Transforms:(.+)$"),
    re.compile(r"^.+ \(((?:jit|pjit|pmap|xmap)[_(].*)\)$"),
)
_PJIT = re.compile(r"^PjitFunction\((.+)\)$")
#: The function of a compile the trace does not name.
UNNAMED = "<unknown>"
#: Compile-thread work closer than this joins one compile (threads hand work off).
_JOIN_NS = 2_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class CompileSpan:
    """One compile of one function on one host.

    Attributes:
      host: host name.
      function: the Python function's name (``step``), from ``jit_step``.
      module: the XLA module name when seen (``jit_step``), else ``""``.
      start_ns, end_ns: wall span on the host clock, tracing through backend compile.
      backend_ns: time inside backend compile anchors (or compile threads).
      step: the step whose window holds ``start_ns``, -1 outside every step.
      line: the thread it ran on.
    """

    host: str
    function: str
    module: str
    start_ns: int
    end_ns: int
    backend_ns: int
    step: int
    line: str

    @property
    def dur_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def function_name(module: str) -> str:
    """``jit_step`` / ``jit(step)`` / ``pmap_step`` -> ``step``; other names unchanged."""
    m = re.match(r"^(?:jit|pjit|pmap|xmap)\((.*)\)$", module)
    if m:
        return m.group(1)
    m = re.match(r"^(?:jit|pjit|pmap|xmap)_(.+)$", module)
    return m.group(1) if m else module


def compile_spans(frames: "TraceFrames", host: str | None = None) -> tuple[CompileSpan, ...]:
    """Every compile on ``host`` (every host when ``None``), ordered by host and start."""
    out: list[CompileSpan] = []
    for h in hosts_of(frames, host):
        out += once(frames, ("compile_spans", h), functools.partial(_host_spans, frames, h))
    return tuple(sorted(out, key=lambda c: (c.host, c.start_ns)))


def compile_windows(spans: tuple[CompileSpan, ...]) -> dict[str, np.ndarray]:
    """Per host, the union of its compile spans."""
    by_host: dict[str, list[tuple[int, int]]] = {}
    for c in spans:
        by_host.setdefault(c.host, []).append((c.start_ns, c.end_ns))
    return {h: iv.union(np.array(v, dtype=np.int64)) for h, v in by_host.items()}


def steps_every_host_compiled(frames: "TraceFrames", hosts: tuple[str, ...]) -> tuple[int, ...]:
    """Steps in which every one of ``hosts`` compiled, and compiled the same functions.

    Such a step is the run's warm-up: how long the same compiles take, and the first run's set-up
    after them, differ from host to host, so which host comes last there says nothing about the hosts.
    A compile the trace does not name (``UNNAMED``: compile-thread work no anchor covers, such as a
    piece of a named compile on JAX 0.8) counts as compiling but names no function.
    """
    if len(hosts) < 2:
        return ()
    compiled: list[dict[int, set[str]]] = []
    for h in hosts:
        mine: dict[int, set[str]] = {}
        for c in compile_spans(frames, h):
            if c.step >= 0:
                mine.setdefault(c.step, set()).update({c.function} - {UNNAMED})
        compiled.append(mine)
    steps = set.intersection(*(set(mine) for mine in compiled))
    return tuple(s for s in sorted(steps) if all(mine[s] == compiled[0][s] for mine in compiled))


def _host_spans(frames: "TraceFrames", host: str) -> tuple[CompileSpan, ...]:
    ev = host_events(frames, host)
    if ev.empty:
        return ()
    names = ev[F.NAME]
    starts, ends = ev[F.START_NS].to_numpy(np.int64), ev[END_NS].to_numpy(np.int64)
    anchor = classify_names(names, _is_anchor, key=_is_anchor, dtype=bool)
    thread = name_matches(ev[F.LINE], _COMPILE_THREAD)
    found: list[tuple[str, int, int]] = []  # (line, start, end)
    anchors = np.flatnonzero(anchor & ~thread)
    anchor_lines = strings_at(ev[F.LINE], anchors)
    for line in dict.fromkeys(anchor_lines.tolist()):  # lines in order of their first anchor
        rows = anchors[anchor_lines == line]
        for s, e in iv.union(np.stack([starts[rows], ends[rows]], axis=1)):
            found.append((str(line), int(s), int(e)))
    covered = iv.union(np.array([(s, e) for _, s, e in found], dtype=np.int64).reshape(-1, 2))
    # Compile-thread work no caller's anchor covers: an asynchronous compile, or a
    # trace that kept only XLA's threads.
    loose = iv.subtract(_not_within(np.stack([starts[thread], ends[thread]], axis=1), covered), covered)
    if loose.size:
        loose[:, 1] += (join_ns := int(frames.settings.compile_join_us * 1000))
        for s, e in iv.union(loose):
            found.append(("<compile threads>", int(s), int(e) - join_ns))
    pjit = _columns(ev, name_matches(names, _PJIT, at_start=True))
    windows = step_windows(frames, host)
    if not found:
        return tuple(_cached(ev, pjit, [], windows, host))
    named = _module_mentions(ev)
    spans = []
    for line, s, e in found:
        module = _best_module(named, s, e)
        caller = _innermost_pjit(pjit, line, s, e, module)
        function = function_name(module) if module else ""
        start = s
        if caller is not None:
            start = min(s, caller[0])
            function = function or caller[1]
        spans.append(
            CompileSpan(
                host=host,
                function=function or UNNAMED,
                module=module,
                start_ns=start,
                end_ns=e,
                backend_ns=e - s,
                step=int(step_of(np.array([start]), windows)[0]),
                line=line,
            )
        )
    return spans + _cached(ev, pjit, spans, windows, host)


def _cached(
    ev: "pd.DataFrame", pjit: _Rows, spans: list[CompileSpan], windows: "pd.DataFrame", host: str
) -> list[CompileSpan]:
    """Compiles the persistent compilation cache served: a call that lowered its program (tracing it first)
    inside its ``PjitFunction(f)`` with no backend compile there. Each runs from the call's start to the
    launch of the loaded program (or the end of lowering, without one): the wall time the caller lost."""
    names = ev[F.NAME]
    rows = np.flatnonzero(name_matches(names, _LOWERING, at_start=True))
    if not len(rows):
        return []
    lines = strings_at(ev[F.LINE], rows)
    starts, ends = ev[F.START_NS].to_numpy(np.int64), ev[END_NS].to_numpy(np.int64)
    launch: tuple[np.ndarray, np.ndarray] | None = None  # (line, start) of launches, found when first needed
    out: list[CompileSpan] = []
    for row, line in zip(rows.tolist(), lines.tolist()):
        s, e = int(starts[row]), int(ends[row])
        if any(c.line == line and c.start_ns <= s and c.end_ns >= e for c in spans):
            continue  # lowering for a compile found already
        caller = _innermost_pjit(pjit, str(line), s, e, "")
        if caller is None:
            continue
        if launch is None:
            at = np.flatnonzero(name_matches(names, _LAUNCH))
            launch = strings_at(ev[F.LINE], at), starts[at]
        call_end = int(pjit[3][(pjit[0] == line) & (pjit[2] == caller[0])].max())
        after = (launch[0] == line) & (launch[1] >= e) & (launch[1] <= call_end)
        end = int(launch[1][after].min()) if after.any() else e
        out.append(
            CompileSpan(
                host=host,
                function=caller[1],
                module="",
                start_ns=caller[0],
                end_ns=end,
                backend_ns=0,
                step=int(step_of(np.array([caller[0]]), windows)[0]),
                line=str(line),
            )
        )
    return out


def _not_within(spans: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """``spans`` less those wholly inside one of the disjoint sorted ``runs``, which subtracting ``runs``
    removes anyway: most of the compile threads' work lies inside their caller's compile, and merging
    it first would cost more than the subtraction."""
    if not runs.size or not len(spans):
        return spans
    i = np.searchsorted(runs[:, 0], spans[:, 0], side="right") - 1
    inside = (i >= 0) & (spans[:, 1] <= runs[np.maximum(i, 0), 1])
    return spans.compress(~inside, axis=0)


#: Some rows of host events as arrays: (line, name, start_ns, end_ns, dur_ns).
_Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _columns(ev: "pd.DataFrame", keep: np.ndarray) -> _Rows:
    """The rows ``keep`` selects, as arrays (a compile looks at them once per compile)."""
    rows = np.flatnonzero(keep)
    return (
        strings_at(ev[F.LINE], rows),
        strings_at(ev[F.NAME], rows),
        ev[F.START_NS].to_numpy(np.int64)[rows],
        ev[END_NS].to_numpy(np.int64)[rows],
        ev[F.DUR_NS].to_numpy(np.int64)[rows],
    )


def _module_mentions(ev: "pd.DataFrame") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(start_ns, end_ns, module)`` of the rows that name a module being compiled."""
    rows = np.flatnonzero(classify_names(ev[F.NAME], _names_module, key=_names_module, dtype=bool))
    mod = classify_names(ev[F.NAME], _module_named, key=_module_named, rows=rows)
    return ev[F.START_NS].to_numpy(np.int64)[rows], ev[END_NS].to_numpy(np.int64)[rows], mod


def _names_module(name: str) -> bool:
    return _module_named(name) != ""


def _module_named(name: str) -> str:
    """The module a compile event's name mentions, else ``""``."""
    if ")" not in name and not name.startswith("HLO Transforms:"):  # what every pattern needs
        return ""
    for pattern in _NAMED_MODULE:
        m = pattern.search(name)
        if m:
            return m.group(1)
    return ""


def _best_module(named: tuple[np.ndarray, np.ndarray, np.ndarray], s: int, e: int) -> str:
    """The module whose mentions overlap ``[s, e)`` the longest (the first by name on a tie)."""
    starts, ends, modules = named
    hit = (starts < e) & (ends > s)
    if not hit.any():
        return ""
    overlap = np.minimum(ends[hit], e) - np.maximum(starts[hit], s)
    names, which = np.unique(modules[hit], return_inverse=True)
    totals = np.zeros(len(names), dtype=np.int64)
    np.add.at(totals, which, overlap)
    return str(names[int(np.argmax(totals))])


def _innermost_pjit(pjit: _Rows, line: str, s: int, e: int, module: str) -> tuple[int, str] | None:
    """(start, function) of the shortest ``PjitFunction(f)`` on ``line`` holding ``[s, e)``.

    When the module is known, a caller of another name is skipped, so a compile of
    ``jit_f`` triggered while tracing ``g`` starts at ``f``'s call, not ``g``'s.
    """
    lines, names, starts, ends, durs = pjit
    holding = np.flatnonzero((lines == line) & (starts <= s) & (ends >= e))
    want = function_name(module) if module else None
    for i in holding[np.argsort(durs[holding], kind="stable")]:
        fn = _PJIT.match(str(names[i])).group(1)  # type: ignore[union-attr]
        if want is None or fn == want or re.sub(r"\W", "_", fn) == want:
            return int(starts[i]), fn
    return None


def wall_outside_compiles(lo: np.ndarray, hi: np.ndarray, compiles: np.ndarray) -> int:
    """Nanoseconds of the step windows ``[lo, hi)`` not spent compiling.

    Findings about per-step costs are graded against this rather than the whole
    wall time, so that one long compile does not make a stall in every step look small.
    """
    return int((hi - lo).sum() - iv.covered_in_windows(compiles, lo, hi).sum())
