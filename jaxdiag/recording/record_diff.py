"""What differs between two records of one function: the changes an explanation lists.

``diff`` compares the jit options and jax config states of the cache key (where both
records know them), the function object, the argument tree and each leaf. Leaves gone
or new are grouped under the shortest path the other record lacks, and a container
type change holding the same leaves is one ``container`` change, not a leaf each.
Records are plain data: nothing here imports jax.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable

from jaxdiag.recording import treedef_text
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, ArgSignature, Change, CompileRecord

#: The jax config states of the cache key as they were when recording started (name -> text);
#: a record's ``config`` holds only the states that differ from these.
CONFIG_DEFAULTS: dict[str, str] = {}
_MAX_TREE_TEXT = 80

# One component of a pytree path: a quoted dict key, an index, an attribute, or the head.
_PATH_PART = re.compile(r"""\['(?:[^'\\]|\\.)*'\]|\["(?:[^"\\]|\\.)*"\]|\[[^\]]*\]|\.[^.\[]+|^[^.\[]+""")


def diff(old: CompileRecord, new: CompileRecord) -> tuple[Change, ...]:
    """List what differs between two records of one function, function first, then by leaf."""
    changes: list[Change] = list(context_changes(old, new))
    if (
        old.function_id is not None
        and new.function_id is not None
        and old.function_id != new.function_id
        and new.origin != JAX_INTERNAL_ORIGIN
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


def context_changes(old: CompileRecord, new: CompileRecord) -> Iterable[Change]:
    """Jit options and config states that differ (only where both records know them)."""
    if old.jit_options is not None and new.jit_options is not None and old.jit_options != new.jit_options:
        was, now = _options(old.jit_options), _options(new.jit_options)
        for name in sorted(was.keys() | now.keys()):
            if was.get(name) != now.get(name):
                if name in LEAF_OPTIONS and old.jit_leaves is not None and new.jit_leaves is not None:
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
LEAF_OPTIONS = ("in_shardings", "out_shardings", "in_layouts", "out_layouts")


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
        yield Change(
            p,
            "weak_type",
            str(o.weak_type),
            str(n.weak_type),
            of_shape=None if n.shape is None else _shape_text(n.shape),
        )
    if sharding_differs(o, n):
        yield Change(p, "sharding", o.sharding, n.sharding)
    elif o.committed is not None and n.committed is not None and o.committed != n.committed:
        # A NumPy array, or a jnp array on the default device, against one put on devices
        # (their shardings may read alike, or one may have none): JAX keys its cache on it.
        yield Change(p, "committed", str(o.committed), str(n.committed))
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
