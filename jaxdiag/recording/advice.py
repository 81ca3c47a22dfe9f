"""Advice across a whole run: turn a compile log into the few changes that remove recompiles.

``advise`` reads records only (no jax), so it serves the ``compiles`` command, the
report and notebooks alike. Each rule looks at every compile of one function:

- an axis that took ``MIN_DISTINCT`` or more sizes -> padding buckets (chosen by
  dynamic programming to minimise padding) against powers of two;
- a leaf flipping between a Python scalar and a typed array -> type it once;
- a static argument with many values -> which one, and how many;
- sharding or memory-kind changes, new function objects, pytree structure
  changes, dtype changes, identical signatures -> what to change.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any, Mapping, Sequence

from jaxdiag.config import DEFAULT_THRESHOLDS, Thresholds, current
from jaxdiag.recording.explain import explain, function_key
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, Change, CompileRecord

#: An axis or static argument needs this many distinct values to be worth advice.
MIN_DISTINCT = 3
_MAX_LISTED = 6


@dataclasses.dataclass(frozen=True, slots=True)
class Advice:
    """One change that would remove recompiles of one function.

    Attributes:
      function: the function's qualname (``module.qualname``).
      kind: ``"padding"``, ``"weak_type"``, ``"static_values"``, ``"sharding"``,
        ``"memory_kind"``, ``"new_function"``, ``"structure"``, ``"dtype"``,
        ``"mesh_context"`` (calls inside and outside ``jax.set_mesh``) or ``"same_signature"``.
      message: what happened, with numbers.
      suggestion: the concrete change to make.
      compiles: compiles this advice concerns.
      compile_s: seconds those compiles took.
      evidence: machine-readable facts behind the message (paths, sizes, buckets).
      source: ``file:line`` where the function is defined, telling apart functions
        that share a qualname.
    """

    function: str
    kind: str
    message: str
    suggestion: str
    compiles: int
    compile_s: float
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["compile_s"] = round(self.compile_s, 6)
        d["evidence"] = dict(self.evidence)
        return d


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
    out: list[Advice] = [a for (fn, site), recs in eager.items() if (a := _eager(fn, site, recs))]
    for (qualname, source), recs in by_function.items():
        if len(recs) < 2:
            continue
        changed = _changes(recs)
        padding = _padding(qualname, recs, thresholds.padding_buckets, changed)
        static = _static_values(qualname, recs)
        covered = frozenset(
            [("shape", p) for a in padding for p in [a.evidence["path"], *(w[0] for w in a.evidence["also"])]]
            + [("static", a.evidence["path"]) for a in static]
        )
        found = [*padding, *static, *_by_change(qualname, recs, changed, covered)]
        out += [dataclasses.replace(a, source=source) for a in found]
    out.sort(key=lambda a: (-a.compile_s, -a.compiles, a.function, a.kind))
    return out


def padding_buckets(sizes: Mapping[int, float], max_buckets: int) -> BucketPlan:
    """Choose at most ``max_buckets`` edges from ``sizes`` minimising mean padding.

    Uses fewer buckets only when they pad no more.

    Args:
      sizes: observed size -> how often it was seen (each compile counts once).
      max_buckets: the most edges to use (at least 1).
    """
    return _least_padding(padding_plans(sizes, max_buckets))


def _least_padding(plans: list[BucketPlan]) -> BucketPlan:
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


# --- rules --------------------------------------------------------------------------


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


def _padding(qualname: str, recs: list[CompileRecord], max_buckets: int, changed: list | None = None) -> list[Advice]:
    """Buckets for an axis that took ``MIN_DISTINCT`` sizes or more.

    The counts are honest: "recompiles from this axis" counts only the compiles whose
    explanation names a size change of this axis, not those other changes caused, and
    the buckets promise sizes, not compiles ("N sizes instead of M"). Padding is
    weighted per compiled size: how often each size is called is not recorded.
    """
    due_by_leaf: Counter[tuple[str, int]] = Counter()
    for _, changes in changed or _changes(recs):
        for c in changes or ():
            if c.what == "shape" and c.axis is not None:
                due_by_leaf[(c.path, c.axis)] += 1
    # (path, rank) -> (record index, shape) of every record holding that leaf
    seen: dict[tuple[str, int], list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
    for idx, rec in enumerate(recs):
        for a in rec.args:
            if a.kind == "array" and a.shape:
                seen[(a.path, len(a.shape))].append((idx, a.shape))
    groups: dict[tuple[tuple[int, int], ...], list[tuple[str, int]]] = {}
    for (path, rank), shapes in seen.items():
        for axis in range(rank):
            series = tuple((idx, shape[axis]) for idx, shape in shapes)
            if len({s for _, s in series}) >= current().min_distinct_values:
                # Leaves sharing one varying axis (tokens and their mask) get one piece of advice.
                groups.setdefault(series, []).append((path, axis))
    name = recs[0].function
    out = []
    for series, where in groups.items():
        path, axis = where[0]
        counts = Counter(s for _, s in series)
        # Fewer buckets than sizes, or the advice would save nothing.
        plans = padding_plans(counts, min(max_buckets, len(counts) - 1))
        plan = _least_padding(plans)
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
            f"({_listing(sorted(counts))}); {due} recompile(s) came from a size change of this axis"
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
                sum(recs[i].compile_s for i, _ in series),
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


def _static_values(qualname: str, recs: list[CompileRecord]) -> list[Advice]:
    values: dict[str, dict[str, list[CompileRecord]]] = defaultdict(lambda: defaultdict(list))
    for rec in recs:
        for a in rec.args:
            if a.kind == "static":
                values[a.path][str(a.value)].append(rec)
    out = []
    for path, by_value in values.items():
        if len(by_value) < current().min_distinct_values:
            continue
        involved = [r for rs in by_value.values() for r in rs]
        label = next((a.label for r in recs for a in r.args if a.path == path and a.label), path)
        out.append(
            Advice(
                qualname,
                "static_values",
                f"{recs[0].function}: static argument {label} took {len(by_value)} values "
                f"({_listing(list(by_value))}), each a separate compile",
                f"make {label} a traced argument (drop it from static_argnums/static_argnames) "
                f"if it only feeds arithmetic, or limit it to a few values",
                len(involved),
                sum(r.compile_s for r in involved),
                {"path": path, "values": list(by_value), "distinct": len(by_value)},
            )
        )
    return out


_RULES: dict[str, tuple[str, str, str]] = {
    # change.what -> (advice kind, message template, suggestion template)
    "weak_type": (
        "weak_type",
        "{path} flipped between a Python scalar and a typed array",
        "pass a consistently typed array, e.g. jnp.{dtype}(x) every time",
    ),
    # Not jit's in_shardings: for an input already committed elsewhere it raises
    # "Sharding passed to jit does not match the sharding on the respective arg".
    "sharding": (
        "sharding",
        "{path} arrived with different shardings ({values})",
        "place {path} with jax.device_put(x, sharding) once, with one sharding, "
        "before the loop, and pass the placed array every call",
    ),
    "memory_kind": (
        "memory_kind",
        "{path} arrived in different memory kinds ({values})",
        "keep {path} in one memory kind (device_put it once)",
    ),
    "dtype": ("dtype", "{path} arrived with different dtypes ({values})", "cast {path} to one dtype before the call"),
    "function": (
        "new_function",
        "was jitted as a new function object or closure",
        "hoist jax.jit out of the loop / don't re-create the closure: jit once and pass changing values as arguments",
    ),
    "structure": (
        "structure",
        "{path} changed its pytree structure",
        "keep the argument pytree fixed: always pass {path} (a placeholder when unused), or split the function",
    ),
    "container": (
        "container",
        "{path} came in different container types ({values}) holding the same leaves",
        "pass {path} as one container type every call (e.g. always a tuple)",
    ),
    "config": (
        "config",
        "jax config {path} differed between calls ({values})",
        "set {path} once, before the first call (jax.config.update at start-up), "
        "instead of changing it or its context manager around calls",
    ),
    "jit_options": (
        "jit_options",
        "was jitted again with other jit options ({path}: {values})",
        "build one jax.jit of the function, with the options you want, and call that object everywhere",
    ),
    "shape": (
        "shape",
        "{path} changed size once ({values})",
        "if the size can vary, pad {path} to one size (the largest seen: {largest}); "
        "if it changes only once, this recompile is expected",
    ),
    "static": (
        "static",
        "static argument {path} changed ({values})",
        "keep {path} fixed, or make it a traced argument (drop it from static_argnums/"
        "static_argnames, or from the module's static fields) if it only feeds arithmetic",
    ),
}


#: The config states that hold the mesh in context: not options ``jax.config.update`` takes.
_MESH_STATES = ("mesh_context_manager", "abstract_mesh_context_manager")
_MESH_RULE = (
    "mesh_context",
    "was called both inside and outside a mesh context (`with jax.set_mesh(mesh)`), which JAX traces separately",
    "make every call of {function} inside one `with jax.set_mesh(mesh):` (or every call outside it); "
    "to run it outside, give its inputs their placement instead (jax.device_put(x, "
    "NamedSharding(mesh, P(...))) or jit's in_shardings)",
)


def _by_change(
    qualname: str, recs: list[CompileRecord], changed: list, covered: frozenset[tuple[str, str]] = frozenset()
) -> list[Advice]:
    """One piece of advice per (kind of change, path); ``covered`` are told by padding or static values."""
    # (what, path) -> the records with such a change, and the changes themselves
    hits: dict[tuple[str, str], dict[int, CompileRecord]] = defaultdict(dict)
    seen_changes: dict[tuple[str, str], list[Change]] = defaultdict(list)
    same: list[CompileRecord] = []
    for rec, changes in changed:
        if changes is None:
            continue
        if not changes:
            same.append(rec)
        for c in changes:
            if c.what in _RULES and (c.what, c.path) not in covered:
                hits[(c.what, c.path)][id(rec)] = rec
                seen_changes[(c.what, c.path)].append(c)
    name = recs[0].function
    out = []
    for (what, path), by_id in hits.items():
        kind, message, suggestion = _MESH_RULE if what == "config" and path in _MESH_STATES else _RULES[what]
        involved = list(by_id.values())
        found = seen_changes[(what, path)]
        values = list(dict.fromkeys(v for c in found for v in (c.old, c.new) if v is not None))
        shown_values = _one_mesh(values) if what in ("jit_options", "sharding") else values
        label = path or "the argument tree"
        if what == "structure":
            verbs = {"appeared" if c.old is None else "disappeared" if c.new is None else "changed" for c in found}
            message = "{path} " + "/".join(sorted(verbs)) + " (pytree structure)"
        label = next((c.label for c in found if c.label), label)
        numbers = [int(v) for v in values if v.isdigit()]
        fill = {
            "path": label,
            "values": _listing(shown_values),
            "dtype": _leaf_dtype(involved[-1], path) or "float32",
            "largest": max(numbers) if numbers else "?",
            "function": name,
        }
        out.append(
            Advice(
                qualname,
                kind,
                f"{name}: {message.format(**fill)}; {len(involved)} recompile(s)",
                suggestion.format(**fill),
                len(involved),
                sum(r.compile_s for r in involved),
                {"path": path, "what": what, "values": values, "compile_indices": [r.compile_index for r in involved]},
            )
        )
    if same:
        out.append(
            Advice(
                qualname,
                "same_signature",
                f"{name}: compiled {len(same)} time(s) with a signature identical to an earlier one",
                "cause unknown (signature, jit options and config states compared equal): look for "
                "jax.clear_caches() and for inputs committed to other devices around the calls",
                len(same),
                sum(r.compile_s for r in same),
                {"compile_indices": [r.compile_index for r in same]},
            )
        )
    return out


def _eager(function: str, site: str | None, recs: list[CompileRecord]) -> Advice | None:
    """An eager op that one line of the user's ran on several shapes or dtypes."""
    again = [r for r in recs if r.explanation is not None and r.explanation.changes]
    if not again or site is None:
        return None
    where = f"{site} ({recs[0].call_function})" if recs[0].call_function else site
    return Advice(
        f"jax.{function}",
        "eager_op",
        f"eager {function} at {where} compiled {len(recs)} times, {len(again)} for new argument "
        f"shapes or dtypes ({_summary_tail(again[-1])})",
        f"move the {function} at {where} inside the jitted step, so that it is part of that "
        "compile, or give it arguments of one shape and dtype",
        len(again),
        sum(r.compile_s for r in again),
        {"call_site": site, "compile_indices": [r.compile_index for r in again]},
        source=site,
    )


def _one_mesh(values: list[str]) -> list[str]:
    """Specs on one mesh, the mesh said once: ``["P('x',) on mesh(x=8)", "P() on mesh(x=8)"]`` ->
    ``["P('x',)", "P() (on mesh(x=8))"]``."""
    meshes = {v.partition(" on ")[2] for v in values}
    if len(meshes) != 1 or not next(iter(meshes)):
        return values
    specs = [v.partition(" on ")[0] for v in values]
    return [*specs[:-1], f"{specs[-1]} (on {next(iter(meshes))})"]


def _leaf_dtype(rec: CompileRecord, path: str) -> str | None:
    for a in rec.args:
        if a.path == path:
            return a.dtype
    return None


def _listing(values: Sequence[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:_MAX_LISTED])
    return shown + (f", ... {len(values) - _MAX_LISTED} more" if len(values) > _MAX_LISTED else "")


def _summary_tail(record: Any) -> str:
    """The change part of a record's explanation ("x shape axis 0 changed 2 -> 3")."""
    summary = record.explanation.summary if record.explanation is not None else "cause unknown"
    return summary.split(": ", 1)[-1]
