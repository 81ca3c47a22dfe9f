"""The truth about an XLA:CPU capture, counted with jaxlib's ``ProfileData`` alone (no jaxdiag code).

An XLA:CPU op event carries ``hlo_op``, ``hlo_module`` and ``run_id`` stats; the ops that
share a ``run_id`` are one execution of one program. From those alone: the executions of
each program, the time with an execution in flight (from an execution's first op to its
last), and each execution's op-busy time (the union of its ops).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Execution:
    module: str
    program_id: int
    run_id: int
    start_ns: int
    end_ns: int
    busy_ns: int  # union of its ops
    ops: tuple[tuple[str, int], ...] = ()  # (hlo_op, duration in ns) of each of its ops


@dataclasses.dataclass(frozen=True)
class Truth:
    executions: tuple[Execution, ...]  # by start
    dispatches: tuple[tuple[str, int, int], ...]  # (name, start_ns, end_ns) of PjitFunction spans, outermost

    def of(self, module: str) -> list[Execution]:
        return [e for e in self.executions if e.module == module]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for e in self.executions:
            out[e.module] += 1
        return dict(out)

    def dominant(self) -> str:
        busy: dict[str, int] = defaultdict(int)
        for e in self.executions:
            busy[e.module] += e.busy_ns
        return max(busy, key=busy.__getitem__)

    def in_flight(self) -> list[tuple[int, int]]:
        return union([(e.start_ns, e.end_ns) for e in self.executions])

    def steady_rate(self, module: str) -> float:
        """Executions of ``module`` per second, each from its start to the next one's, leaving out a
        period in which a program run in fewer than half of the periods started (work between steps)
        or that ends in a new program id of ``module`` (a recompile: the device waited for it)."""
        mine = self.of(module)
        periods = list(zip(mine, mine[1:]))
        seen: dict[str, set[int]] = defaultdict(set)  # the periods each other program starts in
        for e in self.executions:
            for i, (a, b) in enumerate(periods):
                if e.module != module and a.start_ns <= e.start_ns < b.start_ns:
                    seen[e.module].add(i)
        rare = {m for m, where in seen.items() if 2 * len(where) < len(periods)}  # not run every step
        count, total = 0, 0
        for i, (a, b) in enumerate(periods):
            if any(i in seen[m] for m in rare) or a.program_id != b.program_id:
                continue
            count, total = count + 1, total + (b.start_ns - a.start_ns)
        return count / (total / 1e9)

    def host_ahead(self, module: str) -> list[int]:
        """For each dispatch of ``module``'s function, executions dispatched before it not yet finished."""
        mine = self.of(module)
        name = f"PjitFunction({module.removeprefix('jit_')})"
        dispatches = [start for n, start, _end in self.dispatches if n == name]
        if len(dispatches) != len(mine):
            return []
        ends = sorted(e.end_ns for e in mine)
        return [i - sum(1 for e in ends if e <= d) for i, d in enumerate(dispatches)]

    def nothing_in_flight_ns(self, lo: int, hi: int) -> int:
        """Time in ``[lo, hi)`` with no execution in flight."""
        covered = sum(max(0, min(b, hi) - max(a, lo)) for a, b in self.in_flight())
        return (hi - lo) - covered

    def pending(self) -> list[tuple[int, int]]:
        """When an execution was in flight or queued: each from the start of the call that launched it (the
        latest outermost ``PjitFunction(f)`` of its function before its first op) to its last op."""
        spans = []
        for e in self.executions:
            call = f"PjitFunction({e.module.removeprefix('jit_')})"
            launched = [a for name, a, _ in self.dispatches if name == call and a <= e.start_ns]
            spans.append((max(launched, default=e.start_ns), e.end_ns))
        return union(spans)

    def nothing_pending_ns(self, lo: int, hi: int) -> int:
        """Time in ``[lo, hi)`` with no execution in flight or queued (``pending``): what a host wait is."""
        covered = sum(max(0, min(b, hi) - max(a, lo)) for a, b in self.pending())
        return (hi - lo) - covered


def union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def named_spans(xplane: str | Path, *names: str) -> dict[str, list[tuple[int, int, dict]]]:
    """``(start_ns, end_ns, stats)`` of every host event called one of ``names`` (``train`` steps, ``load_batch``)."""
    from jax.profiler import ProfileData

    out: dict[str, list[tuple[int, int, dict]]] = {name: [] for name in names}
    for plane in ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for e in line.events:
                if e.name in out:
                    out[e.name].append((int(e.start_ns), int(e.start_ns + e.duration_ns), dict(e.stats)))
    return out


def load_batch_idle_ns(xplane: str | Path) -> list[tuple[int, int]]:
    """``(step_num, ns)`` of each ``load_batch`` span that starts inside a ``train`` step: the time inside it
    with nothing pending (``Truth.nothing_pending_ns``)."""
    truth = read(xplane)
    spans = named_spans(xplane, "train", "load_batch")
    return [
        (int(stats["step_num"]), truth.nothing_pending_ns(a, b))
        for a, b, _ in spans["load_batch"]
        for lo, hi, stats in spans["train"]
        if lo <= a < hi
    ]


def read(xplane: str | Path) -> Truth:
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(xplane))
    ops: dict[int, list[tuple[str, int, int, int]]] = defaultdict(list)
    pjit: list[tuple[str, int, int]] = []
    for plane in data.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            for e in line.events:
                start, end = int(round(e.start_ns)), int(round(e.start_ns + e.duration_ns))
                if e.name.startswith("PjitFunction("):
                    pjit.append((e.name, start, end))
                    continue
                stats = {k: v for k, v in e.stats if k is not None}
                if "hlo_op" in stats and "hlo_module" in stats and "run_id" in stats:
                    program = int(stats.get("program_id", -1))
                    op = (str(stats["hlo_module"]), program, start, end, str(stats["hlo_op"]))
                    ops[int(stats["run_id"])].append(op)
    executions = []
    for run, rows in ops.items():
        spans = [(a, b) for _m, _p, a, b, _o in rows]
        busy = sum(b - a for a, b in union(spans))
        first, last = min(a for a, _ in spans), max(b for _, b in spans)
        named = tuple((o, b - a) for _m, _p, a, b, o in rows)
        executions.append(Execution(rows[0][0], rows[0][1], run, first, last, busy, named))
    executions.sort(key=lambda e: e.start_ns)
    pjit.sort(key=lambda r: (r[1], -r[2]))
    outer: list[tuple[str, int, int]] = []
    for row in pjit:  # a call shows as nested spans of one name: keep the outermost
        if outer and row[1] < outer[-1][2] and row[0] == outer[-1][0]:
            continue
        outer.append(row)
    return Truth(tuple(executions), tuple(outer))
