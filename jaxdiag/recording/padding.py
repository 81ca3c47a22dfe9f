"""Padding advice: an axis that took many sizes, and the buckets that would cover them.

``padding_plans`` chooses bucket edges by dynamic programming to minimise the mean
padding, for each number of buckets; ``power_of_two_plan`` is the simple alternative
the advice compares them with. Records only, no jax.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Mapping

from jaxdiag.recording.advice_rules import Advice, listing
from jaxdiag.recording.records import CompileRecord


@dataclasses.dataclass(frozen=True, slots=True)
class BucketPlan:
    """Sizes padded up to bucket edges, and what that costs.

    Attributes:
      edges: bucket sizes, ascending; every observed size pads to the first edge >= it.
      overhead: mean fraction of padded elements along the axis (0.25 = 25%),
        weighted by how often each size was seen.
    """

    edges: tuple[int, ...]
    overhead: float

    @property
    def compiles(self) -> int:
        return len(self.edges)


def padding_buckets(sizes: Mapping[int, float], max_buckets: int) -> BucketPlan:
    """Choose at most ``max_buckets`` edges from ``sizes`` minimising mean padding.

    Uses fewer buckets only when they pad no more.

    Args:
      sizes: observed size -> how often it was seen (each compile counts once).
      max_buckets: the most edges to use (at least 1).
    """
    return least_padding(padding_plans(sizes, max_buckets))


def least_padding(plans: list[BucketPlan]) -> BucketPlan:
    if not plans:
        return BucketPlan((), 0.0)
    least = min(p.overhead for p in plans)
    return next(p for p in plans if p.overhead <= least + 1e-12)


def padding_plans(sizes: Mapping[int, float], max_buckets: int) -> list[BucketPlan]:
    """The least-padding plan with 1, 2, ... ``max_buckets`` buckets (fewer if fewer sizes).

    Dynamic programming over the sorted distinct sizes, O(n^2 k): the largest size
    is always an edge, and each bucket pads its sizes up to its own largest one.
    """
    xs = sorted(s for s, w in sizes.items() if w > 0)
    if not xs:
        return []
    n, k_max = len(xs), max(1, min(max_buckets, len(xs)))
    cum_w, cum_ws = [0.0], [0.0]
    for s in xs:
        w = float(sizes[s])
        cum_w.append(cum_w[-1] + w)
        cum_ws.append(cum_ws[-1] + w * s)

    def cost(i: int, j: int) -> float:  # weighted padded fraction of sizes i..j padded to xs[j]
        if xs[j] == 0:
            return 0.0
        return (cum_w[j + 1] - cum_w[i]) - (cum_ws[j + 1] - cum_ws[i]) / xs[j]

    best = [cost(0, j) for j in range(n)]  # best[j]: sizes 0..j in the current number of buckets
    back: list[list[int]] = [[-1] * n]
    totals = [best[n - 1]]
    for _ in range(1, k_max):
        # best[i] + cost(i+1, j) = base_i + cum_ws[i+1] / xs[j] + (cum_w[j+1] - cum_ws[j+1] / xs[j]),
        # so each j is one pass of list arithmetic (xs[j] > 0 for j >= 1: sizes are distinct).
        base = [b - w for b, w in zip(best, cum_w[1:])]
        nxt, arg = [float("inf")] * n, [-1] * n
        for j in range(1, n):
            t = 1.0 / xs[j]
            vals = [b + s * t for b, s in zip(base[:j], cum_ws[1 : j + 1])]
            low = min(vals)
            nxt[j], arg[j] = low + cum_w[j + 1] - cum_ws[j + 1] * t, vals.index(low)
        best = nxt
        back.append(arg)
        totals.append(best[n - 1])
    plans = []
    for k, total in enumerate(totals, start=1):
        edges, j = [], n - 1
        for level in range(k - 1, -1, -1):
            edges.append(xs[j])
            j = back[level][j]
        plans.append(BucketPlan(tuple(reversed(edges)), max(0.0, total / cum_w[-1])))
    return plans


def power_of_two_plan(sizes: Mapping[int, float]) -> BucketPlan:
    """Pad each size to the next power of two: the simple alternative to chosen buckets."""
    pad, total, edges = 0.0, 0.0, set()
    for s, w in sizes.items():
        edge = 1 << (s - 1).bit_length() if s > 0 else 0
        edges.add(edge)
        total += w
        pad += w * ((edge - s) / edge if edge else 0.0)
    return BucketPlan(tuple(sorted(edges)), pad / total if total else 0.0)


def padding_advice(
    qualname: str, recs: list[CompileRecord], max_buckets: int, min_distinct_values: int, changed: list
) -> list[Advice]:
    """Buckets for an axis that took ``min_distinct_values`` sizes or more; ``changed`` as ``advise`` finds them.

    The counts are honest: "recompiles from this axis" counts only the compiles whose
    explanation names a size change of this axis, not those other changes caused, and
    the buckets promise sizes, not compiles ("N sizes instead of M"). Padding is
    weighted per compiled size: how often each size is called is not recorded.
    """
    due_by_leaf: Counter[tuple[str, int]] = Counter()
    for _, changes in changed:
        for c in changes or ():
            if c.what == "shape" and c.axis is not None:
                due_by_leaf[(c.path, c.axis)] += 1
    # Records with one argument list share its shapes: a log reader holds each distinct list once,
    # so a long log's records fall into a few of these.
    sharing: dict[int, list[int]] = {}
    for idx, rec in enumerate(recs):
        sharing.setdefault(id(rec.args), []).append(idx)
    members = list(sharing.values())
    # (path, rank) -> (member group, shape) of every group holding that leaf
    seen: dict[tuple[str, int], list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
    for group, indices in enumerate(members):
        for a in recs[indices[0]].args:
            if a.kind == "array" and a.shape:
                seen[(a.path, len(a.shape))].append((group, a.shape))
    groups: dict[tuple[tuple[int, int], ...], list[tuple[str, int]]] = {}
    for (path, rank), shapes in seen.items():
        for axis in range(rank):
            series = tuple((group, shape[axis]) for group, shape in shapes)
            if len({s for _, s in series}) >= min_distinct_values:
                # Leaves sharing one varying axis (tokens and their mask) get one piece of advice.
                groups.setdefault(series, []).append((path, axis))
    name = recs[0].function
    out = []
    for series, where in groups.items():
        path, axis = where[0]
        counts: Counter[int] = Counter()
        for group, size in series:
            counts[size] += len(members[group])
        # Fewer buckets than sizes, or the advice would save nothing.
        plans = padding_plans(counts, min(max_buckets, len(counts) - 1))
        plan = least_padding(plans)
        pow2 = power_of_two_plan(counts)
        involved = sum(counts.values())
        due = due_by_leaf[(path, axis)]
        label = next((a.label for r in recs for a in r.args if a.path == path and a.label), path)
        also = [
            f"{next((x.label for r in recs for x in r.args if x.path == p and x.label), p)} axis {a}"
            for p, a in where[1:]
        ]
        message = (
            f"{name}: {label} axis {axis} took {len(counts)} sizes "
            f"({listing(sorted(counts))}); {due} recompile(s) came from a size change of this axis"
            + (f"; also {', '.join(also[:3])}" if also else "")
        )
        suggestion = (
            f"pad {label} axis {axis} up to buckets {list(plan.edges)}: {plan.compiles} sizes "
            f"instead of {len(counts)} (up to {len(counts) - plan.compiles} fewer compiles), "
            f"{plan.overhead:.1%} mean padding per compiled size; powers of two "
            f"{list(pow2.edges)}: {pow2.compiles} sizes, {pow2.overhead:.1%} padding"
        )
        out.append(
            Advice(
                qualname,
                "padding",
                message,
                suggestion,
                involved,
                sum(recs[i].compile_s for group, _ in series for i in members[group]),
                {
                    "path": path,
                    "axis": axis,
                    "also": [list(w) for w in where[1:]],
                    "sizes": {str(s): c for s, c in sorted(counts.items())},
                    "buckets": list(plan.edges),
                    "bucket_compiles": plan.compiles,
                    "padding_overhead": round(plan.overhead, 6),
                    "actual_compiles": involved,
                    "recompiles_from_axis": due,
                    "distinct_sizes": len(counts),
                    "plans": [{"buckets": list(p.edges), "padding_overhead": round(p.overhead, 6)} for p in plans],
                    "pow2_buckets": list(pow2.edges),
                    "pow2_compiles": pow2.compiles,
                    "pow2_padding_overhead": round(pow2.overhead, 6),
                },
            )
        )
    return out
