"""Gather one compile's sharding facts for its ``CompileRecord``: the listener's sharding hook.

``collect`` runs once per compile, after the backend compile, with the call's
live arguments and a way to reach the executable. Reading the optimized HLO
costs time (megabytes of text for a large model), so it is read by default only
for programs on more than one device; a single-device program gets facts only
when its function asked for analysis (``jaxdiag.jit(analysis=True)``). Any
failure warns once and gives ``None``: a problem here never breaks a call.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from jaxdiag import jax_internals
from jaxdiag.errors import warn_once
from jaxdiag.sharding import hlo, specs
from jaxdiag.sharding.facts import DTYPE_NAMES, LeafSharding, MeshFacts, ShardingFacts, global_shape
from jaxdiag.sharding.tiles import HloSharding, MeshGeometry, parse_sharding


def collect(pending: Any, executable: Callable[[], Any]) -> dict[str, Any] | None:
    """The ``sharding`` dict of a compile's record, or ``None`` when not collected.

    Args:
      pending: the listener's ``Pending`` (``args``, ``kwargs``, ``static``, ``hooks``,
        ``executable``, ``frame``).
      executable: returns the just-compiled executable, when ``pending`` has none.
    """
    try:
        return _collect(pending, executable)
    except Exception as exc:  # never the user's problem
        warn_once("sharding", f"jaxdiag recorded no sharding facts: {type(exc).__name__}: {exc}")
        return None


def _collect(pending: Any, executable: Callable[[], Any]) -> dict[str, Any] | None:
    ex = pending.executable if pending.executable is not None else executable()
    devices = list(ex.local_devices()) if ex is not None else []
    # One local device may still be one of many (a process per GPU): then ask the arguments.
    if (
        len(devices) <= 1
        and not pending.hooks.wants_executable()
        and (specs.single_process() or not specs.spans_devices((pending.args, pending.kwargs)))
    ):
        return None
    leaves = specs.dynamic_leaves(pending.args, pending.kwargs, pending.static)
    shardings = [specs.sharding_of(leaf) for _, _, leaf in leaves]
    jit_info = jax_internals.jit_info_of(getattr(pending, "frame", None))
    user_in, user_out = specs.user_specified(jit_info)
    jit_in, jit_out = jax_internals.jit_shardings(jit_info)
    mesh = specs.named_mesh(shardings + jit_in + jit_out) or specs.context_mesh(len(devices))
    text = ex.hlo_modules()[0].to_string() if ex is not None else None
    facts = build_facts(
        text,
        leaves,
        mesh=mesh,
        devices=devices,
        out_shardings=_output_shardings(ex),
        in_shardings=_parameter_shardings(ex),
        user_in=user_in,
        user_out=user_out,
    )
    return facts.to_dict()


def build_facts(
    hlo_text: str | None,
    leaves: Sequence[tuple[str, str, Any]],
    *,
    mesh: Any = None,
    devices: Sequence[Any] = (),
    out_shardings: Sequence[HloSharding] | None = None,
    in_shardings: Sequence[HloSharding] | None = None,
    user_in: bool = False,
    user_out: bool = False,
) -> ShardingFacts:
    """Join a program's optimized HLO with its live argument leaves.

    Args:
      hlo_text: the optimized HLO (``compiled.as_text()``); ``None`` gives facts from
        the leaves alone.
      leaves: ``(path, keystr, leaf)`` of the dynamic arguments (``specs.dynamic_leaves``).
      mesh: the ``jax.sharding.Mesh`` the program runs on (``None``: one axis over ``devices``).
      devices: the executable's devices, in device-assignment order.
      out_shardings: the compiled output shardings, parsed; ``None`` when unknown.
      in_shardings: the compiled shardings of the entry parameters, parsed, by parameter
        number; ``None`` when unknown (then the HLO text's, which JAX 0.12 leaves out).
      user_in, user_out: whether jit was given ``in_shardings``/``out_shardings``.
    """
    module = hlo.parse_module(hlo_text) if hlo_text else None
    n = max(len(devices), module.num_partitions if module else 1)
    if mesh is not None:
        mesh_f = specs.mesh_facts(mesh)
        ids = [d.id for d in mesh.devices.flat]
        positions = (
            tuple(ids.index(d.id) for d in devices)
            if devices and all(d.id in ids for d in devices) and len(devices) == len(ids)
            else None
        )
    else:
        mesh_f = specs.device_mesh_facts(devices) if devices else MeshFacts(("devices",), (n,), inferred=True)
        positions = None
    geo = MeshGeometry(mesh_f.axis_names, mesh_f.axis_sizes, positions)
    inputs = _inputs(module, leaves, geo, user_in, in_shardings)
    if module is None:
        return ShardingFacts("", mesh_f, inputs, (), (), hlo=False)
    outputs = _outputs(module, geo, out_shardings, user_out)
    return ShardingFacts(module.name, mesh_f, inputs, outputs, tuple(hlo.collectives(module, geo)))


def _inputs(
    module: hlo.HloModule | None,
    leaves: Sequence[tuple[str, str, Any]],
    geo: MeshGeometry,
    user_in: bool,
    compiled: Sequence[HloSharding] | None = None,
) -> tuple[LeafSharding, ...]:
    params = module.entry_params() if module is not None else []
    paired = _pair(leaves, params)
    out = []
    for i, (path, _, leaf) in enumerate(leaves):
        live = specs.leaf_sharding(path, leaf)  # "user" when the array itself is committed
        chosen_by = "user" if user_in else live.chosen_by
        p = paired.get(i)
        if p is None:
            out.append(dataclasses.replace(live, chosen_by=chosen_by))
            continue
        hs = hlo.entry_param_sharding(p, compiled)
        # A committed array's own spec is exact; otherwise read what the compiled program expects.
        spec = live.spec if live.chosen_by == "user" and live.spec is not None else geo.spec_of(hs)
        out.append(
            LeafSharding(
                path=path,
                name=p.op_name or None,
                shape=live.shape,
                dtype=live.dtype or DTYPE_NAMES.get(p.shape[0][0]) if p.shape else live.dtype,
                spec=spec,
                bytes_per_device=hlo.shape_bytes(p.shape),
                chosen_by=chosen_by,
                hlo_sharding=None if spec is not None else hs.text,
            )
        )
    return tuple(out)


def _pair(leaves: Sequence[tuple[str, str, Any]], params: list[hlo.Instr]) -> dict[int, hlo.Instr]:
    """Which entry parameter each leaf became; JAX drops unused arguments, so some have none."""
    if len(params) == len(leaves):
        return dict(enumerate(params))
    out: dict[int, hlo.Instr] = {}
    i = 0
    for p in params:
        while i < len(leaves):
            _, suffix, leaf = leaves[i]
            i += 1
            if _fits(leaf, p) and (not p.op_name or p.op_name.endswith(suffix)):
                out[i - 1] = p
                break
    return out


def _fits(leaf: Any, param: hlo.Instr) -> bool:
    """Whether ``leaf`` could be ``param``: same dtype and rank, its shard's sizes dividing the leaf's."""
    if len(param.shape) != 1:
        return False
    dtype, dims = param.shape[0]
    shape = tuple(getattr(leaf, "shape", ()) or ())
    leaf_dtype = getattr(leaf, "dtype", None)
    if leaf_dtype is not None and DTYPE_NAMES.get(dtype) not in (None, str(leaf_dtype)):
        return False
    return len(shape) == len(dims) and all(d and s % d == 0 for s, d in zip(shape, dims))


def _outputs(
    module: hlo.HloModule, geo: MeshGeometry, shardings: Sequence[HloSharding] | None, user_out: bool
) -> tuple[LeafSharding, ...]:
    root = module.entry_root()
    if root is None:
        return ()
    out = []
    for i, (dtype, dims) in enumerate(root.shape):
        hs = parse_sharding("{replicated}") if geo.n_devices == 1 else None
        if shardings:  # XLA gives one sharding for all outputs when they share it
            hs = shardings[i] if len(shardings) == len(root.shape) else shardings[0]
        spec = geo.spec_of(hs) if hs is not None else None
        tiles = hs.tiles if hs is not None and hs.kind == "tiled" else ()
        out.append(
            LeafSharding(
                path=f"out[{i}]",
                name=None,
                shape=global_shape(dims, tiles) if tiles else dims,
                dtype=DTYPE_NAMES.get(dtype, dtype),
                spec=spec,
                bytes_per_device=hlo.shape_bytes(((dtype, dims),)),
                chosen_by="user" if user_out else "compiler",
                hlo_sharding=None if spec is not None or hs is None else hs.text,
            )
        )
    return tuple(out)


def _output_shardings(ex: Any) -> list[HloSharding] | None:
    if ex is None:
        return None
    texts = jax_internals.read_output_shardings(ex)
    return None if texts is None else [parse_sharding(t) for t in texts]


def _parameter_shardings(ex: Any) -> list[HloSharding] | None:
    if ex is None:
        return None
    texts = jax_internals.read_parameter_shardings(ex)
    return None if texts is None else [parse_sharding(t) for t in texts]
