"""Compile divergence: functions that compiled differently on different processes of one run.

In a multi-controller run every process must compile the same programs: one
that traces a function with other shapes compiles another program, and the
run hangs or fails at the next collective. From the compile records of every
process (capture sidecars and compile logs carry ``process_index``), for each
function and compile number this compares what JAX keys its cache on (each
argument's path, shape, dtype, weak type and static value, and the pytree
structure; fingerprinted as ``recording.host_check`` does at run time), and the
number of compiles per process. The signature most processes share is taken as
the run's; each other one is a finding naming the process, the step (from the
compile's span on that process's host timeline; ``unknown`` without one), and
the argument. Compiled programs' own fingerprints are not in the records, so
two programs from equal signatures are taken as equal. JAX's own helpers
(``origin="jax-internal"``) are left out.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from jaxdiag.analyses.base import AnalysisInputs, Finding, Severity
from jaxdiag.analyses.divergence_section import Divergence, DivergenceSection
from jaxdiag.recording.host_check import _ranges, describe, entry
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, CompileRecord

_HANG = "in a multi-controller run the processes run different programs and hang or fail at the next collective"


@dataclasses.dataclass(frozen=True, slots=True)
class DivergenceResult:
    """Per function, what differed between processes (empty with one process)."""

    processes: tuple[int, ...]
    divergences: tuple[Divergence, ...]
    findings: tuple[Finding, ...] = ()

    def section(self) -> DivergenceSection:
        """The report's ``divergence`` section: empty (``{}``) with fewer than two processes."""
        if len(self.processes) < 2:
            return DivergenceSection()
        return DivergenceSection(self.processes, self.divergences)


def _whole(value: Any) -> int | None:
    """A record's index as an int (a JSON number with no fraction), or ``None`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value % 1:
        return None
    return int(value) if abs(value) < 1 << 62 else None


def analyze(inputs: AnalysisInputs) -> DivergenceResult:
    """Compare every process's compiles of each function (see the module docstring)."""
    by_process: dict[int, list[Mapping[str, Any]]] = {}
    for r in inputs.compile_log:
        process = _whole(r.get("process_index"))
        if process is None or _whole(r.get("compile_index", 0)) is None or r.get("origin") == JAX_INTERNAL_ORIGIN:
            continue  # a record that names no process (or not as a number) cannot be compared
        by_process.setdefault(process, []).append(r)
    processes = tuple(sorted(by_process))
    if len(processes) < 2:
        return DivergenceResult(processes, ())
    steps = _steps(inputs, by_process)
    out: list[Divergence] = []
    functions: dict[tuple[str, str], dict[int, dict[int, Mapping[str, Any]]]] = {}
    for p, records in by_process.items():
        for r in records:
            key = (str(r.get("qualname", r.get("function", ""))), str(r.get("source")))
            functions.setdefault(key, {}).setdefault(p, {})[_whole(r.get("compile_index", 0)) or 0] = r
    for (qualname, _), per_process in sorted(functions.items()):
        name = next(iter(next(iter(per_process.values())).values())).get("function", qualname)
        counts = {p: len(per_process.get(p, {})) for p in processes}
        out += _count_divergence(name, counts, per_process, steps)
        for k in sorted({k for recs in per_process.values() for k in recs}):
            have = {p: _entry(recs[k], steps) for p, recs in per_process.items() if k in recs}
            out += _signature_divergence(name, k, have)
    findings = tuple(_finding(d) for d in out)
    return DivergenceResult(processes, tuple(out), findings)


def _entry(record: Mapping[str, Any], steps: Mapping[int, int]) -> dict[str, Any]:
    try:
        rec = CompileRecord.from_dict(dict(record))
    except (KeyError, TypeError, ValueError):
        return {"fp": "", "args": {}, "step": None}
    return entry(rec, steps.get(id(record)))


def _count_divergence(
    name: str, counts: dict[int, int], per_process: dict[int, dict[int, Mapping[str, Any]]], steps: Mapping[int, int]
) -> list[Divergence]:
    usual = _majority(counts)
    odd = sorted(p for p, n in counts.items() if n != usual)
    if not odd:
        return []
    rest = tuple(p for p in counts if p not in odd)
    out = []
    for n in sorted({counts[p] for p in odd}):
        group = tuple(p for p in odd if counts[p] == n)
        extra = [r for p in group for k, r in per_process.get(p, {}).items() if k > usual]
        step = min((steps[id(r)] for r in extra if id(r) in steps), default=None)
        detail = (
            f"process(es) {_ranges(group)} compiled `{name}` {_times(n)} while process(es) {_ranges(rest)} "
            f"compiled it {_times(usual)}"
        )
        if extra:
            first = _entry(extra[0], steps)
            others = [_entry(r, steps) for p in rest for k, r in per_process.get(p, {}).items()]
            if others:
                detail += f" (the extra compile: {describe(first, group[0], others[-1], rest[0])})"
        out.append(Divergence(name, None, group, rest, step, detail))
    return out


def _signature_divergence(name: str, k: int, have: dict[int, dict[str, Any]]) -> list[Divergence]:
    if len(have) < 2:
        return []
    usual = _majority({p: e["fp"] for p, e in have.items()})
    rest = tuple(p for p, e in have.items() if e["fp"] == usual)
    out = []
    for fp in sorted({e["fp"] for e in have.values()} - {usual}):
        group = tuple(p for p, e in have.items() if e["fp"] == fp)
        mine = have[group[0]]
        what = describe(mine, group[0], have[rest[0]], rest[0]) if rest else ""
        detail = (
            f"process(es) {_ranges(group)} traced `{name}` (compile {k}) with {what}; "
            f"process(es) {_ranges(rest)} had the other signature"
        )
        out.append(Divergence(name, k, group, rest, mine.get("step"), detail))
    return out


def _majority(values: Mapping[int, Any]) -> Any:
    """The value most processes have; on a tie, the lowest process's."""
    tally: dict[Any, int] = {}
    for p in sorted(values):
        tally[values[p]] = tally.get(values[p], 0) + 1
    return max(tally, key=lambda v: (tally[v], -min(p for p in values if values[p] == v)))


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


def _steps(inputs: AnalysisInputs, by_process: Mapping[int, Sequence[Mapping[str, Any]]]) -> dict[int, int]:
    """``id(record)`` -> the step its compile span lies in, on the host of its process (when there is one)."""
    from jaxdiag.analyses.compile_spans import compile_spans
    from jaxdiag.analyses.recompiles import _match

    frames = inputs.frames
    out: dict[int, int] = {}
    for p, records in by_process.items():
        host = next((h for h in frames.hosts if h.endswith(f"-p{p}")), None)
        if host is None:
            continue
        spans = compile_spans(frames, host)
        # In order, the latest records with the latest spans: the loader keeps one host's profile start
        # only, and processes start profiling at different times, so times would pair them wrongly.
        for span, rec in zip(spans, _match(spans, list(records), None, inputs.thresholds)):
            if rec is not None and span.step >= 0:
                out[id(rec)] = span.step
    return out


def _finding(d: Divergence) -> Finding:
    at = f"at step {d.step}" if d.step is not None else "at an unknown step (no compile span on its timeline)"
    message = f"Compile divergence {at}: {d.detail}; {_HANG}."
    suggestion = (
        "Make every process trace the same shapes, dtypes and static arguments: give each the same "
        "per-process batch (pad or drop a short last batch, shard the data evenly), and keep static "
        "arguments and Python-side branching the same on all processes. "
        "`jaxdiag.watch(check_hosts=True)` catches this at run time, before the collective."
    )
    return Finding(
        kind="compile_divergence",
        severity=Severity.CRITICAL,
        time_lost_ms=0.0,
        message=message,
        suggestion=suggestion,
        evidence={
            "function": d.function,
            "compile_index": d.compile_index,
            "processes": list(d.processes),
            "others": list(d.others),
            "step": d.step,
        },
    )
