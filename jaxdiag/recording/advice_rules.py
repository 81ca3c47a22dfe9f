"""The rules of ``advise`` besides padding, and the ``Advice`` every rule gives.

Each rule looks at the compiles of one function: a static argument with many values;
a change an explanation names (a Python scalar against a typed array, a sharding or
memory kind, a new function object, the pytree structure, a dtype, a jit option, a
config state or the mesh in context) through the ``RULES`` table; compiles with an
identical signature; and an eager op of JAX's that one line ran on several shapes or dtypes.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Mapping, Sequence

from jaxdiag.recording.records import Change, CompileRecord

MAX_LISTED = 6


@dataclasses.dataclass(frozen=True, slots=True)
class Advice:
    """One change that would remove recompiles of one function.

    Attributes:
      function: the function's qualname (``module.qualname``).
      kind: ``"padding"``, ``"weak_type"``, ``"static_values"``, ``"sharding"``, ``"committed"``,
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


def static_value_advice(qualname: str, recs: list[CompileRecord], min_distinct_values: int) -> list[Advice]:
    values: dict[str, dict[str, list[CompileRecord]]] = defaultdict(lambda: defaultdict(list))
    for rec in recs:
        for a in rec.args:
            if a.kind == "static":
                values[a.path][str(a.value)].append(rec)
    out = []
    for path, by_value in values.items():
        if len(by_value) < min_distinct_values:
            continue
        involved = [r for rs in by_value.values() for r in rs]
        label = next((a.label for r in recs for a in r.args if a.path == path and a.label), path)
        out.append(
            Advice(
                qualname,
                "static_values",
                f"{recs[0].function}: static argument {label} took {len(by_value)} values "
                f"({listing(list(by_value))}), each a separate compile",
                f"make {label} a traced argument (drop it from static_argnums/static_argnames) "
                f"if it only feeds arithmetic, or limit it to a few values",
                len(involved),
                sum(r.compile_s for r in involved),
                {"path": path, "values": list(by_value), "distinct": len(by_value)},
            )
        )
    return out


RULES: dict[str, tuple[str, str, str]] = {
    # change.what -> (advice kind, message template, suggestion template)
    "weak_type": (
        "weak_type",
        "{path} flipped between a Python scalar and a typed array",
        "pass a consistently typed array, e.g. jnp.{dtype}(x) every time",
    ),
    # An array made from a Python scalar (``jnp.full(shape, 0.1)``) is weakly typed; the one an update
    # returns is not.
    "weak_array": (
        "weak_type",
        "{path} flipped between a weakly typed array (made from a Python scalar) and a typed one",
        "give it its dtype where it is made, e.g. jnp.full(shape, value, dtype=jnp.{dtype}), or jnp.{dtype}(x) once",
    ),
    # Not jit's in_shardings: for an input already committed elsewhere it raises
    # "Sharding passed to jit does not match the sharding on the respective arg".
    "sharding": (
        "sharding",
        "{path} arrived with different shardings ({values})",
        "place {path} with jax.device_put(x, sharding) once, with one sharding, "
        "before the loop, and pass the placed array every call",
    ),
    # The first call's NumPy inputs against the committed arrays the update returns: each compiles.
    "committed": (
        "committed",
        "{path} arrived both uncommitted (a NumPy array, or placed by JAX) and committed to devices",
        "put {path} on the devices before the first call, with the sharding the later calls pass{placed} "
        "(x = jax.device_put(x, sharding)), so that every call passes the same committed arrays",
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


def change_advice(
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
            if c.what in RULES and (c.what, c.path) not in covered:
                key = (c.what, "" if c.what == "committed" else c.path)  # one piece for all the leaves
                hits[key][id(rec)] = rec
                seen_changes[key].append(c)
    name = recs[0].function
    out = []
    for (what, path), by_id in hits.items():
        involved = list(by_id.values())
        found = seen_changes[(what, path)]
        rule = "weak_array" if what == "weak_type" and any(c.weak_array for c in found) else what
        kind, message, suggestion = _MESH_RULE if what == "config" and path in _MESH_STATES else RULES[rule]
        values = list(dict.fromkeys(v for c in found for v in (c.old, c.new) if v is not None))
        shown_values = _one_mesh(values) if what in ("jit_options", "sharding") else values
        label = path or "the argument tree"
        if what == "structure":
            verbs = {"appeared" if c.old is None else "disappeared" if c.new is None else "changed" for c in found}
            message = "{path} " + "/".join(sorted(verbs)) + " (pytree structure)"
        label = next((c.label for c in found if c.label), label)
        placed = ""
        if what == "committed":
            label = listing(list(dict.fromkeys(c.label or c.path for c in found)))
            committed_side = {
                a.sharding for c in found for r in involved for a in r.args if a.path == c.path and a.committed
            }
            placed = f" ({next(iter(committed_side))})" if len(committed_side) == 1 else ""
        numbers = [int(v) for v in values if v.isdigit()]
        fill = {
            "path": label,
            "values": listing(shown_values),
            "dtype": _leaf_dtype(involved[-1], path) or "float32",
            "largest": max(numbers) if numbers else "?",
            "function": name,
            "placed": placed,
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


def eager_advice(function: str, site: str | None, recs: list[CompileRecord]) -> Advice | None:
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


def listing(values: Sequence[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:MAX_LISTED])
    return shown + (f", ... {len(values) - MAX_LISTED} more" if len(values) > MAX_LISTED else "")


def _summary_tail(record: Any) -> str:
    """The change part of a record's explanation ("x shape axis 0 changed 2 -> 3")."""
    summary = record.explanation.summary if record.explanation is not None else "cause unknown"
    return summary.split(": ", 1)[-1]
