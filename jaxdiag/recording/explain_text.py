"""The words of an explanation: one phrase per change, and the one-sentence summary of a recompile."""

from __future__ import annotations

import os
from typing import Sequence

from jaxdiag.recording.record_diff import CONFIG_DEFAULTS, LEAF_OPTIONS
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, Change, CompileRecord

#: The summary names at most this many changes, then says how many more.
MAX_SUMMARY_CHANGES = 3

# When the records do not carry config states or jit options (this JAX does not expose them):
_SAME_SIGNATURE_TRACED = (
    "cause unknown: traced again with the same argument signature; the jax config states "
    "(enable_x64, default_matmul_precision, a mesh, ...) and jit options were not compared "
    "(not readable on this JAX), and jax.clear_caches() or cache eviction can do this too"
)
_SAME_SIGNATURE_LOWERED = (
    "cause unknown: lowered again (not re-traced) with the same argument signature; a "
    "sharding, layout or device of committed inputs that the signature does not show, a jax "
    "config state (not readable on this JAX) or jax.clear_caches() can do this"
)
# When both records carry their config states and jit options, none of which differ:
_SAME_ALL_TRACED = (
    "cause unknown: traced again with the same argument signature, jit options and "
    "jax config states ({n} compared) as compile {index}; jax.clear_caches(), cache "
    "eviction or a new function object with the same code can do this"
)
_SAME_ALL_LOWERED = (
    "cause unknown: lowered again (not re-traced) with the same argument signature, jit "
    "options and jax config states ({n} compared) as compile {index}; a layout or device "
    "assignment the signature does not show, or jax.clear_caches(), can do this"
)
_TRANSFORMS = {
    "grad-forward": "forward pass with residuals (under jax.grad/vjp)",
    "grad-backward": "backward pass (the transpose, under jax.grad/vjp)",
    "vmap": "vmapped program (under jax.vmap)",
    "jvp": "jvp (under jax.jvp)",
    "transformed": "transformed program",
    "aot": "ahead-of-time compile (.lower().compile())",
}
_UNDER = {
    "grad-forward": "forward pass under jax.grad/vjp",
    "grad-backward": "backward pass under jax.grad/vjp",
    "vmap": "under jax.vmap",
    "jvp": "under jax.jvp",
    "transformed": "transformed",
    "aot": "compiled ahead of time",
}
_MESH_STATES = ("mesh_context_manager", "abstract_mesh_context_manager")


def describe(change: Change) -> str:
    """One human phrase for one change, e.g. ``"args[2] shape axis 1 changed 129 -> 193"``."""
    p, what = change.label or change.path, change.what
    if what == "shape":
        if change.axis is None:
            return f"{p} shape changed {change.old} -> {change.new}"
        batch = " (the vmapped batch axis)" if change.batch_axis else ""
        return f"{p} shape axis {change.axis}{batch} changed {change.old} -> {change.new}"
    if what == "config":
        if change.path in _MESH_STATES:
            return f"the mesh in context changed ({change.path}: {change.old} -> {change.new})"
        return f"jax config {change.path} changed {change.old} -> {change.new}"
    if what == "jit_options":
        if change.path.partition("[")[0] in LEAF_OPTIONS:  # a leaf of in_shardings...: specs, the mesh once
            a, b, mesh = _same_mesh(str(change.old), str(change.new))
            return f"{change.path}: {a} -> {b}" + (f" (on {mesh})" if mesh else "")
        return f"jit option {change.path} differs ({change.old} -> {change.new})"
    if what == "transform":
        if change.new is None:
            return f"first compile of the call itself (earlier compiles were under a transformation: {change.old})"
        return f"first compile of its {_TRANSFORMS.get(str(change.new), str(change.new))}"
    if what == "container":
        return f"{p} changed container type {change.old} -> {change.new} (same leaves)"
    if what == "dtype":
        return f"{p} dtype changed {change.old} -> {change.new}"
    if what == "weak_type":
        if change.weak_array:  # not a scalar: an array made from one, as jnp.full(shape, 0.1) makes
            made = f"an array made from a Python scalar, as `jnp.full({change.of_shape}, 0.1)` makes"
            if change.old == "True":
                return f"{p} changed from weakly typed ({made}) to typed (weak_type True -> False)"
            return f"{p} changed from typed to weakly typed ({made}) (weak_type False -> True)"
        if change.old == "True":
            return f"{p} changed from a Python scalar to a typed array (weak_type True -> False)"
        return f"{p} changed from a typed array to a Python scalar (weak_type False -> True)"
    if what == "static":
        return f"static {p} changed {change.old} -> {change.new}"
    if what == "sharding":
        return f"{p} sharding changed {change.old} -> {change.new}"
    if what == "committed":
        uncommitted = "uncommitted (a NumPy array or Python number, or an array JAX placed on its default device)"
        committed = "committed to its devices (placed with jax.device_put, or output by a program on such inputs)"
        if change.old == "False":
            return f"{p} changed from {uncommitted} to {committed}"
        return f"{p} changed from {committed} to {uncommitted}"
    if what == "memory_kind":
        return f"{p} memory kind changed {change.old} -> {change.new}"
    if what == "structure":
        if not p:
            return f"argument structure changed {change.old} -> {change.new}"
        if change.old is None:
            return f"{p} appeared ({change.new})"
        if change.new is None:
            return f"{p} disappeared (was {change.old})"
        return f"{p} changed {change.old} -> {change.new}"
    if what == "function":
        return "a new function object or closure (same name, different object; jit caches per object)"
    return f"{p or 'function'} {what} changed {change.old} -> {change.new}"


def _same_mesh(old: str, new: str) -> tuple[str, str, str | None]:
    """``"P('x',) on mesh(x=8)"``, ``"P() on mesh(x=8)"`` -> ``("P('x',)", "P()", "mesh(x=8)")``."""
    a, _, mesh_a = old.partition(" on ")
    b, _, mesh_b = new.partition(" on ")
    if mesh_a and mesh_a == mesh_b:
        return a, b, mesh_a
    return old, new, None


def summarize(new: CompileRecord, changes: Sequence[Change], compared_index: int | None = None) -> str:
    """The one-sentence summary: ``"<function>: <change>; <change>; and N more"``."""
    name = new.function
    if new.transform is not None and not any(c.what == "transform" for c in changes):
        name = f"{name} {_UNDER.get(new.transform, new.transform)}"
    where = _where(new)
    if new.origin == JAX_INTERNAL_ORIGIN and changes:
        kinds = "/".join(dict.fromkeys(c.what.replace("_", " ") for c in changes))
        shown = "; ".join(describe(c) for c in changes[:MAX_SUMMARY_CHANGES])
        return (
            f"eager {name} on a new {kinds}{where.replace('; called', '')}: {shown}; "
            "move it inside the jitted step (or give it one shape)"
        )
    if new.compile_index == 1 and any(c.what == "jit_options" for c in changes):
        shown = "; ".join(describe(c) for c in changes if c.what == "jit_options")
        return (
            f"{name}: first compile of another jit object of this function: {shown}; "
            f"JAX caches each set of jit options separately{where}"
        )
    if not changes and new.origin == JAX_INTERNAL_ORIGIN:
        return (
            f"eager {name}{where.replace('; called', '')} compiled again with the same "
            "argument signature: its own parameters (an output shape, an axis, a dtype), which "
            "jaxdiag does not compare, likely changed; move it inside the jitted step"
        )
    if not changes:
        reason = _SAME_SIGNATURE_TRACED if new.traced else _SAME_SIGNATURE_LOWERED
        if new.config is not None and new.jit_options is not None:
            known = len(CONFIG_DEFAULTS) or len(new.config)
            reason = (_SAME_ALL_TRACED if new.traced else _SAME_ALL_LOWERED).format(
                n=known, index=compared_index if compared_index is not None else "?"
            )
        return f"{name}: {reason}{where}"
    phrases = _phrases(changes)
    shown = "; ".join(phrases[:MAX_SUMMARY_CHANGES])
    more = len(phrases) - MAX_SUMMARY_CHANGES
    return f"{name}: {shown}" + (f"; and {more} more" if more > 0 else "") + where


def _phrases(changes: Sequence[Change]) -> list[str]:
    """One phrase per change, but one for all the leaves that changed commitment the same way (a
    model's parameters arrive as NumPy arrays once, then as the committed arrays an update returns)."""
    groups: dict[object, list[Change]] = {}  # in the changes' order; a key per direction of commitment
    for i, c in enumerate(changes):
        groups.setdefault(("committed", c.old) if c.what == "committed" else i, []).append(c)
    phrases = []
    for group in groups.values():
        first = group[0]
        leaves = [c.label or c.path for c in group]
        named = ", ".join(leaves[:MAX_SUMMARY_CHANGES])
        if len(leaves) > MAX_SUMMARY_CHANGES:
            named += f" and {len(leaves) - MAX_SUMMARY_CHANGES} more"
        phrases.append(describe(first) if len(group) == 1 else named + describe(first)[len(leaves[0]) :])
    return phrases


def _where(rec: CompileRecord) -> str:
    """``; called at train.py:42 (train)``: the call site, relative to the working folder when inside it."""
    if not rec.call_site:
        return ""
    site = rec.call_site
    try:
        rel = os.path.relpath(site)
        if not rel.startswith(".."):
            site = rel
    except ValueError:
        pass
    return f"; called at {site}" + (f" ({rec.call_function})" if rec.call_function else "")
