"""What JAX keys a compile on, as plain text: one ``ArgSignature`` per argument leaf.

Signatures are built from the arguments of the call that missed the cache
(concrete arrays, with their committed shardings) or, when those cannot be
had, from the tracers the trace-time wrapper receives. Either way the output is
plain data, so the compile log never holds a jax object.

``jaxdiag.jit`` and ``watch()`` record through the same rules here: one signature
builder (``signature_of``, which names modules' static fields); their call sites and
the functions' names are ``call_site``'s.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxdiag import jax_internals
from jaxdiag.jax_internals import transforms as internals_reads
from jaxdiag.config import DEFAULT_THRESHOLDS
from jaxdiag.recording.records import ArgSignature

#: Static fields listed one by one per record; past this, they are folded into one digest.
MAX_STATIC_FIELDS = 512
_MAX_TREE_TEXT = 4000


def with_labels(sigs: tuple[ArgSignature, ...], fun: Any) -> tuple[ArgSignature, ...]:
    """``sigs`` with ``label`` set to each path as the user wrote it: ``args[1]`` -> ``batch``.

    Positions whose parameter has a name (not ``*args``) and keyword arguments are
    renamed; the machine ``path`` is kept. Unchanged when ``fun`` has no signature.
    """
    names = _positional_names(fun)
    if names is None:
        return sigs
    out = []
    for sig in sigs:
        label = _label(sig.label or sig.path, names)
        out.append(sig if label is None else dataclasses.replace(sig, label=label))
    return tuple(out)


def _positional_names(fun: Any) -> tuple[str, ...] | None:
    if fun is None:
        return None
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return None
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _label(path: str, names: tuple[str, ...]) -> str | None:
    if path.startswith("args["):
        end = path.find("]")
        try:
            i = int(path[5:end])
        except ValueError:
            return None
        return names[i] + path[end + 1 :] if 0 <= i < len(names) else None
    if path.startswith("kwargs["):
        end = path.find("]")
        key = path[7:end]
        if len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"":
            return key[1:-1] + path[end + 1 :]
    return None


def signature_of(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    static_argnums: Sequence[int] = (),
    static_argnames: Sequence[str] = (),
    *,
    max_static_repr: int = DEFAULT_THRESHOLDS.max_static_repr,
    static_leaves: bool = False,
    batch_axes: Mapping[int, int] | None = None,
) -> tuple[tuple[ArgSignature, ...], str]:
    """One signature per leaf of a call's arguments, and the text of the dynamic ones' tree.

    The one signature builder of ``jaxdiag.jit`` and ``watch``. A module's static
    fields (``eqx.field(static=True)``, flax ``struct`` fields with
    ``pytree_node=False``, non-array attributes of ``nnx`` modules) live in its
    pytree node, where a change shows only as a different tree; here each is a
    ``kind="static"`` leaf at its own path (``args[0].act``), and the tree text
    leaves out the field values so that the change is reported once, by name.

    Args:
      args, kwargs: the call's arguments, static ones included.
      static_argnums, static_argnames: which of them are static (negative positions count
        from the end, as in ``jax.jit``).
      max_static_repr: static values' ``repr`` is cut to this many characters.
      static_leaves: treat every non-array leaf as static (``eqx.filter_jit``).
      batch_axes: ``id`` of a leaf -> the axis ``jax.vmap`` added to it.

    Returns:
      The leaf signatures, positional first, and the text of the dynamic arguments' tree.
    """
    static_pos = {i % len(args) for i in static_argnums if -len(args) <= i < len(args)}
    walker = _Walker(static_leaves, max_static_repr, batch_axes)
    dyn_args, dyn_kwargs = [], {}
    for i, arg in enumerate(args):
        if i in static_pos:
            walker.sigs.append(static_signature(f"args[{i}]", arg, max_static_repr))
        else:
            dyn_args.append(arg)
            walker.walk(f"args[{i}]", arg)
    for key, arg in kwargs.items():
        if key in static_argnames:
            walker.sigs.append(static_signature(f"kwargs[{key!r}]", arg, max_static_repr))
        else:
            dyn_kwargs[key] = arg
            walker.walk(f"kwargs[{key!r}]", arg)
    try:
        root = str(jax.tree_util.tree_structure((tuple(dyn_args), dyn_kwargs), is_leaf=_has_static_fields))
    except Exception:  # a custom node whose flatten fails; jax will report it
        root = "<unflattenable>"
    return tuple(walker.sigs), _short("; ".join([root, *walker.finish()]))


def traced_signature(
    args: Sequence[Any], kwargs: Mapping[str, Any], max_static_repr: int
) -> tuple[tuple[ArgSignature, ...], str]:
    """Signatures from inside a trace, where every non-static argument is a tracer."""

    def all_tracers(x: Any) -> bool:
        leaves = jax.tree_util.tree_leaves(x)
        return bool(leaves) and all(isinstance(leaf, jax.core.Tracer) for leaf in leaves)

    static_nums = [i for i, a in enumerate(args) if not all_tracers(a)]
    static_names = [k for k, a in kwargs.items() if not all_tracers(a)]
    return signature_of(args, kwargs, static_nums, static_names, max_static_repr=max_static_repr)


def static_signature(path: str, value: Any, max_repr: int) -> ArgSignature:
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not break the user's call
        text = f"<{type(value).__name__}: repr failed: {type(exc).__name__}>"
    if len(text) > max_repr:
        text = text[: max(max_repr - 3, 0)] + "..."
    return ArgSignature(path=path, kind="static", value=text)


def leaf_signature(path: str, leaf: Any) -> ArgSignature:
    """Shape, dtype, weak type, sharding and memory kind of one array-like leaf."""
    try:
        aval = jax.typeof(leaf)
    except Exception:  # not an array type; jax raises its own error for it
        return ArgSignature(path=path, kind="other", value=type(leaf).__name__)
    shape = getattr(aval, "shape", None)
    dtype = getattr(aval, "dtype", None)
    concrete = None if isinstance(leaf, jax.core.Tracer) else getattr(leaf, "sharding", None)
    sharding = concrete if concrete is not None else getattr(aval, "sharding", None)
    described = describe_sharding(sharding)
    return ArgSignature(
        path=path,
        kind="array",
        shape=tuple(int(d) if isinstance(d, int) else d for d in shape) if shape is not None else None,
        dtype=None if dtype is None else str(dtype),
        weak_type=bool(getattr(aval, "weak_type", False)),
        sharding=described,
        memory_kind=getattr(concrete, "memory_kind", None) if concrete is not None else None,
        placement=(
            internals_reads.placement(concrete, len(shape))
            if described is not None and concrete is not None and shape is not None
            else None
        ),
        committed=_committed(leaf),
    )


def _committed(leaf: Any) -> bool | None:
    """``ArgSignature.committed``: a jax.Array's own flag; ``False`` for what JAX places at the call (NumPy
    arrays and scalars, Python numbers); ``None`` for a tracer or anything else."""
    if isinstance(leaf, jax.core.Tracer):
        return None
    if isinstance(leaf, jax.Array):
        committed = getattr(leaf, "committed", None)
        return committed if isinstance(committed, bool) else None
    if isinstance(leaf, (np.ndarray, np.generic, bool, int, float, complex)):
        return False
    return None


# --- static fields of modules ------------------------------------------------------


class _Walker:
    """Collects leaf signatures and tree text, descending into nodes with static fields."""

    def __init__(self, static_leaves: bool, max_repr: int, batch_axes: Mapping[int, int] | None = None) -> None:
        self.static_leaves, self.max_repr = static_leaves, max_repr
        self.batch_axes = batch_axes or {}
        self.sigs: list[ArgSignature] = []
        self.segments: list[str] = []
        self.fields = 0
        self.folded = hashlib.sha1()

    def walk(self, prefix: str, tree: Any) -> None:
        try:
            pairs, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_has_static_fields)
        except Exception:
            self.sigs.append(ArgSignature(path=prefix, kind="other", value=type(tree).__name__))
            return
        for keys, leaf in pairs:
            path = prefix + jax.tree_util.keystr(keys)
            fields = _static_fields(leaf)
            if fields:
                self._node(path, leaf, fields)
            elif self.static_leaves and not isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
                self.sigs.append(static_signature(path, leaf, self.max_repr))
            elif id(leaf) in self.batch_axes:
                self.sigs.append(dataclasses.replace(leaf_signature(path, leaf), batch_axis=self.batch_axes[id(leaf)]))
            else:
                sig = leaf_signature(path, leaf)
                if _is_variable_value(tree, keys):  # flax nnx: the user writes model.w1, not model.w1.value
                    sig = dataclasses.replace(sig, label=path[: -len(".value")])
                self.sigs.append(sig)

    def _node(self, path: str, node: Any, fields: list[tuple[str, Any]]) -> None:
        children, _ = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda y: y is not node)
        if len(children) == 1 and children[0][1] is node:  # not a pytree node: one leaf
            self.sigs.append(
                static_signature(path, node, self.max_repr) if self.static_leaves else leaf_signature(path, node)
            )
            return
        self.segments.append(f"{path}: {type(node).__qualname__}")
        for name, value in fields:
            sig = static_signature(f"{path}.{name}", value, self.max_repr)
            self.fields += 1
            if self.fields <= MAX_STATIC_FIELDS:
                self.sigs.append(sig)
            else:
                self.folded.update(f"{sig.path}={sig.value}\n".encode())
        for keys, child in children:
            child_path = path + jax.tree_util.keystr(keys)
            if not _static_fields(child):
                # Aux data of plain nodes below (variable metadata, dict keys) still counts.
                sub = jax.tree_util.tree_structure(child, is_leaf=_has_static_fields)
                if sub.num_nodes > 1 or sub.num_leaves == 0:
                    self.segments.append(f"{child_path}: {sub}")
            self.walk(child_path, child)

    def finish(self) -> list[str]:
        extra = self.fields - MAX_STATIC_FIELDS
        if extra > 0:
            return [*self.segments, f"{extra} more static fields (sha1 {self.folded.hexdigest()[:16]})"]
        return self.segments


def _is_variable_value(tree: Any, keys: Sequence[Any]) -> bool:
    """Whether the leaf at ``keys`` is the ``.value`` of a flax ``nnx.Variable`` (a ``Param``)."""
    if not keys or getattr(keys[-1], "name", None) != "value" or "flax.nnx" not in sys.modules:
        return False
    node = tree
    try:
        for key in keys[:-1]:
            if hasattr(key, "name"):
                node = getattr(node, key.name)
            elif hasattr(key, "idx"):
                node = node[key.idx]
            elif hasattr(key, "key"):
                node = node[key.key]
            else:
                return False
    except Exception:
        return False
    return any(c.__name__ == "Variable" and c.__module__.startswith("flax.nnx") for c in type(node).__mro__)


def _static_fields(node: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` of the static fields of a module instance; empty for anything else."""
    if isinstance(node, (type, jax.Array, np.ndarray, np.generic)):  # arrays: the common leaf, cheaply
        return []
    state = getattr(node, "__dict__", None)
    flags = jax_internals.nnx_node_flags(state) if isinstance(state, dict) else None
    if flags is not None:  # flax nnx: attribute -> whether it is a pytree node
        return [(k, state.get(k)) for k, is_node in flags.items() if not is_node and not k.startswith("_pytree__")]
    names = _dataclass_static_names(type(node)) if dataclasses.is_dataclass(node) else ()
    return [(name, getattr(node, name, None)) for name in names]


def _has_static_fields(node: Any) -> bool:
    return bool(_static_fields(node))


@functools.lru_cache(maxsize=1024)
def _dataclass_static_names(cls: type) -> tuple[str, ...]:
    # equinox: field(static=True); flax.struct: field(pytree_node=False)
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if f.metadata.get("static") is True or f.metadata.get("pytree_node") is False
    )


def _short(text: str) -> str:
    if len(text) <= _MAX_TREE_TEXT:
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    return f"{text[:1000]}... ({len(text)} chars, sha1 {digest})"


def describe_sharding(sharding: Any) -> str | None:
    """Short readable text for a sharding: ``P('x', None) on mesh(x=4, y=2)``.

    Meshes whose axes are not all ``Auto`` list their axis types after a ``;``. An
    abstract sharding on an empty mesh (a tracer outside any mesh) says nothing, so
    it gives ``None``.
    """
    if sharding is None:
        return None
    kind = type(sharding).__name__
    try:
        if kind == "NamedSharding":
            mesh = sharding.mesh
            if not mesh.axis_names:
                return None
            axes = ", ".join(f"{n}={s}" for n, s in zip(mesh.axis_names, mesh.axis_sizes))
            types = [str(t).rsplit(".", 1)[-1] for t in getattr(mesh, "axis_types", ())]
            if any(t != "Auto" for t in types):
                axes += "; " + ", ".join(types)
            spec = repr(sharding.spec)  # JAX before 0.9 writes PartitionSpec(...) for P(...)
            spec = "P" + spec[len("PartitionSpec") :] if spec.startswith("PartitionSpec(") else spec
            return f"{spec} on mesh({axes})"
        if kind == "SingleDeviceSharding":
            (device,) = sharding.device_set
            return f"SingleDeviceSharding({device.platform}:{device.id})"
    except Exception:
        pass
    text = repr(sharding)
    return text if len(text) <= 160 else text[:157] + "..."
