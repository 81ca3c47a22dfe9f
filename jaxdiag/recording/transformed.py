"""Compiles JAX makes for a jitted function without its own ``cache_miss``: transformed and ahead of time.

``jax.grad`` and ``jax.vmap`` of a jitted function bind ``jit_p`` with a transformed
jaxpr (the forward pass with residuals, its transpose, the batched program), which
compiles in ``call_impl_cache_miss``; ``.lower(...).compile()`` compiles in
``Lowered.compile``. ``listener`` finds those frames and hands them here, where each
becomes a ``Pending`` tied to the user's function: through the user's call still on
the stack, or (grad's backward pass, which compiles after that call returned) through
the source info JAX keeps in the jaxpr.
"""

from __future__ import annotations

import threading
import types
import weakref
from typing import Any

import jax

from jaxdiag import jax_internals
from jaxdiag.jax_internals import transforms as internals_reads
from jaxdiag.recording import listener
from jaxdiag.recording.in_flight import Pending

_MAX_SOURCES = 1024
# ``jit_info.fun_sourceinfo`` -> (the jitted callable, its jit_info), for the backward
# pass of a grad, which compiles after the user's call returned.
_by_source: dict[str, Any] = {}


def impl_pending(frame: types.FrameType, start_unix: float) -> Pending | None:
    """A compile of a transformed ``jit_p`` (grad's forward and backward, vmap's batched).

    Its arguments are what the compiled program receives: the user's argument tree
    with the transformed call's flat arrays for leaves when the counts agree (vmap,
    grad's forward), the flat arrays otherwise (grad's backward: residuals and
    cotangents). The user's call, when still on the stack, names the function and
    holds the trace that led here; otherwise the function is found by the source
    info JAX keeps in the jaxpr.
    """
    call = internals_reads.impl_call(frame)
    if call is None:
        return None
    flat, source, transform = call
    outer = outer_call_frame(frame)
    local = outer.f_locals if outer is not None else {}
    if outer is not None:
        fun, info = local.get("fun"), local.get("jit_info")
    else:
        ref, info = _by_source.get(source or "", (lambda: None, None))
        fun = ref()
    hooks = listener.hooks_of(fun)
    if hooks is None:
        return None
    args: tuple[Any, ...] = tuple(flat)
    kwargs: dict[str, Any] = {}
    static: tuple[tuple[int, ...], tuple[str, ...]] = ((), ())
    user_args = False  # the flat inputs, until they fill the user's call
    if outer is not None:
        remember_source(info, fun)
        tree = _with_leaves(
            tuple(local.get("args", ())), dict(local.get("kwargs", {})), jax_internals.jit_static(info), flat
        )
        if tree is not None:
            args, kwargs = tree
            static = jax_internals.jit_static(info)
            user_args = True
    p = Pending(
        hooks,
        args,
        kwargs,
        static,
        start_unix,
        threading.current_thread().name,
        frame=frame,
        fun=fun,
        transform=transform,
        user_frame=outer,
        jit_info=info,
        user_args=user_args,
    )
    if transform == "vmap":
        dims = internals_reads.batch_dims(frame)
        if dims is not None and len(dims) == len(flat):
            p.batch_axes = {id(a): d for a, d in zip(flat, dims) if d is not None}
    # The user's call (when still running) traced, then handed its compile to this one.
    return listener.begin_compile(p, replacing=outer)


def aot_pending(frame: types.FrameType, start_unix: float) -> Pending | None:
    """An ahead-of-time ``.lower(...).compile()`` while ``watch`` records: named, not tied to a function."""
    call = internals_reads.aot_arguments(frame)
    if call is None:
        return None
    try:
        name = str(frame.f_locals["self"]._lowering._name)
    except Exception:
        name = "<lowered>"
    hooks = listener.aot_hooks(name)
    if hooks is None:
        return None
    p = Pending(
        hooks, call[0], call[1], ((), ()), start_unix, threading.current_thread().name, frame=frame, transform="aot"
    )
    return listener.begin_compile(p)


def _with_leaves(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    static: tuple[tuple[int, ...], tuple[str, ...]],
    flat: tuple[Any, ...],
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The call's arguments with their dynamic leaves replaced by ``flat`` (jit's flattening order)."""
    nums, names = static
    static_pos = {i % len(args) for i in nums if -len(args) <= i < len(args)}
    dyn = (
        tuple(a for i, a in enumerate(args) if i not in static_pos),
        {k: v for k, v in kwargs.items() if k not in names},
    )
    try:
        leaves, tree = jax.tree_util.tree_flatten(dyn)
        if len(leaves) != len(flat):
            return None
        dyn_args, dyn_kwargs = jax.tree_util.tree_unflatten(tree, flat)
    except Exception:
        return None
    it = iter(dyn_args)
    new_args = tuple(a if i in static_pos else next(it) for i, a in enumerate(args))
    return new_args, {k: (v if k in names else dyn_kwargs[k]) for k, v in kwargs.items()}


def remember_source(info: Any, fun: Any) -> None:
    source = internals_reads.fun_sourceinfo(info)
    if source is None or fun is None:
        return
    try:
        ref = weakref.ref(fun)
    except TypeError:
        return
    if len(_by_source) >= _MAX_SOURCES:
        del _by_source[next(iter(_by_source))]
    _by_source[source] = (ref, info)


def outer_call_frame(frame: types.FrameType) -> types.FrameType | None:
    """The user's ``cache_miss`` frame outward from ``frame``, if the call is still running."""
    outer = frame.f_back
    while outer is not None:
        if listener.is_jit_call(outer.f_code):
            return outer
        outer = outer.f_back
    return None
