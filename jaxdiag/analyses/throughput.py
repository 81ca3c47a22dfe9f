"""Throughput: steps/s, tokens/s and MFU, over all steps and in steady state.

Each step's *period* runs from its start to the next step's start (its own wall
time for the last step), so host time between steps counts against throughput.
With several hosts a step's period is the slowest host's. Steady state leaves
out every step whose compile cost the device time (a compile span, ``compile_spans``,
overlaps it while the device waited, ``device_waiting``, at least ``min_finding_ms`` and a
tenth of the median step's wall time in all;
a compile that ran while the device worked through executions the host had queued ahead
slowed no step). Rates are totals over periods, not means of per-step rates,
so a slow step weighs as much as the time it took.

Tokens come from ``AnalysisInputs.tokens_per_step``; tokens/s covers the steps
whose count is known. When the program counted samples rather than tokens
(``AnalysisInputs.count_unit``), the same figures are samples/s: the keys keep
their names and ``count_unit`` says which. MFU is a step's FLOPs over its period,
over the summed peak FLOP/s of the analysed hosts' devices, and is ``None`` unless
both are known; ``analyses.mfu`` says where each comes from (``mfu_basis`` in the
section). A capture without step markers (one window, step -1) has no step rate.
Work between steps (the holes ``trace.steps`` cuts out of the tiling where other
programs ran: an evaluation, a checkpoint) is no step's period.

Steady rates come from the device where the trace tells the step program's
executions apart (``analyses.booking``): steady steps/s is those executions per
second, each execution's period running to the next one's start, over the
executions of steady steps, leaving out periods that hold a compile or work
between steps (a hole that holds only runs of the steps' own programs,
``steps_work.steps_work``, cut out by time, is no such work). A host that runs ahead of the device (a loop that never reads a
value) makes its own step windows short, then one long, so host windows say
little of the rate the device sustains; ``host_ahead`` says how far ahead it ran.
When the executions do not pair one per step, the step windows give the rates.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.booking import booked
from jaxdiag.analyses.steps_work import steps_work
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.device_waiting import device_waiting
from jaxdiag.analyses.device_work import executions_of, hosts_of, step_windows
from jaxdiag.analyses.mfu import mfu_basis
from jaxdiag.analyses.throughput_section import HostAhead, MfuBasisFacts, StepThroughput, Throughput
from jaxdiag.trace import frames as F


@dataclasses.dataclass(frozen=True, slots=True)
class StepRate:
    """One step's period, tokens and rates."""

    step: int
    wall_ms: float
    period_ms: float
    compiled: bool
    tokens: float | None
    mfu: float | None

    @property
    def steps_per_s(self) -> float:
        return 1000.0 / self.period_ms if self.period_ms > 0 else math.inf

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.tokens is None or self.period_ms <= 0 else self.tokens * 1000.0 / self.period_ms


@dataclasses.dataclass(frozen=True, slots=True)
class ThroughputResult:
    """Rates over all analysed steps and over steady-state steps; ``None`` where unknown."""

    steps_per_s: float | None
    tokens_per_s: float | None
    steady_steps_per_s: float | None
    steady_tokens_per_s: float | None
    mfu: float | None
    per_step: tuple[StepRate, ...]
    findings: tuple[Finding, ...] = ()
    mfu_basis: MfuBasisFacts = MfuBasisFacts()
    count_unit: str = "tokens"
    steady_from: str = "step windows"
    host_ahead: dict[str, float] | None = None

    def section(self) -> Throughput:
        """The report's ``throughput`` section, rates to 4 decimals (MFU to 5), ``None`` where not finite."""
        return Throughput(
            steady_from=self.steady_from,
            host_ahead=None if self.host_ahead is None else HostAhead(**self.host_ahead),
            mfu_basis=self.mfu_basis,
            steps_per_s=_r(self.steps_per_s),
            tokens_per_s=_r(self.tokens_per_s),
            steady_steps_per_s=_r(self.steady_steps_per_s),
            steady_tokens_per_s=_r(self.steady_tokens_per_s),
            mfu=_r(self.mfu, 5),
            count_unit=self.count_unit,
            per_step=tuple(
                StepThroughput(
                    step=s.step,
                    wall_ms=round(s.wall_ms, 4),
                    period_ms=round(s.period_ms, 4),
                    compiled=s.compiled,
                    steps_per_s=_r(s.steps_per_s),
                    tokens=s.tokens,
                    tokens_per_s=_r(s.tokens_per_s),
                    mfu=_r(s.mfu, 5),
                )
                for s in self.per_step
            ),
        )


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


def analyze(inputs: AnalysisInputs) -> ThroughputResult:
    """Compute steps/s, tokens/s and MFU, overall and in steady state."""
    frames = inputs.frames
    periods: dict[int, tuple[float, float]] = {}  # step -> (period ms, wall ms), slowest host
    compiled: set[int] = set()
    device_rates: list[tuple[int, float]] = []  # (executions, ms) per host
    ahead: list[int] = []
    for host in hosts_of(frames, inputs.host):
        win = step_windows(frames, host)  # every step: a period needs the next step's start
        if win.empty or (win[F.STEP] < 0).all():
            continue
        lo = win[F.START_NS].to_numpy(np.int64)
        hi = win["end_ns"].to_numpy(np.int64)
        nxt = np.append(lo[1:], hi[-1])
        # Steps tile the run, but for work between steps: a hole after a step where programs ran
        # (``between_steps``) is no step's period.
        period = np.where(_holds_executions(frames, host, hi, nxt), hi - lo, np.maximum(nxt - lo, hi - lo))
        cw = compile_windows(compile_spans(frames, host)).get(host, iv.EMPTY)
        # A compile the device waited a small part of a step for (a few thunk gaps) does not distort the rate.
        least = max(inputs.thresholds.min_finding_ms * 1e6, STEADY_COMPILE_SHARE * float(np.median(hi - lo)))
        cw = _cost_the_device(frames, host, cw, int(inputs.thresholds.host_wait_min_us * 1000), int(least))
        in_compile = iv.covered_in_windows(cw, lo, hi) > 0
        b = booked(frames, host)
        waited = _waited_for_compile(b, cw)
        if waited is not None:
            # A compile inside a dispatch of the step program is the step's whose execution waited for it,
            # wherever the device was meanwhile (the host may run ahead); other compiles (an eager op's)
            # are the steps' they overlap.
            theirs = _in_step_dispatch(b, cw)
            in_compile = np.isin(win[F.STEP].to_numpy(np.int64), list(b.by_dispatch[waited]))
            in_compile |= iv.covered_in_windows(cw[~theirs], lo, hi) > 0
            waited = waited | _starts_after(b, cw[~theirs])
        steady_steps = {int(x) for x, c in zip(win[F.STEP].to_numpy(np.int64), in_compile) if not c}
        if inputs.steps is not None:
            steady_steps &= set(inputs.steps)
        own_work = steps_work(frames, host, int((win[F.STEP] >= 0).sum()))
        holes = np.stack([hi, nxt], axis=1)[_holds_executions(frames, host, hi, nxt, leave_out=own_work)]
        rate = _device_rate(b, steady_steps, holes, waited)
        if rate is not None:
            device_rates.append(rate)
        ahead += [int(a) for a in b.ahead[b.ahead >= 0]]
        for step, p, w, c in zip(win[F.STEP].to_numpy(np.int64), period, hi - lo, in_compile):
            step = int(step)
            if inputs.steps is not None and step not in inputs.steps:
                continue
            if step not in periods or p / 1e6 > periods[step][0]:
                periods[step] = (float(p) / 1e6, float(w) / 1e6)
            if c:
                compiled.add(step)
    basis = mfu_basis(inputs)
    peak, flops_of = basis.peak_flops, basis.flops_of
    rows = []
    for step in sorted(periods):
        p, w = periods[step]
        mfu = None
        flops = flops_of(step)
        if flops is not None and peak is not None and p > 0:
            mfu = flops / (p / 1e3) / peak
        rows.append(StepRate(step, w, p, step in compiled, inputs.tokens_for(step), mfu))
    steady = [r for r in rows if not r.compiled]
    steady_rate = _rate(steady)
    steady_tokens = _token_rate(steady)
    steady_from = "step windows"
    if device_rates and steady:
        count, ms = max(device_rates, key=lambda r: r[1])  # the slowest host's
        steady_rate = count * 1000.0 / ms
        known = [r.tokens for r in steady if r.tokens is not None]
        steady_tokens = None if not known else sum(known) / len(known) * steady_rate
        steady_from = f"device executions of {booked(frames, next(iter(hosts_of(frames, inputs.host)))).module}"
    mfu = _mfu_over(steady or rows, flops_of, peak)
    host_ahead = None
    if ahead:
        host_ahead = {"max": float(max(ahead)), "median": float(np.median(ahead))}
    return ThroughputResult(
        steps_per_s=_rate(rows),
        tokens_per_s=_token_rate(rows),
        steady_steps_per_s=steady_rate,
        steady_tokens_per_s=steady_tokens,
        mfu=mfu,
        per_step=tuple(rows),
        mfu_basis=basis.facts(),
        count_unit=inputs.count_unit,
        steady_from=steady_from,
        host_ahead=host_ahead,
    )


#: A compile takes steps out of the steady rate when the device waited for it at least this share of the
#: median step's wall time (and ``min_finding_ms``).
STEADY_COMPILE_SHARE = 0.1


def _cost_the_device(frames: Any, host: str, compiles: np.ndarray, min_ns: int, least_ns: int) -> np.ndarray:
    """The parts of ``compiles`` with the device waiting (``device_waiting``), of each compile that made it wait
    at least ``least_ns`` in all: a compile that ran while the device worked through executions the host had
    queued ahead slowed no step, and one the device waited a small part of a step for hardly did."""
    if not compiles.size:
        return compiles
    waiting = device_waiting(frames, host, int(compiles[0, 0]), int(compiles[-1, 1]), min_ns)
    kept = [part for c in compiles if iv.total(part := iv.intersect(c[None, :], waiting)) >= max(least_ns, 1)]
    return np.concatenate(kept) if kept else iv.EMPTY


def _holds_executions(
    frames: Any, host: str, lo: np.ndarray, hi: np.ndarray, leave_out: set[str] | frozenset[str] = frozenset()
) -> np.ndarray:
    """Which windows ``[lo, hi)`` hold the start of one of ``host``'s executions, but for those of the programs
    ``leave_out``."""
    execs = executions_of(frames)
    mine = (execs[F.HOST] == host).to_numpy(bool, copy=True)
    if leave_out:
        mine &= ~execs[F.HLO_MODULE].isin(leave_out).to_numpy()
    starts = np.sort(execs.loc[mine, F.START_NS].to_numpy(np.int64))
    return (hi > lo) & (np.searchsorted(starts, hi, side="left") > np.searchsorted(starts, lo, side="left"))


def _waited_for_compile(b: Any, compiles: np.ndarray) -> np.ndarray | None:
    """Which executions waited for a compile: for each compile, the first whose dispatch overlaps it (a
    compile runs inside the dispatch that needs it). ``None`` unless executions are paired with their dispatches
    (but for the first ones, queued before the trace began: ``booking``)."""
    if not (b.dispatch >= 0).any():
        return None
    waited = np.zeros(len(b.starts), dtype=bool)
    for cs, ce in compiles.tolist():
        after = np.flatnonzero((b.dispatch <= ce) & (b.dispatch_end >= cs))
        if len(after):
            waited[after[0]] = True
    return waited


def _in_step_dispatch(b: Any, compiles: np.ndarray) -> np.ndarray:
    """Which compile windows overlap a dispatch of the step program."""
    paired = b.dispatch >= 0
    return np.array(
        [bool(((b.dispatch[paired] <= ce) & (b.dispatch_end[paired] >= cs)).any()) for cs, ce in compiles.tolist()],
        dtype=bool,
    ).reshape(-1)


def _starts_after(b: Any, compiles: np.ndarray) -> np.ndarray:
    """For each compile window, the first execution starting after it begins (its period held the compile)."""
    out = np.zeros(len(b.starts), dtype=bool)
    for cs, _ce in compiles.tolist():
        after = np.flatnonzero(b.starts >= cs)
        if len(after):
            out[after[0]] = True
    return out


def _device_rate(b: Any, steady: set[int], holes: np.ndarray, waited: np.ndarray | None) -> tuple[int, float] | None:
    """``(executions, ms)`` of the step program's executions in ``steady`` steps, each to the next one's start.

    ``None`` unless every steady step holds one execution (by dispatch where paired, else by time) and
    executions are paired with their dispatches (``waited`` says which waited for a compile).
    ``holes``: ``(end, next start)`` after each step; a period that holds one, or that ends in an
    execution that waited for a compile, is left out, as is the last execution's (no next start).
    """
    if waited is None:
        return None
    if not len(b.starts) or not steady:
        return None
    step = b.by_dispatch  # paired (``waited`` is known): those queued before the trace are no step's
    mine = np.isin(step, list(steady))
    if int(mine.sum()) != len(steady) or len(np.unique(step[mine])) != len(steady):
        return None
    nxt = np.append(b.starts[1:], b.ends[-1])
    lo, hi = b.starts[mine], nxt[mine]
    next_waited = np.append(waited[1:], True)[mine]  # the last execution: no next start, no period
    clean = (iv.covered_in_windows(iv.union(holes[holes[:, 1] > holes[:, 0]]), lo, hi) == 0) & ~next_waited
    if not clean.any():
        return None
    return int(clean.sum()), float((hi[clean] - lo[clean]).sum()) / 1e6


def _rate(rows: list[StepRate]) -> float | None:
    total = sum(r.period_ms for r in rows)
    return None if not rows or total <= 0 else len(rows) * 1000.0 / total


def _token_rate(rows: list[StepRate]) -> float | None:
    known = [r for r in rows if r.tokens is not None]
    total = sum(r.period_ms for r in known)
    return None if not known or total <= 0 else sum(r.tokens or 0.0 for r in known) * 1000.0 / total


def _mfu_over(rows: list[StepRate], flops_of: Any, peak: float | None) -> float | None:
    """MFU over ``rows``: their FLOPs over their summed periods, over the peak; ``None`` when unknown."""
    if peak is None or not rows:
        return None
    flops = [flops_of(r.step) for r in rows]
    if any(f is None for f in flops):
        return None
    total = sum(r.period_ms for r in rows)
    return None if total <= 0 else sum(flops) / (total / 1e3) / peak
