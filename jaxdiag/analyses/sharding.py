"""Sharding: what each jitted function moves between devices, and what the user's specs did not ask for.

Reads the ``sharding`` facts of the compile log's records (``jaxdiag.sharding``)
and, when there is a timeline, its collective ops. Each collective the compiler
inserted gets an *origin* from the JAX op it came from:

- ``user``: written by the user (``psum``, ``all_gather``, ``ppermute``, ... in ``shard_map``);
- ``constraint``: asked for by ``with_sharding_constraint`` or a reshard;
- ``requested``: the program's output layout the user asked for (jit's
  ``out_shardings``, as ``multihost_utils.process_allgather`` does): a collective
  with no JAX op of its own whose result is a user-laid-out output; not implicit;
- ``reduction``: an all-reduce or reduce-scatter finishing a contraction over a
  sharded dimension (a gradient sum under data parallelism, a row-parallel
  matmul): what the specs imply;
- ``resharding``: an all-gather, all-to-all or collective-permute the compiler
  added because a consumer needs a layout the specs did not give: *implicit
  resharding*, reported as a finding with the function, the array and the mesh axes.

It also reports inputs replicated on every device that are larger than
``Thresholds.replicated_param_bytes``, and recompiles whose cause is a changed
sharding. Timeline collectives are joined to their function and array by HLO
module and op name (``jit_step`` / ``all-gather.3``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, Mapping, Sequence

from jaxdiag.analyses.base import AnalysisInputs, Finding, Severity, severity_for
from jaxdiag.config import DEFAULT_THRESHOLDS, Thresholds, current
from jaxdiag.sharding.facts import ShardingFacts, format_bytes
from jaxdiag.sharding.tiles import spec_text
from jaxdiag.sharding.hlo import Collective

#: Primitives of collectives users write themselves (in ``shard_map``).
USER_PRIMITIVES = frozenset(
    {
        "psum",
        "pmax",
        "pmin",
        "pmean",
        "all_gather",
        "all_gather_invariant",
        "all_to_all",
        "ragged_all_to_all",
        "ppermute",
        "pshuffle",
        "psum_scatter",
        "reduce_scatter",
        "pbroadcast",
        "psum_invariant",
        "pcast",
        "pvary",
    }
)
_CONSTRAINT = ("sharding_constraint", "reshard", "device_put")
_MAX_RESHARD_FINDINGS = 10


@dataclasses.dataclass(frozen=True, slots=True)
class CollectiveUse:
    """One collective of one compiled function, with its origin and timeline time.

    Attributes:
      collective: the facts from the HLO.
      origin: ``user``, ``constraint``, ``reduction`` or ``resharding`` (see the module doc).
      timeline_count: its ops on the timeline (every device's).
      timeline_ms: their time, per device (mean over the host's devices).
    """

    collective: Collective
    origin: str
    timeline_count: int = 0
    timeline_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = self.collective.to_dict()
        d.update(
            origin=self.origin,
            bytes_per_call=self.collective.bytes * self.collective.count,
            timeline_count=self.timeline_count,
            timeline_ms=round(self.timeline_ms, 3),
        )
        return d


@dataclasses.dataclass(frozen=True)
class FunctionSharding:
    """One distinct compiled program of one function.

    Attributes:
      function, qualname: the jitted function.
      compiles: the ``compile_index`` of each compile that produced these facts.
      facts: the mesh, leaves and collectives.
      collectives: the collectives with their origins.
    """

    function: str
    qualname: str
    compiles: tuple[int, ...]
    facts: ShardingFacts
    collectives: tuple[CollectiveUse, ...]

    def to_dict(self) -> dict[str, Any]:
        f = self.facts
        return {
            "function": self.function,
            "qualname": self.qualname,
            "compiles": list(self.compiles),
            "module": f.module,
            "mesh": f.mesh.to_dict(),
            "hlo": f.hlo,
            "inputs": [x.to_dict() for x in f.inputs],
            "outputs": [x.to_dict() for x in f.outputs],
            "collectives": [c.to_dict() for c in self.collectives],
            "comm_bytes_per_call": f.comm_bytes_per_call,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class TimelineCollective:
    """Collective ops of one HLO op on the timeline, joined to the function and arrays they serve.

    ``function`` is ``None`` when no compile record has the module and op.
    """

    module: str
    op: str
    kind: str
    count: int
    total_ms: float
    function: str | None = None
    arrays: tuple[str, ...] = ()
    mesh_axes: tuple[str, ...] | None = None
    origin: str | None = None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "op": self.op,
            "kind": self.kind,
            "count": self.count,
            "total_ms": round(self.total_ms, 3),
            "function": self.function,
            "arrays": list(self.arrays),
            "mesh_axes": None if self.mesh_axes is None else list(self.mesh_axes),
            "origin": self.origin,
            "bytes": self.bytes,
        }


@dataclasses.dataclass(frozen=True)
class ShardingResult:
    """Sharding facts per function, collectives on the timeline, and findings."""

    functions: tuple[FunctionSharding, ...] = ()
    timeline: tuple[TimelineCollective, ...] = ()
    findings: tuple[Finding, ...] = ()
    #: Whether a capture's timeline was read (so "ran most" can be asked of it).
    captured: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "functions": [f.to_dict() for f in self.functions],
            "timeline": [t.to_dict() for t in self.timeline],
            "captured": self.captured,
        }


def origin_of(c: Collective) -> str:
    """Classify a collective by the JAX op it came from (see the module doc)."""
    prims = {m.group(1) for part in c.op_name.split(";") if (m := re.match(r"(\w+)", part.rsplit("/", 1)[-1]))}
    if prims & USER_PRIMITIVES:
        return "user"
    if any(p.startswith(_CONSTRAINT) for p in prims):
        return "constraint"
    if c.kind in ("all-reduce", "reduce-scatter"):
        return "reduction"
    return "resharding"


def asked_for(c: Collective, facts: ShardingFacts) -> bool:
    """Whether ``c`` makes an output in the layout the user gave it (see ``requested`` in the module doc).

    A collective no JAX op made sits at the program's boundary; when its result is
    exactly one device's share of an output whose layout the user chose, the
    program asked for that move.
    """
    if c.op_name or c.kind not in ("all-gather", "collective-broadcast", "all-to-all", "collective-permute"):
        return False
    return any(o.chosen_by == "user" and o.bytes_per_device == c.result_bytes for o in facts.outputs)


def analyze(inputs: AnalysisInputs) -> ShardingResult:
    """Sharding facts of the compile log, joined to the timeline's collectives."""
    from jaxdiag.analyses.sharding_timeline import timeline_collectives

    ops, wall_ms = timeline_collectives(inputs.frames, inputs.host, inputs.steps)
    return analyze_records(inputs.compile_log, inputs.thresholds, timeline=ops, wall_ms=wall_ms)


def analyze_records(
    records: Sequence[Mapping[str, Any]],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    *,
    timeline: Mapping[tuple[str, str], tuple[str, int, float]] | None = None,
    wall_ms: float = 0.0,
) -> ShardingResult:
    """Findings from compile records (as dicts), with timeline times when given.

    Args:
      records: compile records (``CompileRecord.to_dict()``), oldest first.
      thresholds: ``replicated_param_bytes`` is read.
      timeline: ``(module, op) -> (kind, count, per-device ms)`` of collective ops.
      wall_ms: the analysed wall time, to grade findings that cost time.
    """
    functions = _functions(records, timeline or {})
    rows = _timeline_rows(functions, timeline or {})
    findings = [
        *_resharding_findings(functions, wall_ms),
        *_replicated_findings(functions, thresholds, wall_ms),
        *_sharding_recompiles(list(records)),
    ]
    return ShardingResult(tuple(functions), tuple(rows), tuple(findings), captured=timeline is not None)


def _functions(
    records: Iterable[Mapping[str, Any]], timeline: Mapping[tuple[str, str], tuple[str, int, float]]
) -> list[FunctionSharding]:
    """One entry per distinct program of each function: recompiles to the same program share one."""
    by_key: dict[tuple[str, str], tuple[dict[str, Any], list[int], ShardingFacts]] = {}
    for r in records:
        raw = r.get("sharding")
        if not isinstance(raw, dict):
            continue
        try:
            facts = ShardingFacts.from_dict(raw)
        except (AttributeError, KeyError, TypeError, ValueError):  # a hand-edited record: no facts
            continue
        if facts.mesh.n_devices <= 1:  # a single-device program (analysis on) has no placement to show
            continue
        key = (str(r.get("qualname", r.get("function", ""))), repr(facts.to_dict()))
        entry = by_key.setdefault(key, (dict(r), [], facts))
        entry[1].append(int(r.get("compile_index", 0)))
    out = []
    for (_, _), (r, compiles, facts) in by_key.items():
        uses = []
        for c in facts.collectives:
            kind, count, ms = _timeline_of(timeline, facts.module, c)
            uses.append(CollectiveUse(c, "requested" if asked_for(c, facts) else origin_of(c), count, ms))
        out.append(
            FunctionSharding(
                str(r.get("function", "?")), str(r.get("qualname", "?")), tuple(compiles), facts, tuple(uses)
            )
        )
    return out


def _timeline_of(
    timeline: Mapping[tuple[str, str], tuple[str, int, float]], module: str, c: Collective
) -> tuple[str, int, float]:
    count, ms = 0, 0.0
    for name in (c.name, *c.aliases):
        hit = timeline.get((module, name))
        if hit is not None:
            count, ms = count + hit[1], ms + hit[2]
    return c.kind, count, ms


def _timeline_rows(
    functions: Sequence[FunctionSharding], timeline: Mapping[tuple[str, str], tuple[str, int, float]]
) -> list[TimelineCollective]:
    # The latest program of a module wins: a recompile may reuse op names for other transfers.
    known: dict[tuple[str, str], tuple[FunctionSharding, CollectiveUse]] = {}
    for f in functions:
        for use in f.collectives:
            for name in (use.collective.name, *use.collective.aliases):
                known[(f.facts.module, name)] = (f, use)
    rows = []
    for (module, op), (kind, count, ms) in sorted(timeline.items(), key=lambda kv: -kv[1][2]):
        hit = known.get((module, op))
        if hit is None:
            rows.append(TimelineCollective(module, op, kind, count, ms))
            continue
        f, use = hit
        c = use.collective
        rows.append(
            TimelineCollective(module, op, c.kind, count, ms, f.function, c.arrays, c.mesh_axes, use.origin, c.bytes)
        )
    return rows


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


def _resharding_findings(functions: Sequence[FunctionSharding], wall_ms: float) -> list[Finding]:
    out: list[Finding] = []
    for f in functions:
        uses = sorted(
            (u for u in f.collectives if u.origin == "resharding"),
            key=lambda u: -u.collective.bytes * u.collective.count,
        )
        for use in uses[: current().max_reshard_findings]:
            out.append(_resharding_finding(f, use, wall_ms))
    return out


def _resharding_finding(f: FunctionSharding, use: CollectiveUse, wall_ms: float) -> Finding:
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
    msg = (
        f"{f.function} {what} {target} over {_axes_text(c.mesh_axes)} on every call: "
        f"{format_bytes(per_call)} per device per call{loop} ({c.name}, from {c.op_name or 'no JAX op'})."
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
            f"{names} is sharded but its consumer ({_prim(c.op_name)}) needs it whole along "
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
    severity = severity_for(time_ms, wall_ms) if time_ms > 0 else (Severity.WARNING if undone else Severity.INFO)
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


def _replicated_findings(
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
                if time_ms > 0 and severity_for(time_ms, wall_ms) == Severity.CRITICAL
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


def _sharding_recompiles(records: Sequence[Mapping[str, Any]]) -> list[Finding]:
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
