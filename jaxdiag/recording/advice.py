"""Advice across a whole run: turn a compile log into the few changes that remove recompiles.

``advise`` reads records only (no jax), so it serves the ``compiles`` command, the
report and notebooks alike. Each rule looks at every compile of one function:

- an axis that took ``MIN_DISTINCT`` or more sizes -> padding buckets (chosen by
  dynamic programming to minimise padding) against powers of two;
- a leaf flipping between a Python scalar and a typed array -> type it once;
- a static argument with many values -> which one, and how many;
- sharding or memory-kind changes, new function objects, pytree structure
  changes, dtype changes, identical signatures -> what to change.

``padding`` holds the padding rule and its bucket planning; ``advice_rules`` the
others, and the ``Advice`` type.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Sequence

from jaxdiag.config import DEFAULT_THRESHOLDS, Thresholds
from jaxdiag.recording.advice_rules import Advice, change_advice, eager_advice, static_value_advice
from jaxdiag.recording.explain import explain, function_key
from jaxdiag.recording.padding import BucketPlan, padding_advice, padding_buckets, padding_plans, power_of_two_plan
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, Change, CompileRecord

__all__ = [
    "MIN_DISTINCT",
    "Advice",
    "BucketPlan",
    "advise",
    "padding_buckets",
    "padding_plans",
    "power_of_two_plan",
    "with_explanations",
]

#: An axis or static argument needs this many distinct values to be worth advice.
MIN_DISTINCT = 3


def advise(records: Sequence[CompileRecord], thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[Advice]:
    """Advise on every function that compiled more than once, costliest first.

    Records without an explanation (hand-written logs, old files) are explained here
    against the earlier records of the same function and process.
    """
    by_function: dict[tuple[str, str | None], list[CompileRecord]] = defaultdict(list)
    eager: dict[tuple[str, str | None], list[CompileRecord]] = defaultdict(list)
    for rec in records:
        if rec.origin == JAX_INTERNAL_ORIGIN:  # JAX's own helpers: per op and calling line
            eager[(rec.function, rec.call_site)].append(rec)
            continue
        by_function[function_key(rec)].append(rec)
    out: list[Advice] = [a for (fn, site), recs in eager.items() if (a := eager_advice(fn, site, recs))]
    for (qualname, source), recs in by_function.items():
        if len(recs) < 2:
            continue
        changed = _changes(recs)
        padding = padding_advice(qualname, recs, thresholds.padding_buckets, thresholds.min_distinct_values, changed)
        static = static_value_advice(qualname, recs, thresholds.min_distinct_values)
        covered = frozenset(
            [("shape", p) for a in padding for p in [a.evidence["path"], *(w[0] for w in a.evidence["also"])]]
            + [("static", a.evidence["path"]) for a in static]
        )
        found = [*padding, *static, *change_advice(qualname, recs, changed, covered)]
        out += [dataclasses.replace(a, source=source) for a in found]
    out.sort(key=lambda a: (-a.compile_s, -a.compiles, a.function, a.kind))
    return out


def with_explanations(records: Sequence[CompileRecord]) -> tuple[CompileRecord, ...]:
    """``records`` with a missing explanation filled in for every compile after a function's first.

    Logs written by ``jaxdiag.jit`` carry explanations already; hand-written or
    older logs may not. Each record is explained against the earlier records of
    the same function in the same process (compile indices restart per process).
    """
    seen: dict[tuple[tuple[str, str | None], int | None], list[CompileRecord]] = defaultdict(list)
    out = []
    for rec in records:
        earlier = seen[(function_key(rec), rec.pid)]
        if rec.explanation is None and rec.compile_index > 1 and earlier:
            rec = dataclasses.replace(rec, explanation=explain(earlier, rec))
        earlier.append(rec)
        out.append(rec)
    return tuple(out)


def _changes(recs: list[CompileRecord]) -> list[tuple[CompileRecord, tuple[Change, ...] | None]]:
    """Each record with its changes; ``None`` for a first compile."""
    return [(r, None if r.explanation is None else r.explanation.changes) for r in with_explanations(recs)]
