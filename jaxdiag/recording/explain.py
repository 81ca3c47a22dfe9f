"""Explain a recompile: diff a new signature against the closest earlier one of its function.

``explain`` runs at compile time, once per compile after a function's first, so it
works on plain records, never imports jax, and compares against at most the last
``MAX_CANDIDATES`` signatures of the function.

The earlier record diffed against is the *closest*: the one differing in the fewest
leaves and fields, ties broken by the most recent. JAX's own cache-miss explainer
ranks differences by kind first (context, tree, then types), so in a tie it can
explain a sharding change by diffing against an unrelated shape; counting
differences avoids that.

An ``Explanation`` with no ``changes`` but a ``compared_to`` means the function was
lowered again with a signature identical to an earlier one.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import re
import threading
from typing import Any, Iterable, Sequence

from jaxdiag.recording import treedef_text
from jaxdiag.recording.records import ArgSignature, Change, CompileRecord, Explanation

#: The jax config states of the cache key as they were when recording started (name -> text);
#: a record's ``config`` holds only the states that differ from these.
CONFIG_DEFAULTS: dict[str, str] = {}
#: Only this many earlier signatures of a function are searched for the closest.
MAX_CANDIDATES = 64
#: The summary names at most this many changes, then says how many more.
MAX_SUMMARY_CHANGES = 3
_MAX_TREE_TEXT = 80
_MAX_DIGESTS = 4096

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
_INTERNAL_ORIGIN = "jax-internal"
_MESH_STATES = ("mesh_context_manager", "abstract_mesh_context_manager")

# One component of a pytree path: a quoted dict key, an index, an attribute, or the head.
_PATH_PART = re.compile(r"""\['(?:[^'\\]|\\.)*'\]|\["(?:[^"\\]|\\.)*"\]|\[[^\]]*\]|\.[^.\[]+|^[^.\[]+""")


def explain(history: Sequence[CompileRecord], new: CompileRecord) -> Explanation | None:
    """Explain why ``new`` compiled, given the records before it.

    Args:
      history: earlier records, oldest first, of any functions.
      new: the record to explain.

    Returns:
      ``None`` when no earlier record is of ``new``'s function (``function_key``);
      otherwise the diff against the closest earlier record of that function.
    """
    candidates = _last_of_function(history, function_key(new), MAX_CANDIDATES, new.transform)
    if not candidates:
        others = _last_of_function(history, function_key(new), MAX_CANDIDATES)
        if not others:
            return None
        if new.transform is None:  # the call itself, after compiles under transformations only
            seen = ", ".join(sorted({str(r.transform) for r in others}))
            change = Change("", "transform", seen, None)
        else:
            change = Change("", "transform", None, new.transform)
        return Explanation(summary=summarize(new, (change,)), changes=(change,))
    new_index = {a.path: a for a in new.args}
    new_digest = _leaf_hashes(new)
    best: CompileRecord | None = None
    best_key: tuple[int, int] | None = None
    # Newest first, and only a strictly better key replaces the best: ties go to the newest.
    for old in reversed(candidates):
        key = _distance(old, new, new_digest, new_index, best_key)
        if key is not None and (best_key is None or key < best_key):
            best, best_key = old, key
            if key == (0, 0):
                break
    assert best is not None
    changes = diff(best, new)
    return Explanation(
        summary=summarize(new, changes, best.compile_index), changes=changes, compared_to=best.compile_index
    )


def diff(old: CompileRecord, new: CompileRecord) -> tuple[Change, ...]:
    """List what differs between two records of one function, function first, then by leaf."""
    changes: list[Change] = list(_context_changes(old, new))
    if (
        old.function_id is not None
        and new.function_id is not None
        and old.function_id != new.function_id
        and new.origin != _INTERNAL_ORIGIN
    ):  # JAX's helpers: new objects are JAX's, not the user's
        changes.append(Change("", "function", str(old.function_id), str(new.function_id)))
    old_index = {a.path: a for a in old.args}
    new_index = {a.path: a for a in new.args}
    gone = [p for p in old_index if p not in new_index]
    came = [p for p in new_index if p not in old_index]
    renamed = False
    if gone and len(gone) == len(came) and old.in_tree and new.in_tree:
        # The same leaves under other keys: a container type change (namedtuple -> tuple).
        found = treedef_text.container_changes(old.in_tree, new.in_tree)
        same = all(_unnamed(old_index[a]) == _unnamed(new_index[b]) for a, b in zip(gone, came))
        if found and same:
            labels = {a.path: a.label for a in new.args if a.label}
            for path, was, now in found:
                changes.append(Change(path, "container", was, now, label=_label_of(path, labels)))
            gone, came, renamed = [], [], True
    labels = {a.path: a.label for a in (*old.args, *new.args) if a.label}
    for root, leaves in _group_by_new_root(gone, new_index):
        changes.append(
            Change(root, "structure", old=_describe_subtree(leaves, old_index), new=None, label=_label_of(root, labels))
        )
    for root, leaves in _group_by_new_root(came, old_index):
        changes.append(
            Change(root, "structure", old=None, new=_describe_subtree(leaves, new_index), label=_label_of(root, labels))
        )
    if not renamed and not gone and not came and old.in_tree and new.in_tree and old.in_tree != new.in_tree:
        # Same leaf paths, different containers (tuple vs list, a namedtuple, a None leaf).
        found = treedef_text.container_changes(old.in_tree, new.in_tree)
        for path, was, now in found:
            changes.append(Change(path, "container", was, now, label=_label_of(path, labels)))
        if not found:
            changes.append(Change("", "structure", _cut(old.in_tree), _cut(new.in_tree)))
    for path, n in new_index.items():
        o = old_index.get(path)
        if o is not None and o != n:
            changes.extend(_leaf_changes(o, n))
    return tuple(changes)


def _context_changes(old: CompileRecord, new: CompileRecord) -> Iterable[Change]:
    """Jit options and config states that differ (only where both records know them)."""
    if old.jit_options is not None and new.jit_options is not None and old.jit_options != new.jit_options:
        was, now = _options(old.jit_options), _options(new.jit_options)
        for name in sorted(was.keys() | now.keys()):
            if was.get(name) != now.get(name):
                if name in _LEAF_OPTIONS and old.jit_leaves is not None and new.jit_leaves is not None:
                    yield from _option_leaf_changes(name, old.jit_leaves, new.jit_leaves)
                else:
                    yield Change(name, "jit_options", was.get(name, "default"), now.get(name, "default"))
    if old.config is not None and new.config is not None and old.config != new.config:
        for name in sorted(old.config.keys() | new.config.keys()):
            a = old.config.get(name, CONFIG_DEFAULTS.get(name, "default"))
            b = new.config.get(name, CONFIG_DEFAULTS.get(name, "default"))
            if a != b:
                yield Change(name, "config", a, b)


_OPTION = re.compile(
    r"(?:^|, )((?:static|donate|in|out)_[a-z_]+|device|backend|keep_unused|inline|compiler_options_kvs)="
)
#: Jit options given per leaf; records' ``jit_leaves`` hold each leaf, by path.
_LEAF_OPTIONS = ("in_shardings", "out_shardings", "in_layouts", "out_layouts")


def _option_leaf_changes(name: str, old: dict[str, str], new: dict[str, str]) -> Iterable[Change]:
    """``in_shardings[1]['x']: P('data',) -> P(('data', 'model'),)``: one change per leaf.

    A leaf given on one side only reads ``default`` on the other (jit chooses).
    """
    mine = lambda d: {k: v for k, v in d.items() if k == name or k.startswith(name + "[")}  # noqa: E731
    was, now = mine(old), mine(new)
    for path in sorted(was.keys() | now.keys()):
        a, b = was.get(path, "default"), now.get(path, "default")
        if a != b:
            yield Change(path, "jit_options", a, b)


def _options(text: str) -> dict[str, str]:
    """``"donate_argnums=(0,), keep_unused=True"`` -> ``{"donate_argnums": "(0,)", ...}``."""
    marks = list(_OPTION.finditer(text))
    return {
        m.group(1): text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        for i, m in enumerate(marks)
    }


def _unnamed(a: ArgSignature) -> ArgSignature:
    return dataclasses.replace(a, path="", label=None)


def _label_of(path: str, labels: dict[str, str]) -> str | None:
    """The user's name for ``path``, from any leaf below it that has one."""
    for leaf_path, label in labels.items():
        if leaf_path == path:
            return label
        if leaf_path.startswith(path):
            rest = leaf_path[len(path) :]
            if label.endswith(rest):
                return label[: len(label) - len(rest)] or None
    return None


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
        if change.path.partition("[")[0] in _LEAF_OPTIONS:  # a leaf of in_shardings...: specs, the mesh once
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
        if change.old == "True":
            return f"{p} changed from a Python scalar to a typed array (weak_type True -> False)"
        return f"{p} changed from a typed array to a Python scalar (weak_type False -> True)"
    if what == "static":
        return f"static {p} changed {change.old} -> {change.new}"
    if what == "sharding":
        return f"{p} sharding changed {change.old} -> {change.new}"
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
    if new.origin == _INTERNAL_ORIGIN and changes:
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
    if not changes and new.origin == _INTERNAL_ORIGIN:
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
    shown = "; ".join(describe(c) for c in changes[:MAX_SUMMARY_CHANGES])
    more = len(changes) - MAX_SUMMARY_CHANGES
    return f"{name}: {shown}" + (f"; and {more} more" if more > 0 else "") + where


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


# --- closest-record search ---------------------------------------------------------


def function_key(rec: CompileRecord) -> tuple[str, str | None]:
    """What makes two records the same function: qualname and definition site.

    The site tells apart functions sharing a qualname (two lambdas of one module);
    a closure re-created at one site keeps both, and shows as a new ``function_id``.
    """
    return rec.qualname, rec.source


def _last_of_function(
    history: Sequence[CompileRecord],
    key: tuple[str, str | None],
    limit: int,
    transform: str | None | bool = False,
) -> list[CompileRecord]:
    """The last ``limit`` records of function ``key`` (of one ``transform``, unless ``False``)."""
    found: list[CompileRecord] = []
    for rec in reversed(history):
        if (rec.qualname, rec.source) == key and (transform is False or rec.transform == transform):
            found.append(rec)
            if len(found) == limit:
                break
    found.reverse()
    return found


def _distance(
    old: CompileRecord,
    new: CompileRecord,
    new_digest: tuple[int, ...] | None,
    new_index: dict[str, ArgSignature],
    bound: tuple[int, int] | None,
) -> tuple[int, int] | None:
    """(differing leaves and fields, differing axes), or ``None`` once worse than ``bound``.

    Leaf hashes find the differing leaves without comparing every field of every
    leaf, which matters for models with thousands of parameters.
    """
    fields = sum(1 for _ in _context_changes(old, new))
    if old.function_id is not None and new.function_id is not None and old.function_id != new.function_id:
        fields += 1
    old_digest = _digest(old)
    if old_digest is None or new_digest is None:
        return _distance_by_path(old, new, new_index, fields, bound)
    if old_digest == new_digest:
        return fields + _tree_differs(old, new), 0
    if len(old_digest) == len(new_digest):
        positions = [i for i, ne in enumerate(map(operator.ne, old_digest, new_digest)) if ne]
        pairs = [(old.args[i], new.args[i]) for i in positions]
        if all(o.path == n.path for o, n in pairs):  # same leaves in the same order
            axes = 0
            for o, n in pairs:
                f, a = _count_leaf_fields(o, n)
                fields, axes = fields + f, axes + a
                if bound is not None and fields > bound[0]:
                    return None
            return fields + _tree_differs(old, new), axes
    return _distance_by_path(old, new, new_index, fields, bound)


def _distance_by_path(
    old: CompileRecord,
    new: CompileRecord,
    new_index: dict[str, ArgSignature],
    fields: int,
    bound: tuple[int, int] | None,
) -> tuple[int, int] | None:
    axes = matched = 0
    limit = bound[0] if bound is not None else None
    for o in old.args:
        n = new_index.get(o.path)
        if n is None:
            fields += 1
        else:
            matched += 1
            if n != o:
                f, a = _count_leaf_fields(o, n)
                fields, axes = fields + f, axes + a
        if limit is not None and fields > limit:
            return None
    fields += len(new_index) - matched
    if matched == len(old.args) == len(new_index):
        fields += _tree_differs(old, new)
    return fields, axes


# id(record) -> (record, leaf hashes). Holding the record keeps its id from being
# reused; a record is hashed once however many later compiles compare against it.
_digests: dict[int, tuple[CompileRecord, tuple[int, ...] | None]] = {}
_digests_lock = threading.Lock()


def _digest(rec: CompileRecord) -> tuple[int, ...] | None:
    hit = _digests.get(id(rec))
    if hit is not None and hit[0] is rec:
        return hit[1]
    digest = _leaf_hashes(rec)
    with _digests_lock:
        if len(_digests) >= _MAX_DIGESTS:
            del _digests[next(iter(_digests))]  # oldest first
        _digests[id(rec)] = (rec, digest)
    return digest


def _leaf_hashes(rec: CompileRecord) -> tuple[int, ...] | None:
    try:
        return tuple(map(hash, rec.args))
    except TypeError:  # an unhashable field (a hand-built shape list); compare by path instead
        return None


def _tree_differs(old: CompileRecord, new: CompileRecord) -> int:
    return int(bool(old.in_tree and new.in_tree and old.in_tree != new.in_tree))


def _count_leaf_fields(o: ArgSignature, n: ArgSignature) -> tuple[int, int]:
    if o.kind != n.kind:
        return 1, 0
    fields = axes = 0
    if o.shape != n.shape:
        fields += 1
        if o.shape is not None and n.shape is not None and len(o.shape) == len(n.shape):
            axes += sum(a != b for a, b in zip(o.shape, n.shape))
    # ``None`` means "not known", which is no evidence of a change (as in ``_leaf_changes``).
    for a, b in (
        (o.dtype, n.dtype),
        (o.weak_type, n.weak_type),
        (o.memory_kind, n.memory_kind),
    ):
        if a != b and a is not None and b is not None:
            fields += 1
    fields += sharding_differs(o, n)
    return fields + (o.value != n.value), axes


# --- per-leaf and structure changes ------------------------------------------------


def _leaf_changes(o: ArgSignature, n: ArgSignature) -> Iterable[Change]:
    for change in _leaf_changes_by_path(o, n):
        extra: dict[str, Any] = {}
        if n.label:
            extra["label"] = n.label
        if change.what == "shape" and change.axis is not None and n.batch_axis == change.axis:
            extra["batch_axis"] = True
        yield dataclasses.replace(change, **extra) if extra else change


def _leaf_changes_by_path(o: ArgSignature, n: ArgSignature) -> Iterable[Change]:
    p = o.path
    if o.kind != n.kind:
        yield Change(p, "structure", _describe_leaf(o), _describe_leaf(n))
        return
    if o.shape != n.shape:
        if o.shape is not None and n.shape is not None and len(o.shape) == len(n.shape):
            for axis, (a, b) in enumerate(zip(o.shape, n.shape)):
                if a != b:
                    yield Change(p, "shape", str(a), str(b), axis=axis)
        else:
            yield Change(p, "shape", _shape_text(o.shape), _shape_text(n.shape))
    if o.dtype != n.dtype and o.dtype is not None and n.dtype is not None:
        yield Change(p, "dtype", o.dtype, n.dtype)
    # ``None`` means "not known" for these fields, which is no evidence of a change.
    if o.weak_type != n.weak_type and o.weak_type is not None and n.weak_type is not None:
        yield Change(p, "weak_type", str(o.weak_type), str(n.weak_type))
    if sharding_differs(o, n):
        yield Change(p, "sharding", o.sharding, n.sharding)
    if o.memory_kind != n.memory_kind and o.memory_kind is not None and n.memory_kind is not None:
        yield Change(p, "memory_kind", o.memory_kind, n.memory_kind)
    if o.value != n.value:
        if o.kind == "static":
            yield Change(p, "static", o.value, n.value)
        else:  # a leaf jax cannot type, named by its Python type
            yield Change(p, "structure", _describe_leaf(o), _describe_leaf(n))


def sharding_differs(o: ArgSignature, n: ArgSignature) -> bool:
    """Whether two leaves are placed differently, as JAX tells shardings apart.

    Where both know their ``placement``, that decides: ``P()`` and ``P(None, None)``, or
    ``P('model', None)`` and ``P('model',)``, place an array of rank 2 alike and JAX
    does not compile again for them. Otherwise the texts are compared.
    """
    if o.sharding == n.sharding or o.sharding is None or n.sharding is None:
        return False
    if o.placement is not None and n.placement is not None:
        return o.placement != n.placement
    return True


def path_parts(path: str) -> list[str]:
    """Split a pytree path into components: ``"args[0]['w'].b"`` -> ``["args", "[0]", "['w']", ".b"]``."""
    parts = _PATH_PART.findall(path)
    return parts if "".join(parts) == path else [path]


def _group_by_new_root(paths: list[str], other: dict[str, ArgSignature]) -> list[tuple[str, list[str]]]:
    """Group leaf paths missing from ``other`` under their shortest prefix absent there.

    A dict entry ``args[0]['b']`` holding ten arrays appears as one change named
    ``args[0]['b']``, not as ten leaves.
    """
    if not paths:
        return []
    present: set[str] = set()
    for p in other:
        parts = path_parts(p)
        for i in range(1, len(parts) + 1):
            present.add("".join(parts[:i]))
    groups: dict[str, list[str]] = {}
    for p in paths:
        parts = path_parts(p)
        root = p
        # At least ``args[i]`` / ``kwargs['k']``: "kwargs appeared" would name no argument.
        for i in range(min(2, len(parts)), len(parts) + 1):
            prefix = "".join(parts[:i])
            if prefix not in present:
                root = prefix
                break
        groups.setdefault(root, []).append(p)
    return list(groups.items())


def _describe_subtree(leaves: list[str], index: dict[str, ArgSignature]) -> str:
    if len(leaves) == 1:
        return _describe_leaf(index[leaves[0]])
    return f"{len(leaves)} leaves"


def _describe_leaf(a: ArgSignature) -> str:
    if a.kind == "static":
        return f"static {a.value}"
    if a.kind != "array":
        return f"{a.kind} {a.value}"
    text = f"{a.dtype or '?'}{_shape_text(a.shape, brackets=True)}"
    return text + ("{weak}" if a.weak_type else "")


def _shape_text(shape: tuple[int, ...] | None, brackets: bool = False) -> str:
    if shape is None:
        return "[?]" if brackets else "unknown"
    inner = ",".join(str(d) for d in shape)
    return f"[{inner}]" if brackets else f"({inner})"


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_TREE_TEXT else text[: _MAX_TREE_TEXT - 3] + "..."
