"""Say which steps something happened in the way a person would: "at steps 4, 9, 14 and 19 (every 5th step)".

Findings name the steps a problem hit, so that a stall planted every fifth
iteration reads as such rather than as an average over all steps.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

#: Steps listed one by one before the list is shortened with "...".
MAX_LISTED = 6


def ordinal(n: int) -> str:
    """``2`` -> ``"2nd"``, ``11`` -> ``"11th"``, ``23`` -> ``"23rd"``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def join(items: Sequence[str]) -> str:
    """``["a", "b", "c"]`` -> ``"a, b and c"``."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def describe_steps(steps: Iterable[int], all_steps: Iterable[int] = ()) -> str:
    """Where ``steps`` fall, e.g. ``"at step 6"``, ``"at steps 3, 6, 9 and 12 (every 3rd step)"``,
    ``"at steps 4-9"``, ``"in every step"``.

    Args:
      steps: the step numbers something happened in (negative ones mean outside every step).
      all_steps: every analysed step, to say "every step" when ``steps`` are all of them.
    """
    inside = sorted({int(s) for s in steps if int(s) >= 0})
    outside = any(int(s) < 0 for s in steps)
    every = sorted({int(s) for s in all_steps if int(s) >= 0})
    if not inside:
        return "outside the captured steps" if outside else "in no step"
    tail = " and outside the captured steps" if outside else ""
    if len(inside) == 1:
        return f"at step {inside[0]}{tail}"
    if every and inside == every and len(every) > 2:
        return f"in every step ({inside[0]}-{inside[-1]}){tail}"
    missing = sorted(set(every) - set(inside))
    if every and set(inside) <= set(every) and len(inside) > 3 and 0 < len(missing) <= min(3, len(inside) // 3):
        but = join([str(m) for m in missing])
        return f"in every step ({every[0]}-{every[-1]}) but {'step' if len(missing) == 1 else 'steps'} {but}{tail}"
    strides = {b - a for a, b in zip(inside, inside[1:])}
    if len(strides) == 1:
        stride = strides.pop()
        if stride == 1 and len(inside) > 2:
            return f"at steps {inside[0]}-{inside[-1]}{tail}"
        listed = _listed(inside)
        if len(inside) >= 3:
            return f"at steps {listed} (every {ordinal(stride)} step){tail}"
        return f"at steps {listed}{tail}"
    return (
        f"at {len(inside)} steps: {_listed(inside)}{tail}"
        if len(inside) > MAX_LISTED
        else f"at steps {_listed(inside)}{tail}"
    )


def _listed(steps: Sequence[int]) -> str:
    if len(steps) > MAX_LISTED:
        return ", ".join(str(s) for s in steps[: MAX_LISTED - 1]) + f", ..., {steps[-1]}"
    return join([str(s) for s in steps])


def describe_amounts(per_step: Mapping[int, float], all_steps: Sequence[int], unit: str = "ms") -> str:
    """How much, and where: ``"15.6 ms each at steps 3, 6, 9 and 12 (every 3rd step); 0.43 ms at most in the 9 others"``.

    The *hit* steps are those above the widest split (at least ``SPLIT_RATIO``
    times) in the sorted amounts, a split between two steps that both have some before the one
    down to the steps that have none; when there is such a split and the hit steps
    are at most half the steps, they are named with their amount and the rest
    summed up. Otherwise the mean over the affected steps is given, with where
    they are.
    """
    values = {int(s): float(v) for s, v in per_step.items() if v > 0}
    if not values:
        return "in no step"
    n_all = len(set(all_steps) | set(values))
    total = sum(values.values())
    hit = _hit_steps(values, n_all)
    if hit:
        amounts = [values[s] for s in hit]
        lo, hi = min(amounts), max(amounts)
        if len(hit) == 1:
            amount = f"{fmt_ms(hi)} {unit}"
        elif hi <= 1.5 * lo:
            amount = f"{fmt_ms(_median(amounts))} {unit} each"
        else:
            amount = f"{fmt_ms(lo)}-{fmt_ms(hi)} {unit}"
        others = n_all - len(hit)
        rest = [v for s, v in values.items() if s not in hit]
        text = f"{amount} {describe_steps(hit, all_steps)}"
        if rest:
            text += f"; {fmt_ms(max(rest))} {unit} at most in the {others} other{'s' if others != 1 else ''}"
        return text
    where = describe_steps(values, all_steps)
    if len(values) == 1:
        return f"{fmt_ms(total)} {unit} {where}"
    count = "" if where.startswith("in every step") else f" ({len(values)} of {n_all} steps)"
    return f"{fmt_ms(total / len(values))} {unit} per step on average, {where}{count}"


#: Amounts this many times apart split the steps a problem hit from the rest.
SPLIT_RATIO = 3.0
#: A narrower split still counts when the hit steps average this many times the rest
#: and the split is ``WIDER`` times as wide (in log terms) as any other between neighbours.
MEAN_RATIO = 2.0
WIDER = 1.5


def _hit_steps(values: Mapping[int, float], n_all: int) -> list[int]:
    """The steps above the widest split of the amounts (steps without any count as zero), or ``[]``."""
    import math

    ordered = sorted(values.items(), key=lambda kv: -kv[1])
    amounts = [v for _, v in ordered] + [0.0] * (n_all - len(values))
    gaps = [math.inf if b <= 0 else a / b for a, b in zip(amounts, amounts[1:])]
    candidates = range(1, min(len(amounts), n_all // 2 + 1))
    if not candidates:
        return []
    # Steps without any are a split of infinite width, but a wide split among the steps that have
    # some comes first: 20 ms at four steps and 0.2 ms at two others name the four, not all six.
    among = [i for i in candidates if SPLIT_RATIO <= gaps[i - 1] < math.inf]
    best = max(among or candidates, key=lambda i: (gaps[i - 1], -i))
    ratio = gaps[best - 1]
    if ratio < SPLIT_RATIO:
        top, rest = amounts[:best], amounts[best:]
        others = [math.log(g) for j, g in enumerate(gaps) if j != best - 1 and math.isfinite(g)]
        wide = math.log(ratio) >= WIDER * max(others, default=0.0) if ratio > 1 else False
        if not (wide and sum(top) / len(top) >= MEAN_RATIO * (sum(rest) / len(rest))):
            return []
    return sorted(s for s, _ in ordered[:best])


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def fmt_ms(ms: float) -> str:
    """A duration with as many digits as it deserves: ``173``, ``15.6``, ``0.42``."""
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 1 else f"{ms:.2f}"
