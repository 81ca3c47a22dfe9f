"""The sharding analysis's findings: implicit resharding, replicated parameters, sharding recompiles.

Kept apart from ``analyses.sharding`` (which joins the records' facts to the
timeline) so that each stays short; these read its ``FunctionSharding`` entries
and the records, and each finding says what it cost and what to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from jaxdiag.analyses.base import Finding, Severity, severity_for
from jaxdiag.config import Thresholds
from jaxdiag.sharding.facts import ShardingFacts, format_bytes
from jaxdiag.sharding.tiles import spec_text

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.sharding import CollectiveUse, FunctionSharding


def _axes_text(axes: tuple[str, ...] | None) -> str:
    if axes is None:
        return "devices that fit no mesh axis"
    if not axes:
        return "no mesh axis"
    return (
        "mesh axis " + ", ".join(repr(a) for a in axes)
        if len(axes) == 1
        else "mesh axes " + ", ".join(repr(a) for a in axes)
    )


def resharding_findings(functions: Sequence[FunctionSharding], wall_ms: float, thresholds: Thresholds) -> list[Finding]:
    out: list[Finding] = []
    for f in functions:
        uses = sorted(
            (u for u in f.collectives if u.origin == "resharding"),
            key=lambda u: -u.collective.bytes * u.collective.count,
        )
        for use in uses[: thresholds.max_reshard_findings]:
            out.append(_resharding_finding(f, use, wall_ms, thresholds))
    return out


def _resharding_finding(f: FunctionSharding, use: CollectiveUse, wall_ms: float, thresholds: Thresholds) -> Finding:
    c = use.collective
    leaves = [leaf for name in c.arrays if (leaf := f.facts.input_named(name)) is not None]
    undone = [leaf for leaf in leaves if leaf.chosen_by == "user" and set(leaf.sharded_axes()) & set(c.mesh_axes or ())]
    what = {
        "all-gather": "gathers",
        "all-to-all": "moves (all-to-all)",
        "collective-permute": "shifts between devices",
        "collective-broadcast": "broadcasts",
        "ragged-all-to-all": "moves (ragged all-to-all)",
    }.get(c.kind, "moves")
    target = ", ".join(
        f"{leaf.label} ({leaf.dtype}[{','.join(map(str, leaf.shape or ()))}], {leaf.spec_text})" for leaf in leaves
    ) or (", ".join(c.arrays) if c.arrays else "an intermediate array")
    per_call = c.bytes * c.count
    loop = f" ({c.count} runs per call)" if c.count > 1 else ""
    # Newer XLA names a gather of an argument by the argument (already the user's name, see
    # ``sharding.names``) rather than by the JAX op that consumes it.
    argument = f.facts.input_named(c.op_name) if c.op_name else None
    source = f"the argument {argument.label}" if argument is not None else c.op_name or "no JAX op"
    consumer = "an op" if argument is not None else _prim(c.op_name)
    msg = (
        f"{f.function} {what} {target} over {_axes_text(c.mesh_axes)} on every call: "
        f"{format_bytes(per_call)} per device per call{loop} ({c.name}, from {source})."
    )
    if undone:
        names = ", ".join(leaf.label for leaf in undone)
        msg += f" The compiler undoes the sharding given to {names}."
        suggested = {leaf.label: moved for leaf in undone if (moved := moved_spec(leaf, c.mesh_axes or ())) is not None}
        moves = [
            f"{leaf.label}: {leaf.spec_text} -> {spec_text(suggested[leaf.label])}"
            for leaf in undone
            if leaf.label in suggested
        ]
        suggestion = (
            f"{names} is sharded but its consumer ({consumer}) needs it whole along "
            f"{_axes_text(c.mesh_axes)}. "
            + (
                f"Split it over that axis on another dimension, one its consumer keeps sharded "
                f"({'; '.join(moves)}), or replicate it if it is small."
                if moves
                else "Replicate it if it is small, or shard the consumer's other operand to match it."
            )
        )
    else:
        suggested = {}
        suggestion = (
            f"The specs of {f.function}'s inputs and what its ops need disagree, so the compiler "
            "reshards in between. Give producer and consumer the same layout: change the input "
            "specs, or pin the layout you want with jax.lax.with_sharding_constraint."
        )
    time_ms = use.timeline_ms
    severity = (
        severity_for(time_ms, wall_ms, thresholds) if time_ms > 0 else (Severity.WARNING if undone else Severity.INFO)
    )
    return Finding(
        kind="implicit_resharding",
        severity=severity,
        time_lost_ms=time_ms,
        message=msg,
        suggestion=suggestion,
        evidence={
            "function": f.function,
            "module": f.facts.module,
            "op": c.name,
            "kind": c.kind,
            "arrays": list(c.arrays),
            "mesh_axes": None if c.mesh_axes is None else list(c.mesh_axes),
            "bytes_per_call": per_call,
            "op_name": c.op_name,
            "user_specs": {leaf.label: leaf.spec_text for leaf in leaves},
            "suggested_specs": {label: list(spec) for label, spec in suggested.items()},
        },
    )


def moved_spec(leaf: Any, axes: Sequence[str]) -> tuple[Any, ...] | None:
    """``leaf``'s spec with the gathered ``axes`` moved to another, unsharded dimension.

    For ``x @ w`` with ``w`` split over its contracted rows (``P('model', None)``), the
    columns (``P(None, 'model')``); for ``x @ w.T`` with ``w`` split over its columns, the
    rows. The last free dimension other than the gathered one is chosen; ``None`` when
    there is none (a vector, or every other dimension sharded already), so the advice
    never repeats the spec the leaf has.
    """
    if leaf.spec is None or leaf.shape is None or len(leaf.shape) < 2:
        return None
    spec = list(leaf.spec) + [None] * (len(leaf.shape) - len(leaf.spec))
    wanted = set(axes)
    held = [i for i, e in enumerate(spec) if e is not None and wanted & ({e} if isinstance(e, str) else set(e))]
    if len(held) != 1:
        return None
    (i,) = held
    free = [j for j, e in enumerate(spec) if j != i and e is None]
    if not free:
        return None
    j = free[-1]
    spec[j], spec[i] = spec[i], None
    return tuple(spec)


def _prim(op_name: str) -> str:
    return op_name.split(";")[-1].rsplit("/", 1)[-1] or "an op"


def collectives_of(f: FunctionSharding, leaf: Any) -> list[tuple[CollectiveUse, float]]:
    """The collectives of ``f`` that move ``leaf`` or reduce its update, each with ``leaf``'s share.

    One collective often carries several arrays (XLA combines the gradient
    all-reduces of a step); ``leaf``'s share of its time is its share of the bytes of
    the arrays it carries (equal shares where their sizes are unknown).
    """
    out = []
    for use in f.collectives:
        names = use.collective.arrays
        if not names or not ({leaf.name, leaf.path} & set(names)):
            continue
        sizes = [(x.bytes_per_device or 0) if (x := f.facts.input_named(n)) is not None else 0 for n in names]
        total = sum(sizes)
        share = (leaf.bytes_per_device or 0) / total if total > 0 else 1.0 / len(names)
        out.append((use, share))
    return out


def replicated_findings(
    functions: Sequence[FunctionSharding], thresholds: Thresholds, wall_ms: float = 0.0
) -> list[Finding]:
    out: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for f in functions:
        n = f.facts.mesh.n_devices
        if n <= 1:
            continue
        big = [
            leaf
            for leaf in f.facts.inputs
            if leaf.replicated
            and (leaf.bytes_per_device or 0) >= thresholds.replicated_param_bytes
            and (f.qualname, leaf.path) not in seen
        ]
        if not big:
            continue
        seen.update((f.qualname, leaf.path) for leaf in big)
        big.sort(key=lambda leaf: -(leaf.bytes_per_device or 0))
        total = sum(leaf.bytes_per_device or 0 for leaf in big)
        shown = ", ".join(f"{leaf.label} ({format_bytes(leaf.bytes_per_device)})" for leaf in big[:5])
        more = f" and {len(big) - 5} more" if len(big) > 5 else ""
        axes = f.facts.mesh.axis_names
        # The collectives these arrays cause (a gradient all-reduce), with their share of its time.
        paid: dict[str, tuple[CollectiveUse, float]] = {}
        for leaf in big:
            for use, share in collectives_of(f, leaf):
                was = paid.get(use.collective.name, (use, 0.0))[1]
                paid[use.collective.name] = (use, was + share)
        time_ms = sum(use.timeline_ms * share for use, share in paid.values())
        moved = "; ".join(
            f"{use.collective.kind} {use.collective.name} over {_axes_text(use.collective.mesh_axes)} "
            f"({use.timeline_ms:.2f} ms per device in the capture, {share:.0%} of it for these arrays)"
            if use.timeline_count
            else f"{use.collective.kind} {use.collective.name} over {_axes_text(use.collective.mesh_axes)} "
            f"({format_bytes(use.collective.bytes * use.collective.count)} per device per call)"
            for use, share in paid.values()
        )
        out.append(
            Finding(
                kind="replicated_param",
                severity=Severity.CRITICAL
                if time_ms > 0 and severity_for(time_ms, wall_ms, thresholds) == Severity.CRITICAL
                else Severity.WARNING,
                time_lost_ms=time_ms,
                message=(
                    f"{f.function} keeps a full copy of {shown}{more} on each of {n} devices "
                    f"({f.facts.mesh.text}): {format_bytes(total)} per device, "
                    f"{format_bytes(total * (n - 1))} more than one copy in all."
                    + (f" Their updates are summed across devices by {moved}." if moved else "")
                ),
                suggestion=(
                    f"Shard large parameters over a mesh axis (e.g. P({axes[0]!r}, None) for "
                    "fully sharded data parallelism) with jax.device_put(x, NamedSharding(mesh, spec)) "
                    "or jit's in_shardings; the compiler gathers each where it is used. Threshold: "
                    f"replicated_param_bytes = {format_bytes(thresholds.replicated_param_bytes)}."
                ),
                evidence={
                    "function": f.function,
                    "devices": n,
                    "bytes_per_device": total,
                    "arrays": {leaf.label: leaf.bytes_per_device for leaf in big},
                    "collectives": {
                        name: {"timeline_ms": round(use.timeline_ms, 3), "share": round(share, 4)}
                        for name, (use, share) in paid.items()
                    },
                },
            )
        )
    return out


def sharding_recompiles(records: Sequence[Mapping[str, Any]]) -> list[Finding]:
    by_index = {(r.get("qualname"), r.get("compile_index")): r for r in records}
    out = []
    for r in records:
        expl = r.get("explanation") or {}
        changes = [c for c in expl.get("changes") or () if isinstance(c, dict) and c.get("what") == "sharding"]
        if not changes:
            continue
        fn = r.get("function", "?")
        before = by_index.get((r.get("qualname"), expl.get("compared_to")))
        parts, arrays, axes, kept = [], [], {}, []
        for c in changes:
            path = str(c.get("path"))
            name = str(c.get("label") or path)  # the facts may name a wrapper's inputs by other paths
            new, old = _leaf(r, path) or _leaf(r, name), _leaf(before, path) or _leaf(before, name)
            if new is not None and old is not None and _same_placement(old.spec, new.spec):
                continue  # P() and P(None, None): a log written before placements were compared
            kept.append(c)
            label = new.label if new is not None else name
            arrays.append(label)
            if new is not None and old is not None:
                axes[label] = {"old": list(old.sharded_axes()), "new": list(new.sharded_axes())}
                parts.append(
                    f"{label} ({path}) {old.spec_text} -> {new.spec_text}"
                    if label != path and _tail(label) == _tail(path)  # the machine path says which argument
                    else f"{label} {old.spec_text} -> {new.spec_text}"
                )
            else:
                parts.append(f"{name} {c.get('old')} -> {c.get('new')}")
        if not parts:
            continue
        seconds = sum(float(r.get(k) or 0.0) for k in ("trace_s", "lower_s", "backend_compile_s"))
        out.append(
            Finding(
                kind="sharding_recompile",
                severity=Severity.WARNING,
                time_lost_ms=0.0,
                message=(
                    f"{fn} compiled again (compile {r.get('compile_index')}, {seconds * 1e3:.0f} ms) because "
                    f"an argument arrived with another sharding: {'; '.join(parts[:3])}."
                ),
                suggestion=(
                    "Place each argument once, before the loop, with jax.device_put(x, NamedSharding(mesh, "
                    "spec)), or fix its layout with jit's in_shardings, so every call sees the same sharding."
                ),
                evidence={
                    "function": fn,
                    "compile_index": r.get("compile_index"),
                    "compile_ms": round(seconds * 1e3, 3),
                    "arrays": arrays,
                    "mesh_axes": axes,
                    "changes": [dict(c) for c in kept],
                },
            )
        )
    return out


def _same_placement(a: Any, b: Any) -> bool:
    """Whether two specs place an array alike: ``('model',)`` is ``'model'``, trailing ``None``s are nothing."""

    def normal(spec: Any) -> list[Any]:
        out: list[Any] = []
        for entry in spec:
            if isinstance(entry, (list, tuple)):
                entry = None if not entry else entry[0] if len(entry) == 1 else tuple(entry)
            out.append(entry)
        while out and out[-1] is None:
            out.pop()
        return out

    return a is not None and b is not None and normal(a) == normal(b)


def _tail(path: str) -> str:
    """``args[0]['w']`` -> ``['w']``, ``params['w']`` -> ``['w']``: a path below its argument."""
    cut = min((i for i in (path.find("["), path.find(".")) if i > 0), default=len(path))
    if path.startswith(("args[", "kwargs[")):
        cut = path.find("]") + 1
    return path[cut:]


def _leaf(record: Mapping[str, Any] | None, path: str) -> Any:
    """The input leaf at ``path`` in a record's sharding facts, if it has them."""
    raw = (record or {}).get("sharding")
    try:
        return ShardingFacts.from_dict(raw).input_named(path) if isinstance(raw, dict) else None
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
