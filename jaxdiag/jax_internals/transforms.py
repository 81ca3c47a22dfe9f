"""The private JAX reads behind transformed compiles, jit options and config states, one small function each.

Part of the one door to JAX's internals (``jaxdiag.jax_internals``): recording reads
these through it (``recording.listener``, ``transformed``, ``watch``, ``wrapper``), and
``tests/recording/test_jax_internals_transforms.py`` tests each on a real program.

Each function reads one thing JAX does not publish (a frame's locals, a private
field of a jit object or a config holder) and returns plain Python values, or
``None`` when this JAX has no such thing: a caller then records less, never
something wrong. Kept in a module of its own to keep the door's first module short.
"""

from __future__ import annotations

import enum
import functools
import types
from typing import Any

#: Frames of JAX's rules for ``jit_p`` that tell which transformation made a compile.
_TRANSFORM_FRAMES = {
    "_pjit_linearize": "grad-forward",
    "_pjit_transpose_fancy": "grad-backward",
    "_pjit_transpose": "grad-backward",
    "_pjit_batcher": "vmap",
    "_pjit_jvp": "jvp",
}
_TRANSFORM_DEPTH = 12


def impl_cache_miss_code() -> types.CodeType | None:
    """The code of ``call_impl_cache_miss``: the compile of a ``jit_p`` equation run eagerly.

    ``jax.grad`` and ``jax.vmap`` of a jitted function do not compile through the
    function's own ``cache_miss``: they bind ``jit_p`` with a transformed jaxpr
    (forward with residuals, transpose, batched), which compiles here.
    """
    try:
        from jax._src import pjit

        for const in pjit._pjit_call_impl.__code__.co_consts:
            if isinstance(const, types.CodeType) and const.co_name == "call_impl_cache_miss":
                return const
    except Exception:
        pass
    return None


def impl_call(frame: types.FrameType) -> tuple[tuple[Any, ...], str | None, str] | None:
    """``(flat arguments, func_src_info, transform)`` of a ``call_impl_cache_miss`` frame.

    ``func_src_info`` is the ``"name at file:line"`` JAX stores in the jaxpr's debug
    info, matching the jitted function's ``jit_info.fun_sourceinfo``.
    """
    try:
        local = frame.f_locals
        args = tuple(local["args"])
        jaxpr = local["jaxpr"]  # a ClosedJaxpr before JAX 0.11, which merged it into Jaxpr
        info = getattr(jaxpr, "debug_info", None) or getattr(getattr(jaxpr, "jaxpr", None), "debug_info", None)
        source = getattr(info, "func_src_info", None)
        return args, source if isinstance(source, str) else None, transform_of(frame)
    except Exception:
        return None


def transform_rules() -> dict[str, str] | None:
    """The ``jit_p`` rules of this JAX that ``transform_of`` looks for, by name, with what each
    says (``None`` when a transformation has none: its compiles would read ``transformed``)."""
    try:
        from jax._src import pjit
    except Exception:
        return None
    found = {name: kind for name, kind in _TRANSFORM_FRAMES.items() if callable(getattr(pjit, name, None))}
    return found if {"grad-forward", "grad-backward", "vmap"} <= set(found.values()) else None


def jit_trace_cache() -> Any:
    """``cache_keys`` of jit's trace cache, which ``earlier_traces`` and ``cached_calls`` read (``None``: none)."""
    try:
        from jax._src import pjit

        keys = pjit._infer_params_cached.cache_keys
    except Exception:
        return None
    return keys if callable(keys) else None


def transform_of(frame: types.FrameType) -> str:
    """Which transformation bound the ``jit_p`` that compiles in ``frame`` (nearest rule wins)."""
    outer = frame.f_back
    for _ in range(_TRANSFORM_DEPTH):
        if outer is None:
            break
        found = _TRANSFORM_FRAMES.get(outer.f_code.co_name)
        if found is not None and outer.f_globals.get("__name__") == "jax._src.pjit":
            return found
        outer = outer.f_back
    return "transformed"


def batch_dims(frame: types.FrameType) -> tuple[int | None, ...] | None:
    """The vmapped axis of each flat input, from the nearest ``_pjit_batcher`` frame outward."""
    outer = frame.f_back
    for _ in range(_TRANSFORM_DEPTH):
        if outer is None:
            return None
        if outer.f_code.co_name == "_pjit_batcher":
            try:
                dims = outer.f_locals["dims_in"]
                return tuple(d if isinstance(d, int) else None for d in dims)
            except Exception:
                return None
        outer = outer.f_back
    return None


def fun_sourceinfo(jit_info: Any) -> str | None:
    """``jit_info.fun_sourceinfo``: the key that ties a transformed compile to its jitted function."""
    value = getattr(jit_info, "fun_sourceinfo", None)
    return value if isinstance(value, str) else None


#: ``jit_info`` fields that are jit options, with their defaults where a plain ``jax.jit`` has no
#: such field (``_plain_jit_info``); each names its own cache.
_JIT_OPTION_DEFAULTS: dict[str, Any] = {
    "static_argnums": (),
    "static_argnames": (),
    "donate_argnums": (),
    "donate_argnames": (),
    "device": None,
    "backend": None,
    "keep_unused": False,
    "inline": False,
    "compiler_options_kvs": (),
}


def jit_options(jit_info: Any, leaf_texts: dict[str, str] | None = None) -> str | None:
    """The jit options of ``jit_info`` that are not at their default, as ``"k=v, ..."`` text.

    ``""`` when all are at their defaults, ``None`` when ``jit_info`` is unknown.
    Shardings and layouts count only when the user gave them; ``leaf_texts`` (path ->
    text, see ``jit_option_leaves``) writes them in full
    (``in_shardings={[0]: P(), [1]: P('data',)}``), or, past ``_MAX_OPTION_TEXT``, as
    their leaf count and a digest of the full text, so that two jit objects with
    different shardings never read as one.
    """
    if jit_info is None:
        return None
    parts: list[str] = []
    try:
        plain = _plain_jit_info()
        for name, fallback in _JIT_OPTION_DEFAULTS.items():
            default = getattr(plain, name, fallback)
            value = getattr(jit_info, name, default)
            if name.endswith("_argnames") and parts and parts[-1].startswith(name[:-5] + "nums="):
                continue  # jit derives the names from the positions given
            if value != default and not (default == () and not value):
                parts.append(f"{name}={_option_text(value)}")
        leaves = leaf_texts if leaf_texts is not None else {k: repr(v) for k, v in jit_option_leaves(jit_info).items()}
        for name in _PLACEMENT_OPTIONS:
            mine = {k: v for k, v in leaves.items() if k.startswith(name + "[") or k == name}
            if mine:
                parts.append(f"{name}={_leaves_text(mine)}")
    except Exception:
        return None
    return ", ".join(parts)


@functools.cache
def _plain_jit_info() -> Any:
    """The ``jit_info`` of ``jax.jit`` with no options: what this JAX stores for each default.

    JAX 0.12 stores ``inline=False`` as ``jax.Inline.AUTO``, so a fixed table of defaults
    would call every jit object's inlining a chosen option.
    """
    try:
        import jax

        return getattr(jax.jit(_plain), "_jit_info", None)
    except Exception:
        return None


def _plain(x: Any) -> Any:
    return x


#: jit options given per argument or output leaf.
_PLACEMENT_OPTIONS = ("in_shardings", "out_shardings", "in_layouts", "out_layouts")
_MAX_OPTION_TEXT = 400


def jit_option_leaves(jit_info: Any) -> dict[str, Any]:
    """Each leaf the user gave of jit's ``in_shardings``/``out_shardings``/layouts, by path.

    ``{"in_shardings[1]['x']": NamedSharding(...)}``: the path is the leaf's place in
    the option's pytree as the user wrote it (a prefix of the arguments' tree). Empty
    when unknown.
    """
    if jit_info is None:
        return {}
    try:
        import jax

        out: dict[str, Any] = {}
        for name in _PLACEMENT_OPTIONS:
            leaves = list(getattr(jit_info, f"{name}_leaves", ()) or ())
            if not any(_given(x) for x in leaves):
                continue
            treedef = getattr(jit_info, f"{name}_treedef", None)
            paths: list[str] = [f"[{i}]" for i in range(len(leaves))]
            if treedef is not None and treedef.num_leaves == len(leaves):
                marks = list(range(len(leaves)))
                flat, _ = jax.tree_util.tree_flatten_with_path(jax.tree_util.tree_unflatten(treedef, marks))
                if [i for _, i in flat] == marks:
                    paths = [jax.tree_util.keystr(keys) for keys, _ in flat]
            for path, leaf in zip(paths, leaves):
                if _given(leaf):
                    out[name + path] = leaf
        return out
    except Exception:
        return {}


def _given(leaf: Any) -> bool:
    return leaf is not None and type(leaf).__name__ != "UnspecifiedValue"


def _leaves_text(leaves: dict[str, str]) -> str:
    text = "{" + ", ".join(f"{k[k.index('[') :] if '[' in k else k}: {v}" for k, v in leaves.items()) + "}"
    if len(text) <= _MAX_OPTION_TEXT:
        return text
    import hashlib

    return f"({len(leaves)} leaves, sha1 {hashlib.sha1(text.encode()).hexdigest()[:16]})"


def _option_text(value: Any) -> str:
    if isinstance(value, enum.Enum):  # jax.Inline.AUTO, not <Inline.AUTO: 'auto'>
        return f"{type(value).__name__}.{value.name}"
    text = repr(tuple(value) if isinstance(value, list) else value)
    return text if len(text) <= 200 else text[:197] + "..."


def placement(sharding: Any, ndim: int) -> str | None:
    """Where ``sharding`` puts the pieces of an array of rank ``ndim``, as JAX compares them.

    JAX treats two shardings as one when ``Sharding.is_equivalent_to(other, ndim)``:
    the same XLA sharding for that rank on the same devices and memory kind. This is
    that comparison as text (the XLA sharding, then a digest of the device ids), so
    that plain records can be compared. ``None`` when it cannot be had (an abstract
    sharding inside a trace).
    """
    try:
        import hashlib

        hlo = sharding._to_xla_hlo_sharding(ndim)
        ids = ",".join(str(d.id) for d in sharding._internal_device_list)
        return f"{hlo}@{hashlib.sha1(ids.encode()).hexdigest()[:12]}"
    except Exception:
        return None


def config_state() -> dict[str, str] | None:
    """Every jax config state in the jit cache key (``trace_context``), by name, as text.

    Values without a readable ``repr`` (an object address) are left out: they could
    not be compared across records anyway.
    """
    try:
        from jax._src import config

        names, values = config.trace_context_names(), config.trace_context()
    except Exception:
        return None
    out = {}
    for name, value in zip(names, values):
        text = value if isinstance(value, str) else repr(value)
        if " at 0x" not in text and len(text) <= 400:
            out[str(name)] = text
    return out


def earlier_traces(fun: Any) -> int | None:
    """How many traces of ``fun`` JAX's jit trace cache holds (``None``: cannot tell)."""
    try:
        from jax._src import pjit

        keys = pjit._infer_params_cached.cache_keys()
    except Exception:
        return None
    count = 0
    for key in keys:
        ref = key[0] if isinstance(key, tuple) and key else None
        try:
            if ref is not None and ref() is fun:
                count += 1
        except TypeError:
            continue
    return count


def aot_compile_code() -> types.CodeType | None:
    """The code of ``Lowered.compile``: an ahead-of-time compile the user asked for."""
    try:
        import inspect

        from jax._src import stages

        return inspect.unwrap(stages.Lowered.compile).__code__
    except Exception:
        return None


def aot_arguments(frame: types.FrameType) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The lowered call's arguments as ``jax.ShapeDtypeStruct`` leaves, from ``Lowered.args_info``."""
    try:
        import jax

        lowered = frame.f_locals["self"]
        args, kwargs = lowered.args_info

        def struct(info: Any) -> Any:
            weak = bool(getattr(getattr(info, "_aval", None), "weak_type", False))
            return jax.ShapeDtypeStruct(info.shape, info.dtype, weak_type=weak)

        is_info = lambda x: hasattr(x, "donated") and hasattr(x, "shape")  # noqa: E731
        return (
            tuple(jax.tree_util.tree_map(struct, tuple(args), is_leaf=is_info)),
            dict(jax.tree_util.tree_map(struct, dict(kwargs), is_leaf=is_info)),
        )
    except Exception:
        return None


def cached_calls(fun: Any, jit_info: Any, limit: int = 8) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The calls of ``fun`` (with ``jit_info``) that JAX's jit trace cache holds, newest last.

    Each is rebuilt from the cache key: static values as they were, array leaves as
    ``jax.ShapeDtypeStruct`` of the traced types. Lets a late ``watch`` compare a
    first compile with the compiles made before it started. Empty when unknown.
    """
    try:
        import jax
        from jax._src import pjit

        keys = pjit._infer_params_cached.cache_keys()
    except Exception:
        return []
    out = []
    for key in keys:
        try:
            if not (isinstance(key, tuple) and len(key) >= 3 and key[0]() is fun):
                continue
            info, sig, avals = key[2][0], key[2][1], key[2][2]
            if info is not jit_info and info != jit_info:
                continue
            out.append(_rebuild_call(jax, sig, avals, tuple(getattr(jit_info, "static_argnums", ()) or ())))
        except Exception:
            continue
    return out[-limit:]


def _rebuild_call(
    jax: Any, sig: Any, avals: Any, static_argnums: tuple[int, ...]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    treedefs, names = list(sig.dynamic_arg_treedefs), list(sig.dynamic_arg_names)
    statics, static_names = list(sig.static_args), list(sig.static_arg_names)
    leaves = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=bool(getattr(a, "weak_type", False))) for a in avals]
    dynamic, start = [], 0
    for treedef in treedefs:
        dynamic.append(jax.tree_util.tree_unflatten(treedef, leaves[start : start + treedef.num_leaves]))
        start += treedef.num_leaves
    if start != len(leaves):
        raise ValueError("leaf count")
    n_dyn_pos, n_static_pos = len(treedefs) - len(names), len(statics) - len(static_names)
    total = n_dyn_pos + n_static_pos
    static_pos = sorted({i % total for i in static_argnums if total and -total <= i < total})
    if len(static_pos) != n_static_pos:
        raise ValueError("static positions")
    dyn_iter, static_iter = iter(dynamic[:n_dyn_pos]), iter(statics[:n_static_pos])
    args = tuple(next(static_iter) if i in static_pos else next(dyn_iter) for i in range(total))
    kwargs = dict(zip(names, dynamic[n_dyn_pos:]))
    kwargs.update(zip(static_names, statics[n_static_pos:]))
    return args, kwargs
