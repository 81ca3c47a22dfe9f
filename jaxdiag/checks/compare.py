"""``compare``: hold a report's figures against a baseline and thresholds, one outcome per check.

Absolute checks need no baseline: recompiles after warm-up (the user's; JAX's
own helpers are counted apart), and the optional ceilings on host-wait,
exposed-collective and small-op shares. Relative checks need one. The median
steady step and median tokens/s: with three or more steps one noisy step cannot
move a median, so a timing check is skipped, not failed, when either side has
fewer than ``min_steady_steps``; its limit is the percentage allowed, never
widened by noise (a noisy baseline would make the check unfailable); instead,
when steps scatter more than the percentage allowed, a note says the check may
flake. A median misses a stall on every third step, so the mean step, the p90
step and the run's steps/s and tokens/s are checked too, each noise-aware (see
``checks.stats``): a change must pass the percentage allowed *and* stand out
from the scatter of the steps.

Each check is a short function beside the others it is read with, which is why the module runs past
400 lines.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

from jaxdiag.checks import stats
from jaxdiag.checks.baseline import Baseline, Spread, baseline_from_report
from jaxdiag.checks.thresholds import DEFAULT_CHECK_THRESHOLDS, CheckThresholds

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.reporting.model import Report

#: MAD times this estimates the standard deviation of normally scattered values.
_MAD_TO_SIGMA = 1.4826


@dataclasses.dataclass(frozen=True, slots=True)
class CheckOutcome:
    """The verdict of one check.

    Attributes:
      name: stable identifier (``steady_recompiles``, ``step_time``, ...).
      passed: whether the limit holds (``True`` for a skipped check).
      observed: the figure of the capture under check.
      limit: the most (or, for throughput, the least) it may be.
      expected: the baseline's figure, when there is a baseline.
      message: one line saying what was compared and how it came out.
      skipped: the check could not be judged (too few steady steps, no tokens).
      unit: unit of ``observed``/``limit``/``expected`` (``ms``, ``steps/s``, ``tokens/s``, ``share``, ``count``).
    """

    name: str
    passed: bool
    observed: float | None
    limit: float | None
    expected: float | None = None
    message: str = ""
    skipped: bool = False
    unit: str = ""

    @property
    def status(self) -> str:
        return "skip" if self.skipped else ("pass" if self.passed else "FAIL")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "status": self.status.lower()}


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """Every check's outcome, and the figures they were judged on."""

    outcomes: tuple[CheckOutcome, ...]
    observed: Baseline
    baseline: Baseline | None
    thresholds: CheckThresholds
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)

    @property
    def failures(self) -> tuple[CheckOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.passed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "outcomes": [o.to_dict() for o in self.outcomes],
            "observed": self.observed.to_dict(),
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "thresholds": self.thresholds.to_dict(),
            "notes": list(self.notes),
        }


def compare(
    report: "Report | Baseline",
    baseline: Baseline | None = None,
    thresholds: CheckThresholds = DEFAULT_CHECK_THRESHOLDS,
) -> CheckResult:
    """Check ``report`` against ``baseline`` (absolute checks alone when ``None``).

    Args:
      report: the capture under check, or figures already taken from it.
      baseline: figures of a known-good capture.
      thresholds: what is allowed; a ``None`` threshold leaves its check out.
    """
    obs = report if isinstance(report, Baseline) else baseline_from_report(report)
    th = thresholds
    out: list[CheckOutcome] = []
    if th.max_steady_recompiles is not None:
        out.append(_recompiles(obs, baseline, th.max_steady_recompiles))
    if th.max_internal_recompiles is not None:
        out.append(_internal(obs, baseline, th.max_internal_recompiles))
    if baseline is not None and th.step_time_regression is not None:
        out.append(_step_time(obs, baseline, th))
    if baseline is not None and th.mean_step_time_regression is not None:
        out.append(_mean_step_time(obs, baseline, th))
    if baseline is not None and th.tail_step_time_regression is not None:
        out.append(_tail_step_time(obs, baseline, th))
    if baseline is not None and th.steps_per_s_drop is not None:
        out.append(_run_rate("steps_per_s", obs, baseline, th, th.steps_per_s_drop))
    if baseline is not None and th.tokens_per_s_drop is not None:
        out.append(_tokens(obs, baseline, th))
        out.append(_run_rate("run_tokens_per_s", obs, baseline, th, th.tokens_per_s_drop))
    for name, limit in (
        ("host_wait_share", th.host_wait_share),
        ("exposed_collective_share", th.exposed_collective_share),
        ("small_op_share", th.small_op_share),
    ):
        if limit is not None:
            out.append(_share(name, obs, baseline, limit))
    return CheckResult(tuple(out), obs, baseline, th, tuple(_notes(obs, baseline, th)))


def _recompiles(obs: Baseline, base: Baseline | None, limit: int) -> CheckOutcome:
    return _compile_count(
        "steady_recompiles",
        obs.steady_recompiles,
        None if base is None else base.steady_recompiles,
        limit,
        "recompile(s)",
        "no recompiles after warm-up",
        more=True,
    )


def _internal(obs: Baseline, base: Baseline | None, limit: int) -> CheckOutcome:
    return _compile_count(
        "internal_recompiles",
        obs.internal_recompiles,
        None if base is None else base.internal_recompiles,
        limit,
        "compile(s) of JAX's own helpers",
        "no compiles of JAX's own helpers after warm-up",
        more=False,
    )


def _compile_count(
    name: str, found: Sequence[Any], before: Sequence[Any] | None, limit: int, what: str, none: str, *, more: bool
) -> CheckOutcome:
    """A count of compiles after warm-up against its limit, the first five named."""
    n = len(found)
    expected = None if before is None else float(len(before))
    if n == 0:
        message = none
    else:
        listed = "; ".join(r.describe() for r in found[:5])
        rest = f"; and {n - 5} more" if more and n > 5 else ""
        message = f"{n} {what} after warm-up, {limit} allowed: {listed}{rest}"
    return CheckOutcome(name, n <= limit, float(n), float(limit), expected, message, unit="count")


def _step_time(obs: Baseline, base: Baseline, th: CheckThresholds) -> CheckOutcome:
    allowed = th.step_time_regression or 0.0
    cur, ref = obs.step_time_ms, base.step_time_ms
    short = _too_few("step_time", cur, ref, th.min_steady_steps, "ms")
    if short is not None:
        return short
    assert cur.median is not None and ref.median is not None
    limit = ref.median * (1 + allowed)
    message = (
        f"median steady step {_ms(cur)} vs baseline {_ms(ref)}: {_change(cur.median, ref.median)}, "
        f"limit {limit:.3f} ms (+{allowed:.0%})"
    )
    return CheckOutcome("step_time", cur.median <= limit, cur.median, round(limit, 6), ref.median, message, unit="ms")


def _tokens(obs: Baseline, base: Baseline, th: CheckThresholds) -> CheckOutcome:
    allowed = th.tokens_per_s_drop or 0.0
    cur, ref = obs.tokens_per_s, base.tokens_per_s
    if cur.n == 0 or ref.n == 0:
        side = "this capture" if cur.n == 0 else "the baseline"
        return CheckOutcome(
            "tokens_per_s",
            True,
            cur.median,
            None,
            ref.median,
            f"skipped: {side} has no token counts for its steady steps",
            skipped=True,
            unit="tokens/s",
        )
    short = _too_few("tokens_per_s", cur, ref, th.min_steady_steps, "tokens/s")
    if short is not None:
        return short
    assert cur.median is not None and ref.median is not None
    limit = ref.median * (1 - allowed)
    message = (
        f"median steady tokens/s {cur.median:,.0f} (IQR {cur.iqr or 0:,.0f}, n={cur.n}) vs baseline "
        f"{ref.median:,.0f} (IQR {ref.iqr or 0:,.0f}, n={ref.n}): {_change(cur.median, ref.median)}, "
        f"at least {limit:,.0f} (-{allowed:.0%})"
    )
    return CheckOutcome(
        "tokens_per_s", cur.median >= limit, cur.median, round(limit, 3), ref.median, message, unit="tokens/s"
    )


def _lacks_steps(name: str, obs: Baseline, base: Baseline, need: int, unit: str) -> CheckOutcome | None:
    """A skipped outcome when either side has too few per-step figures for ``name``; else ``None``."""
    if not base.steady_wall_ms and base.steady_steps:
        return CheckOutcome(
            name,
            True,
            None,
            None,
            None,
            f"skipped: the baseline (format {base.version}) has no "
            "per-step figures; make it again with `jaxdiag baseline`",
            skipped=True,
            unit=unit,
        )
    for side, n in (("this capture", len(obs.steady_wall_ms)), ("the baseline", len(base.steady_wall_ms))):
        if n < max(need, 1):
            return CheckOutcome(
                name,
                True,
                None,
                None,
                None,
                f"skipped: {side} has {n} steady step(s), at least {need} are needed",
                skipped=True,
                unit=unit,
            )
    return None


def _mean_step_time(obs: Baseline, base: Baseline, th: CheckThresholds) -> CheckOutcome:
    allowed = th.mean_step_time_regression or 0.0
    short = _lacks_steps("mean_step_time", obs, base, th.min_steady_steps, "ms")
    if short is not None:
        return short
    cur, ref = stats.mean(obs.steady_wall_ms), stats.mean(base.steady_wall_ms)
    assert cur is not None and ref is not None
    limit = ref.value * (1 + allowed)
    noisy, margin = stats.beyond_noise(ref, cur, th.noise_sigmas)
    slower = cur.value > limit
    message = (
        f"mean steady step {_est(cur, 'ms')} vs baseline {_est(ref, 'ms')}: "
        f"{_change(cur.value, ref.value)}, limit {limit:.3f} ms (+{allowed:.0%})"
    )
    if slower and not noisy:
        message += f"; within noise ({th.noise_sigmas:g} s.e. = {margin:.3f} ms): not judged a regression"
    return CheckOutcome(
        "mean_step_time",
        not (slower and noisy),
        round(cur.value, 6),
        round(limit, 6),
        round(ref.value, 6),
        message,
        unit="ms",
    )


def _tail_step_time(obs: Baseline, base: Baseline, th: CheckThresholds) -> CheckOutcome:
    allowed = th.tail_step_time_regression or 0.0
    short = _lacks_steps("p90_step_time", obs, base, th.min_tail_steps, "ms")
    if short is not None:
        return short
    cur, ref = stats.quantile(obs.steady_wall_ms, 0.9), stats.quantile(base.steady_wall_ms, 0.9)
    assert cur is not None and ref is not None
    limit = ref * (1 + allowed)
    n = len(obs.steady_wall_ms)
    slow = sum(1 for v in obs.steady_wall_ms if v > limit)
    p = stats.binomial_tail(slow, n, 0.1)
    failed = p < th.tail_alpha
    message = (
        f"p90 steady step {cur:.3f} ms vs baseline {ref:.3f} ms: {_change(cur, ref)}; {slow} of {n} steps "
        f"({slow / n:.0%}) took longer than {limit:.3f} ms (baseline p90 +{allowed:.0%}), where an unchanged "
        f"program has at most 10%: {'' if failed else 'not '}significant (p={p:.2g}, "
        f"{'<' if failed else '>='} {th.tail_alpha:g})"
    )
    return CheckOutcome("p90_step_time", not failed, round(cur, 6), round(limit, 6), round(ref, 6), message, unit="ms")


def _run_rate(name: str, obs: Baseline, base: Baseline, th: CheckThresholds, allowed: float) -> CheckOutcome:
    """Steps/s or tokens/s of the steady steps: amounts over periods, so time between steps counts."""
    what = base.throughput_unit if name != "steps_per_s" else "steps"
    unit = f"{what}/s"
    short = _lacks_steps(name, obs, base, th.min_steady_steps, unit)
    if short is not None:
        return short
    sides = []
    for b in (obs, base):
        if what == "steps":
            sides.append(stats.rate([1.0] * len(b.steady_period_ms), b.steady_period_ms))
        else:
            known = [(t, p) for t, p in zip(b.steady_tokens, b.steady_period_ms) if t is not None]
            sides.append(stats.rate([t for t, _ in known], [p for _, p in known]) if known else None)
    cur, ref = sides
    if cur is None or ref is None:
        side = "this capture" if cur is None else "the baseline"
        return CheckOutcome(
            name,
            True,
            None,
            None,
            None,
            f"skipped: {side} has no {what.rstrip('s')} counts for its steady steps",
            skipped=True,
            unit=unit,
        )
    limit = ref.per_s * (1 - allowed)
    noisy, margin = stats.beyond_noise(ref.cost_ms, cur.cost_ms, th.noise_sigmas)
    lower = cur.per_s < limit
    fmt = ",.2f" if what == "steps" else ",.0f"
    message = (
        f"steady {unit} {format(cur.per_s, fmt)} (n={cur.cost_ms.n}) vs baseline {format(ref.per_s, fmt)} "
        f"(n={ref.cost_ms.n}): {_change(cur.per_s, ref.per_s)}, at least {format(limit, fmt)} (-{allowed:.0%}); "
        "periods run to the next step's start"
    )
    if lower and not noisy:
        per = "step" if what == "steps" else what.rstrip("s")
        message += (
            f"; within noise (ms per {per} {cur.cost_ms.value:.4g} vs {ref.cost_ms.value:.4g}, "
            f"{th.noise_sigmas:g} s.e. = {margin or 0:.3g}): not judged a regression"
        )
    return CheckOutcome(
        name, not (lower and noisy), round(cur.per_s, 4), round(limit, 4), round(ref.per_s, 4), message, unit=unit
    )


def _est(e: stats.Estimate, unit: str) -> str:
    se = "" if e.se is None else f" ±{e.se:.3f} s.e."
    return f"{e.value:.3f} {unit}{se} (n={e.n})"


def _share(name: str, obs: Baseline, base: Baseline | None, limit: float) -> CheckOutcome:
    value = getattr(obs, name)
    expected = None if base is None else getattr(base, name)
    label = name.replace("_", " ")
    if value is None:
        return CheckOutcome(
            name,
            True,
            None,
            limit,
            expected,
            f"skipped: no steady steps to measure the {label}",
            skipped=True,
            unit="share",
        )
    vs = "" if expected is None else f" (baseline {expected:.1%})"
    message = f"{label} {value:.1%}{vs}, at most {limit:.1%}"
    return CheckOutcome(name, value <= limit, value, limit, expected, message, unit="share")


def _too_few(name: str, cur: Spread, ref: Spread, need: int, unit: str) -> CheckOutcome | None:
    if cur.n >= max(need, 1) and ref.n >= max(need, 1):
        return None
    side, n = ("this capture", cur.n) if cur.n < max(need, 1) else ("the baseline", ref.n)
    return CheckOutcome(
        name,
        True,
        cur.median,
        None,
        ref.median,
        f"skipped: {side} has {n} steady step(s), at least {need} are needed for a median one noisy step cannot move",
        skipped=True,
        unit=unit,
    )


def _scatter(s: Spread) -> float | None:
    if s.median is None or s.mad is None or s.median <= 0 or s.n < 3:
        return None
    return _MAD_TO_SIGMA * s.mad / s.median


def _ms(s: Spread) -> str:
    return f"{s.median:.3f} ms (IQR {s.iqr or 0:.3f}, MAD {s.mad or 0:.3f}, n={s.n})"


def _change(cur: float, ref: float) -> str:
    return f"{(cur - ref) / ref:+.1%}" if ref else "n/a"


def _notes(obs: Baseline, base: Baseline | None, th: CheckThresholds) -> list[str]:
    notes = []
    allowed = th.step_time_regression
    if base is not None and allowed is not None:
        for side, spread in (("baseline", base.step_time_ms), ("capture", obs.step_time_ms)):
            scatter = _scatter(spread)
            if scatter is not None and scatter > allowed:
                notes.append(
                    f"the {side}'s steady steps scatter by ±{scatter:.0%} (1.4826 MAD over the median), more than "
                    f"the {allowed:.0%} step time regression allowed: the check may flake; capture more steps "
                    "on a quieter machine, or allow more"
                )
    if base is not None:
        a, b = _device_names(base.source), _device_names(obs.source)
        if a and b and a != b:
            notes.append(
                f"the baseline ran on {', '.join(a)} and this capture on {', '.join(b)}; timings may not compare"
            )
    if obs.steady_steps == 0 and obs.steps:
        notes.append(f"every one of the {obs.steps} steps compiled: there is no steady state to time")
    if obs.internal_recompiles and th.max_internal_recompiles is None:
        n = len(obs.internal_recompiles)
        notes.append(
            f"{n} compile(s) of JAX's own helpers after warm-up, not counted as the program's recompiles: "
            + "; ".join(r.describe() for r in obs.internal_recompiles[:3])
        )
    return notes


def _device_names(source: Any) -> list[str]:
    """The device names a baseline or report says it ran on (none when a hand-edited file holds no list)."""
    devices = source.get("devices") if isinstance(source, dict) else None
    return [str(d) for d in devices] if isinstance(devices, list) else []
