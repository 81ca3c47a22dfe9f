"""Sharding facts read from live JAX objects: meshes, ``PartitionSpec``s, bytes per device.

Works on what a compile has at hand (concrete arrays, avals, shardings, the mesh)
and returns plain data (``MeshFacts``, ``LeafSharding``), so nothing here keeps a
jax object alive. Only duck-typed attribute reads: no private JAX module.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from jaxdiag.sharding.facts import LeafSharding, MeshFacts
from jaxdiag.sharding.tiles import Spec


def spec_entries(spec: Any, ndim: int | None = None) -> Spec:
    """A ``PartitionSpec`` as plain entries, one per dimension (``()`` when replicated)."""
    out: list[None | str | tuple[str, ...]] = []
    # A spec with unreduced or reduced axes refuses to be iterated (JAX 0.10 on): its entries
    # per dimension are ``partitions``.
    entries = spec.partitions if hasattr(spec, "partitions") else tuple(spec)
    for entry in tuple(entries)[: ndim if ndim is not None else None]:
        if entry is None or isinstance(entry, str):
            out.append(entry)
        else:
            names = tuple(str(e) for e in entry)
            out.append(None if not names else names[0] if len(names) == 1 else names)
    if all(e is None for e in out):
        return ()
    return tuple(out) + (None,) * max((ndim or 0) - len(out), 0)


def mesh_facts(mesh: Any) -> MeshFacts:
    """Facts of a ``jax.sharding.Mesh`` (or an ``AbstractMesh``, which has no devices)."""
    names = tuple(str(n) for n in mesh.axis_names)
    sizes = tuple(int(s) for s in getattr(mesh, "axis_sizes", None) or [mesh.shape[n] for n in names])
    devices = list(getattr(getattr(mesh, "devices", None), "flat", ()))
    kinds = tuple(sorted({str(getattr(d, "device_kind", "?")) for d in devices}))
    platform = str(devices[0].platform) if devices else None
    types = tuple(str(t).rsplit(".", 1)[-1] for t in getattr(mesh, "axis_types", ()) or ())
    return MeshFacts(names, sizes, kinds, platform, types)


def device_mesh_facts(devices: Sequence[Any]) -> MeshFacts:
    """A one-axis mesh named ``devices`` over a program's devices, when it has no named mesh."""
    kinds = tuple(sorted({str(getattr(d, "device_kind", "?")) for d in devices}))
    platform = str(devices[0].platform) if devices else None
    return MeshFacts(("devices",), (max(len(devices), 1),), kinds, platform, inferred=True)


def named_mesh(shardings: Iterable[Any]) -> Any:
    """The concrete mesh with the most devices among ``NamedSharding``s, or ``None``."""
    best = None
    for s in shardings:
        mesh = getattr(s, "mesh", None)
        if mesh is None or not getattr(mesh, "axis_names", ()) or getattr(mesh, "devices", None) is None:
            continue
        if best is None or mesh.devices.size > best.devices.size:
            best = mesh
    return best


def context_mesh(n_devices: int) -> Any:
    """The concrete mesh of ``jax.set_mesh`` in context, when it spans ``n_devices``; else ``None``.

    A program whose arguments carry no mesh (uncommitted arrays, jit's ``in_shardings``
    given as bare ``PartitionSpec``s) runs on the mesh in context.
    """
    try:
        import jax

        get_mesh = getattr(jax.sharding, "get_mesh", None)
        if get_mesh is None:  # JAX 0.8 keeps it private
            from jax._src import mesh as mesh_lib

            get_mesh = mesh_lib.get_concrete_mesh
        mesh = get_mesh()
    except Exception:  # a JAX without either, or no mesh set
        return None
    if mesh is None or not getattr(mesh, "axis_names", ()) or getattr(mesh, "devices", None) is None:
        return None
    return mesh if mesh.devices.size == n_devices else None


def sharding_of(leaf: Any) -> Any:
    """The sharding of a concrete array, or of a tracer's aval (``None`` if it has neither)."""
    if type(leaf).__name__.endswith("Tracer"):  # every jax tracer class; .sharding may raise on them
        return getattr(getattr(leaf, "aval", None), "sharding", None)
    try:
        return getattr(leaf, "sharding", None)
    except Exception:
        return None


def single_process() -> bool:
    """Whether this process sees every device (then an executable's devices are all of them)."""
    import jax

    return jax.process_count() == 1


def spans_devices(tree: Any) -> bool:
    """Whether any array leaf of ``tree`` lives on more than one device."""
    import jax

    return any(n_devices_of(sharding_of(leaf)) > 1 for leaf in jax.tree_util.tree_leaves(tree))


def n_devices_of(sharding: Any) -> int:
    try:
        return int(sharding.num_devices)
    except Exception:
        return 1


def leaf_sharding(path: str, leaf: Any, *, name: str | None = None, chosen_by: str | None = None) -> LeafSharding:
    """The layout of one live leaf (array, tracer, ``ShapeDtypeStruct``), from its own sharding."""
    shape = tuple(int(d) for d in getattr(leaf, "shape", ()) or ())
    dtype = getattr(leaf, "dtype", None)
    itemsize = getattr(dtype, "itemsize", None)
    sharding = sharding_of(leaf)
    spec: Spec | None = None
    hlo_text = None
    per_device: Sequence[int] | None = shape
    if type(sharding).__name__ == "NamedSharding":
        spec = spec_entries(sharding.spec, len(shape))
        per_device = _shard_shape(sharding, shape)
    elif type(sharding).__name__ == "SingleDeviceSharding" or sharding is None:
        spec = ()
    else:
        hlo_text = str(sharding)
        per_device = _shard_shape(sharding, shape)
    if chosen_by is None:
        chosen_by = "user" if _committed(leaf) else "compiler"
    nbytes = None if itemsize is None or per_device is None else int(math.prod(per_device) * itemsize)
    return LeafSharding(
        path,
        name,
        shape,
        None if dtype is None else str(dtype),
        spec,
        nbytes,
        chosen_by,
        hlo_text if spec is None else None,
    )


def _committed(leaf: Any) -> bool:
    """Whether the user placed ``leaf``; tracers (a jit compiled under ``grad``/``vjp``) raise on the question."""
    try:
        return bool(getattr(leaf, "committed", False))
    except Exception:
        return False


def _shard_shape(sharding: Any, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in sharding.shard_shape(shape))
    except Exception:
        return None


def dynamic_leaves(
    args: Sequence[Any], kwargs: Mapping[str, Any], static: tuple[Sequence[int], Sequence[str]] | None
) -> list[tuple[str, str, Any]]:
    """``(path, keystr, leaf)`` of the non-static argument leaves, in the order JAX numbers them.

    JAX flattens ``(args, kwargs)`` without the static ones, so keyword arguments
    come sorted by name; paths are written as ``ArgSignature`` writes them, and
    ``keystr`` is the part inside the argument (``['w1']``), which JAX's own
    argument names (``params['w1']``) end with too.
    """
    import jax

    nums, names = static if static is not None else ((), ())
    fixed = {i % len(args) for i in nums if -len(args) <= i < len(args)} if args else set()
    out: list[tuple[str, str, Any]] = []
    parts = [(f"args[{i}]", a) for i, a in enumerate(args) if i not in fixed]
    parts += [(f"kwargs[{k!r}]", kwargs[k]) for k in sorted(kwargs) if k not in names]
    for prefix, tree in parts:
        pairs, _ = jax.tree_util.tree_flatten_with_path(tree)
        for p, leaf in pairs:
            key = jax.tree_util.keystr(p)
            out.append((prefix + key, key, leaf))
    return out


def user_specified(jit_info: Any) -> tuple[bool, bool]:
    """Whether ``jax.jit`` was given ``in_shardings`` / ``out_shardings`` (read from its ``PjitInfo``)."""

    def given(leaves: Any) -> bool:
        return any(type(s).__name__ not in ("UnspecifiedValue", "NoneType") for s in leaves or ())

    if jit_info is None:
        return False, False
    from jaxdiag.jax_internals import jit_shardings

    in_leaves, out_leaves = jit_shardings(jit_info)
    return given(in_leaves), given(out_leaves)
