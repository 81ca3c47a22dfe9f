"""Stragglers: the host the others wait for in their collectives, and what it cost them.

In a multi-controller run every host runs the same program and the hosts meet
in collectives; a collective ends on all participants together, so one late
host holds every other device in it. Hosts' profiler clocks differ, so hosts
are first aligned on what they share:

- a *shared collective* is the k-th run of one collective op (``hlo_module``,
  ``hlo_op``) in one numbered step on every host (steps number the same on every
  host, so a capture that starts a collective earlier on one host does not shift
  every pair by one); its end is simultaneous on all participants, so a
  host's clock offset to the first host is the median difference of those ends,
  and the residuals (how far each aligned end still is from the first host's)
  say how well the hosts aligned. Without a collective every host ran, hosts
  cannot be aligned and nothing is said about who was late ("unknown").
- on aligned clocks, each shared collective has a *last arrival*: the host whose
  devices started it last. It was late by the gap to the next latest host, when
  that gap exceeds the alignment's worst residual (less is clock noise). Each
  other device waited from its own start until the late host arrived (at most
  the op's length): that time is the straggler's cost, not exposed
  communication (``collectives`` leaves it out through ``waiting_intervals``).

Steps in which every host compiled the same functions (``warmup_steps``, usually step 0) are left
out of the late hosts and their findings: compile times and first runs differ from host to host,
so which one comes last there is jitter, not a slow host (the per-host table still shows it). A
step where only some hosts compiled, or compiled different functions, stays in: that is a cause.

A host late at least ``min_finding_ms`` and 2% of the run's wall time in all gets a finding
naming the host, the steps, by how much, what it was doing meanwhile (its own
host waits in those steps, from ``host_waits``), and the device time the others
spent waiting for it, summed across devices (XProf's "equivalent idle chips").
The run's step time is the slowest host's: ``step_hosts`` says which host set
each step.

Alignment and lateness are one procedure over the shared collectives, which is why the module runs
past 400 lines.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.analyses.host_wait_section import CauseWait
from jaxdiag.analyses.straggler_section import (
    AlignmentFacts,
    HostStep,
    StepSetBy,
    StragglerRow,
    StragglersSection,
)
from jaxdiag.analyses.base import AnalysisInputs, Finding, severity_for
from jaxdiag.config import Settings
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows, steps_every_host_compiled
from jaxdiag.analyses.device_work import (
    END_NS,
    OP_KIND,
    StepWindows,
    device_ops,
    hosts_of,
    step_of,
    step_windows,
)
from jaxdiag.analyses.shared import once
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames


#: A host is called a straggler when its lateness is at least this share of the run's wall time:
#: below it, the last host to arrive is launch and scheduling jitter (its table rows still show it).
_MIN_SHARE = 0.02


@dataclasses.dataclass(frozen=True, slots=True)
class Alignment:
    """How the hosts' clocks were put on the first host's.

    Attributes:
      reference: the host whose clock the others were moved to.
      offsets_ms: per host, what was added to its times.
      shared: collectives every host ran, the events aligned on.
      residual_ms: the largest distance of an aligned end from the reference's
        (clock noise plus how unequal the ends really are); ``None`` when unaligned.
      note: why the hosts could not be aligned, when they were not.
    """

    reference: str
    offsets_ms: dict[str, float]
    shared: int
    residual_ms: float | None
    note: str = ""

    @property
    def aligned(self) -> bool:
        return self.residual_ms is not None

    def facts(self) -> AlignmentFacts:
        """What the report's ``stragglers.alignment`` says (ms to 3 decimals)."""
        return AlignmentFacts(
            self.reference,
            self.aligned,
            self.shared,
            None if self.residual_ms is None else round(self.residual_ms, 3),
            {h: round(v, 3) for h, v in self.offsets_ms.items()},
            self.note,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Straggler:
    """A host the others waited for."""

    host: str
    steps: tuple[int, ...]
    late_ms: float  # summed over its late collectives
    others_waited_ms: float  # device time of the other hosts' devices, summed across devices
    waiting_devices: int  # the other hosts' devices that waited for it
    doing: tuple[tuple[str, str, float], ...]  # (cause, kind, ms) of its own host waits in those steps

    def row(self) -> StragglerRow:
        """This host's row of the report's ``stragglers.stragglers`` (ms to 3 decimals)."""
        return StragglerRow(
            self.host,
            self.steps,
            round(self.late_ms, 3),
            round(self.others_waited_ms, 3),
            self.waiting_devices,
            tuple(CauseWait(c, k, round(ms, 3)) for c, k, ms in self.doing),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class StragglersResult:
    """Per-host step times, clock alignment and late hosts (see the module docstring).

    ``table`` is the host x step table; ``step_hosts`` maps each step to the host
    whose step was longest (the run's step time).
    """

    hosts: tuple[str, ...]
    alignment: Alignment | None
    table: tuple[HostStep, ...]
    step_hosts: dict[int, str]
    stragglers: tuple[Straggler, ...]
    findings: tuple[Finding, ...] = ()
    warmup_steps: tuple[int, ...] = ()

    def section(self) -> StragglersSection:
        """The report's ``stragglers`` section: empty (``{}``) with fewer than two hosts."""
        if len(self.hosts) < 2:
            return StragglersSection()
        return StragglersSection(
            hosts=self.hosts,
            alignment=None if self.alignment is None else self.alignment.facts(),
            per_host_step=tuple(
                HostStep(r.host, r.step, round(r.wall_ms, 3), round(r.late_ms, 3), round(r.waited_ms, 3))
                for r in self.table
            ),
            step_set_by=tuple(StepSetBy(s, h) for s, h in sorted(self.step_hosts.items())),
            stragglers=tuple(s.row() for s in self.stragglers),
            warmup_steps=self.warmup_steps,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class _Matched:
    """Shared collectives: one row per run, one column per host (first host = reference)."""

    hosts: list[str]
    arrive: np.ndarray  # (runs, hosts): the host's last device start, on its own clock
    end: np.ndarray  # (runs, hosts): the host's last device end
    per_device: dict[str, "pd.DataFrame"]  # host -> its collective rows, with ``_run`` (row of ``arrive``)


def analyze(inputs: AnalysisInputs) -> StragglersResult:
    """Per-host step times, and the hosts the others waited for (see the module docstring)."""
    frames = inputs.frames
    hosts = tuple(hosts_of(frames, inputs.host))
    if len(hosts) < 2:
        return StragglersResult(hosts, None, (), {}, ())
    windows = step_windows(frames, None, inputs.steps)
    waits, late, alignment = _late_arrivals(frames)
    table, step_hosts = _table(hosts, windows, waits, late)
    warmup = steps_every_host_compiled(frames, hosts)
    waits, late, left_out = _outside(warmup, windows, waits, late)
    stragglers = _stragglers(inputs, windows, waits, late, alignment)
    wall_ms = sum(max((r.wall_ms for r in table if r.step == s), default=0.0) for s in step_hosts)
    findings = tuple(
        _finding(s, alignment, wall_ms, len(step_hosts), inputs.thresholds, left_out.get(s.host, ()))
        for s in stragglers
        if s.late_ms >= inputs.thresholds.min_finding_ms and s.late_ms >= _MIN_SHARE * wall_ms
    )
    return StragglersResult(hosts, alignment, table, step_hosts, stragglers, findings, warmup)


def _outside(
    warmup: tuple[int, ...], windows: "pd.DataFrame", waits: dict[str, np.ndarray], late: list[tuple[str, int, float]]
) -> tuple[dict[str, np.ndarray], list[tuple[str, int, float]], dict[str, tuple[int, ...]]]:
    """Waits and late arrivals outside the warm-up steps; per host, the warm-up steps it was late in."""
    if not warmup:
        return waits, late, {}
    step = {h: StepWindows.of(windows.loc[windows[F.HOST] == h]) for h in {*waits, *(h for h, _, _ in late)}}
    left_out: dict[str, set[int]] = {}
    kept = []
    for host, t, gap in late:
        s = int(step[host].step_of(np.asarray([t]))[0])
        if s in warmup:
            left_out.setdefault(host, set()).add(s)
        else:
            kept.append((host, t, gap))
    waits = {h: rows[~np.isin(step[h].step_of(rows[:, 0]), warmup)] for h, rows in waits.items()}
    return waits, kept, {h: tuple(sorted(v)) for h, v in left_out.items()}


def waiting_intervals(frames: "TraceFrames", host: str, device: int | None = None) -> np.ndarray:
    """When ``host``'s ``device`` (any, when ``None``) waited in collectives for a later host, on its clock."""
    from jaxdiag.analyses import intervals as iv

    waits, _, _ = _late_arrivals(frames)
    rows = waits.get(host)
    if rows is not None and device is not None:
        rows = rows[rows[:, 2] == device]
    if rows is None or not len(rows):
        return iv.EMPTY
    return iv.union(np.stack([rows[:, 0], rows[:, 1]], axis=1))


def _late_arrivals(frames: "TraceFrames") -> tuple[dict[str, np.ndarray], list[tuple[str, int, float]], Alignment]:
    return once(frames, ("stragglers",), lambda: _compute(frames))


def _compute(frames: "TraceFrames") -> tuple[dict[str, np.ndarray], list[tuple[str, int, float]], Alignment]:
    """Per host its waits ``[start, end, device, late host's index]`` on its clock; late arrivals ``(host, start_ns, late_ms)``."""
    hosts = list(hosts_of(frames, None))
    matched = _match(frames, hosts)
    if matched is None:
        note = "no collective ran on every host, so host clocks could not be aligned and no host is called late"
        return {}, [], Alignment(hosts[0] if hosts else "", {}, 0, None, note)
    offset = np.rint(np.median(matched.end[:, :1] - matched.end, axis=0)).astype(
        np.int64
    )  # ns to add to each host's clock
    residual = (matched.end + offset) - matched.end[:, :1]
    worst = int(np.abs(residual).max())
    alignment = Alignment(hosts[0], {h: float(o) / 1e6 for h, o in zip(hosts, offset)}, len(matched.end), worst / 1e6)
    arrive = matched.arrive + offset
    order = np.argsort(arrive, axis=1)
    last = order[:, -1]
    gap = arrive[np.arange(len(arrive)), last] - arrive[np.arange(len(arrive)), order[:, -2]]
    is_late = gap > worst
    late_at = np.where(is_late, arrive[np.arange(len(arrive)), last], np.iinfo(np.int64).min // 2)
    late = [(hosts[h], int(matched.arrive[i, h]), float(gap[i]) / 1e6) for i, h in enumerate(last) if is_late[i]]
    waits: dict[str, np.ndarray] = {}
    for j, host in enumerate(hosts):
        rows = matched.per_device[host]
        run = rows["_run"].to_numpy(np.int64)
        start = rows[F.START_NS].to_numpy(np.int64)
        end = rows[END_NS].to_numpy(np.int64)
        mine = last[run] != j
        until = np.minimum(end, late_at[run] - offset[j])  # the late host's arrival, on this host's clock
        keep = mine & is_late[run] & (until > start)
        waits[host] = np.stack(
            [start[keep], until[keep], rows[F.DEVICE].to_numpy(np.int64)[keep], last[run][keep]], axis=1
        )
    return waits, late, alignment


def _match(frames: "TraceFrames", hosts: list[str]) -> _Matched | None:
    """The collectives every host ran, matched by op and run number; ``None`` when there are none."""
    per_host: dict[str, "pd.DataFrame"] = {}
    keys: set[tuple[str, str, int, int]] | None = None
    for host in hosts:
        ops = device_ops(frames, host, compile_windows(compile_spans(frames, host)))
        rows = ops.loc[ops[OP_KIND] == "collective"]
        op = rows[F.HLO_OP].astype(str).where(rows[F.HLO_OP].astype(str) != "", rows[F.NAME].astype(str))
        rows = rows.assign(_op=op.to_numpy(), _module=rows[F.HLO_MODULE].astype(str).to_numpy())
        rows = rows.sort_values(F.START_NS, kind="stable")
        rows = rows.assign(
            _k=rows.groupby([F.PLANE, F.DEVICE, "_module", "_op", F.STEP], observed=True).cumcount().to_numpy()
        )
        per_host[host] = rows
        mine = set(zip(rows["_module"], rows["_op"], rows[F.STEP], rows["_k"]))
        keys = mine if keys is None else keys & mine
    if not keys:
        return None
    runs = sorted(keys)
    index = {k: i for i, k in enumerate(runs)}
    arrive = np.zeros((len(runs), len(hosts)), np.int64)
    end = np.zeros((len(runs), len(hosts)), np.int64)
    for j, host in enumerate(hosts):
        rows = per_host[host]
        run = np.asarray(
            [index.get(k, -1) for k in zip(rows["_module"], rows["_op"], rows[F.STEP], rows["_k"])], np.int64
        )
        rows = rows.assign(_run=run).loc[run >= 0]
        grouped = rows.groupby("_run")
        arrive[:, j] = grouped[F.START_NS].max().reindex(range(len(runs))).to_numpy(np.int64)
        end[:, j] = grouped[END_NS].max().reindex(range(len(runs))).to_numpy(np.int64)
        per_host[host] = rows
    return _Matched(hosts, arrive, end, per_host)


def _table(
    hosts: tuple[str, ...], windows: "pd.DataFrame", waits: dict[str, np.ndarray], late: list[tuple[str, int, float]]
) -> tuple[tuple[HostStep, ...], dict[int, str]]:
    table: list[HostStep] = []
    longest: dict[int, tuple[float, str]] = {}
    for host in hosts:
        win = windows.loc[windows[F.HOST] == host]
        if win.empty:
            continue
        steps = win[F.STEP].to_numpy(np.int64)
        wall = (win["end_ns"].to_numpy(np.int64) - win[F.START_NS].to_numpy(np.int64)) / 1e6
        late_by = np.zeros(len(win))
        times = np.asarray([t for h, t, _ in late if h == host], np.int64)
        gaps = np.asarray([g for h, _, g in late if h == host])
        for step, g in zip(step_of(times, win), gaps):
            late_by[steps == step] += g
        waited = np.zeros(len(win))
        rows = waits.get(host)
        if rows is not None and len(rows):
            n_devices = max(len(np.unique(rows[:, 2])), 1)
            for step, d in zip(step_of(rows[:, 0], win), rows[:, 1] - rows[:, 0]):
                waited[steps == step] += d / 1e6 / n_devices
        for s, w, lb, wt in zip(steps, wall, late_by, waited):
            table.append(HostStep(host, int(s), float(w), float(lb), float(wt)))
            if int(s) not in longest or w > longest[int(s)][0]:
                longest[int(s)] = (float(w), host)
    return tuple(table), {s: h for s, (_, h) in sorted(longest.items())}


def _stragglers(
    inputs: AnalysisInputs,
    windows: "pd.DataFrame",
    waits: dict[str, np.ndarray],
    late: list[tuple[str, int, float]],
    alignment: Alignment,
) -> tuple[Straggler, ...]:
    from jaxdiag.analyses import host_waits

    out = []
    for host in dict.fromkeys(h for h, _, _ in late):
        win = windows.loc[windows[F.HOST] == host]
        times = np.asarray([t for h, t, _ in late if h == host], np.int64)
        late_ms = sum(g for h, _, g in late if h == host)
        steps = tuple(sorted({int(s) for s in step_of(times, win) if s >= 0}))
        index = list(alignment.offsets_ms).index(host)
        mine = [rows[rows[:, 3] == index] for other, rows in waits.items() if other != host and len(rows)]
        others = sum(float((r[:, 1] - r[:, 0]).sum()) / 1e6 for r in mine)
        devices = sum(len(np.unique(r[:, 2])) for r in mine)
        doing: tuple[tuple[str, str, float], ...] = ()
        if steps:
            hw = host_waits.analyze(dataclasses.replace(inputs, host=host, steps=list(steps)))
            doing = tuple((c.cause, c.kind, c.ms) for c in hw.by_cause)
        out.append(Straggler(host, steps, late_ms, others, devices, doing))
    return tuple(sorted(out, key=lambda s: -s.late_ms))


def _finding(
    s: Straggler, alignment: Alignment, wall_ms: float, n_steps: int, settings: Settings, warmup: tuple[int, ...]
) -> Finding:
    per_step = s.late_ms / max(len(s.steps), 1)
    doing = [(c, k, ms) for c, k, ms in s.doing if ms >= 0.1 * s.late_ms]
    if doing:
        meanwhile = "; ".join(
            f"{_cause_text(c, k)} {ms / max(len(s.steps), 1):.1f} ms per step" for c, k, ms in doing[:3]
        )
        meanwhile = f" Meanwhile {s.host}'s own devices sat idle while it ran: {meanwhile}."
    else:
        meanwhile = f" Its own host waits in those steps do not explain it: {s.host}'s devices were busy or the host showed nothing."
    n_other = sum(1 for h in alignment.offsets_ms if h != s.host)
    each = s.others_waited_ms / max(s.waiting_devices, 1)
    msg = (
        f"Host {s.host} was the last to reach the collectives the other hosts wait in, in {len(s.steps)} of "
        f"{n_steps} steps ({_steps_text(s.steps)}), by {per_step:.1f} ms per step ({s.late_ms:.1f} ms in all): "
        f"{s.waiting_devices} device(s) of the other {n_other} host(s) waited {s.others_waited_ms:.1f} ms in "
        f"collectives for it (device time summed across devices; {each:.1f} ms each). Host clocks were aligned on {alignment.shared} shared collectives "
        f"to within {alignment.residual_ms:.2f} ms." + meanwhile
    )
    if warmup:
        msg += (
            f" It also came last in step {_steps_text(warmup)}, where every host compiled the same functions; that"
            " is left out, since compile times and first runs differ from host to host."
        )
    top = doing[0] if doing else None
    if top is not None and top[1] == "annotation":
        fix = (
            f"Make `{top[0]}` on {s.host} as fast as on the other hosts, or take it off the step's path: "
            "prefetch the next batch in a background thread so it is ready before the step needs it."
        )
    elif top is not None and top[1] == "compile":
        fix = f"{s.host} compiled while the others ran: make every host trace the same shapes (see the compile divergence check)."
    elif top is not None and top[1] == "device_to_host_sync":
        fix = f"{s.host} reads results back from its devices where the others do not: move the read (logging on one process) off the step."
    else:
        fix = (
            f"Find what {s.host} does that the other hosts do not (input pipeline, logging or checkpointing on one "
            "process, a slower or busier machine): wrap suspect code in `jax.profiler.TraceAnnotation(...)` and capture again."
        )
    fix += (
        " Time spent waiting for a late host is not a communication problem: faster collectives would not recover it."
    )
    return Finding(
        kind="straggler",
        severity=severity_for(s.late_ms, wall_ms, settings),
        time_lost_ms=s.late_ms,
        message=msg,
        suggestion=fix,
        evidence={
            "host": s.host,
            "steps": list(s.steps),
            "late_ms_per_step": round(per_step, 3),
            "others_waited_device_ms": round(s.others_waited_ms, 3),
            "waiting_devices": s.waiting_devices,
            "alignment_residual_ms": round(alignment.residual_ms or 0.0, 3),
            "doing": {c: round(ms, 3) for c, _, ms in s.doing},
        },
    )


def _cause_text(cause: str, kind: str) -> str:
    return {
        "annotation": f"`{cause}`",
        "compile": "compiling",
        "device_to_host_sync": "reading results back",
        "dispatch": "launching jitted work",
        "unattributed": "Python outside any annotation",
    }.get(kind, cause)


def _steps_text(steps: tuple[int, ...]) -> str:
    """``2-6``, ``1, 3, 5``: steps as ranges."""
    parts: list[str] = []
    for s in steps:
        if parts and parts[-1].split("-")[-1] == str(s - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{s}"
        else:
            parts.append(str(s))
    return ", ".join(parts)
