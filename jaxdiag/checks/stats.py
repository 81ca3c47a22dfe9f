"""The noise-aware figures ``compare`` judges beside medians: means, rates and a tail.

A median cannot see a stall on every third step; a mean and the run's rate can,
but one slow step (a garbage collection, a page fault) moves them too. So a mean
or a rate counts as changed only when the change also exceeds a few standard
errors of the difference (``noise_sigmas``): many steps that agree beat one that
does not. A tail (p90) is judged by counting: an unchanged program has at most a
tenth of its steps above the baseline's p90, so many more slow steps than that
(a binomial test) is a regression, a few is noise.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Sequence


@dataclasses.dataclass(frozen=True, slots=True)
class Estimate:
    """A mean or rate and its standard error (``None`` with fewer than 2 values)."""

    value: float
    se: float | None
    n: int


def mean(values: Sequence[float]) -> Estimate | None:
    """The mean of ``values`` and its standard error; ``None`` without values."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    m = statistics.fmean(vals)
    se = statistics.stdev(vals) / math.sqrt(len(vals)) if len(vals) >= 2 else None
    return Estimate(m, se, len(vals))


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """A rate per second, and the time per unit it inverts (with its standard error), on which noise is judged.

    Noise is judged on the time per unit, where one slow step weighs as the time it
    took; on the rate's own scale a single long step would look far more certain.
    """

    per_s: float
    cost_ms: Estimate


def rate(amounts: Sequence[float], periods_ms: Sequence[float]) -> Rate | None:
    """``sum(amounts) / sum(periods)`` per second, with the ratio-estimator error of its inverse.

    ``amounts`` are per step (1 for steps/s, the step's tokens for tokens/s) and
    ``periods_ms`` each step's period; pairs without a positive period and amount are left out.
    """
    pairs = [(float(a), float(p)) for a, p in zip(amounts, periods_ms) if p > 0 and a > 0]
    if not pairs:
        return None
    n = len(pairs)
    total_a = sum(a for a, _ in pairs)
    cost = sum(p for _, p in pairs) / total_a  # ms per unit
    se = None
    if n >= 2:
        resid = sum((p - cost * a) ** 2 for a, p in pairs)
        se = math.sqrt(resid / (n * (n - 1))) / (total_a / n)
    return Rate(1000.0 / cost, Estimate(cost, se, n))


def beyond_noise(a: Estimate, b: Estimate, sigmas: float) -> tuple[bool, float | None]:
    """Whether ``b`` differs from ``a`` by more than ``sigmas`` standard errors, and that margin.

    Without a standard error on either side (a single step), nothing can be said
    about noise, and the change counts.
    """
    if a.se is None or b.se is None:
        return True, None
    margin = sigmas * math.sqrt(a.se**2 + b.se**2)
    return abs(b.value - a.value) > margin, margin


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (linear between order statistics); ``None`` without values."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return None
    pos = q * (len(vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): how often ``k`` or more of ``n`` steps are slow by chance."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))
