"""A jitted call being compiled, read from JAX's frames: jit's and pmap's calls, AOT entry points, compile stages.

The probes of the capabilities that say which call a compile is for (``jit_call_frame``,
``pmap_call_frame``, ``aot_entry_points``, ``jit_info_fields``, the compile stages'
events and exceptions, the transformed compiles, config states and jit's trace cache
read through ``transforms``), the reads of those frames, and ``hide_frames`` (JAX's
traceback exclusion, which keeps jaxdiag's wrapper out of the user's tracebacks).
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Callable, Iterable
from typing import Any


@functools.cache
def stage_start_events() -> Callable[..., Any] | None:
    """``jax.monitoring.register_scalar_listener``: a compile stage's start (JAX 0.6.1 on)."""
    from jax import monitoring

    return getattr(monitoring, "register_scalar_listener", None)


@functools.cache
def jit_call_frame() -> types.CodeType | None:
    """The code of ``cache_miss``, jit's Python fallback: its frame holds the call being compiled."""
    try:
        from jax._src import pjit

        for const in pjit._cpp_pjit.__code__.co_consts:
            if (
                isinstance(const, types.CodeType)
                and const.co_name == "cache_miss"
                and {"fun", "jit_info"} <= set(const.co_freevars)
                and {"args", "kwargs"} <= set(const.co_varnames)
            ):
                return const
    except Exception:
        pass
    return None


@functools.cache
def aot_entry_points() -> frozenset[types.CodeType] | None:
    """Codes of the AOT entry points (``.trace``, ``.lower``, ``.compile``...): their compiles are no calls'."""
    import inspect

    try:
        from jax._src import pjit, stages
    except Exception:
        return None
    found: set[types.CodeType] = set()
    for owner, name in (
        (pjit, "jit_trace"),
        (pjit, "jit_lower"),
        (pjit, "jit_eval_shape"),
        (stages.Lowered, "compile"),
        (stages.Traced, "lower"),
    ):
        fn = inspect.unwrap(getattr(owner, name, None) or (lambda: None))
        if getattr(fn, "__code__", None) is not None:
            found.add(fn.__code__)
    return frozenset(found) or None


@functools.cache
def stage_exceptions() -> types.CodeType | None:
    """The ``__exit__`` that times each compile stage; its ``exc_type`` says whether the stage raised."""
    try:
        from jax._src import dispatch

        return dispatch.LogElapsedTimeContextManager.__exit__.__code__
    except Exception:
        return None


@functools.cache
def traceback_exclusion() -> tuple[Callable[[str], None], Callable[[str], None]] | None:
    """JAX's ``register_exclusion`` of filtered tracebacks and of source locations."""
    try:
        from jax._src import source_info_util, traceback_util

        return traceback_util.register_exclusion, source_info_util.register_exclusion
    except Exception:
        return None


#: Modules whose ``pmap`` jits a ``shard_map`` of the user's function (JAX 0.8: shard_map; 0.9 on: pmap).
_PMAP_MODULES = ("jax._src.pmap", "jax._src.shard_map")


@functools.cache
def pmap_call_frame() -> frozenset[types.CodeType] | None:
    """The codes of ``jax.pmap``'s ``wrapped``: its frame holds the user's function and arguments."""
    import inspect

    found = set()
    for name in _PMAP_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:
            continue
        fn = inspect.unwrap(getattr(module, "pmap", None) or (lambda: None))
        for code in _nested_codes(getattr(fn, "__code__", None)):
            if code.co_name == "wrapped" and "infer_params" in code.co_freevars:
                found.add(code)
    return frozenset(found) or None


@functools.cache
def jit_info_fields() -> tuple[str, ...] | None:
    """The ``PjitInfo`` fields read from a jit call's frame."""
    try:
        from jax._src import pjit
    except Exception:
        return None
    fields = set(getattr(getattr(pjit, "PjitInfo", None), "_fields", ()))
    wanted = ("static_argnums", "static_argnames", "in_shardings_leaves", "out_shardings_leaves")
    return wanted if set(wanted) <= fields else None


@functools.cache
def transformed_compiles() -> types.CodeType | None:
    """The code of ``call_impl_cache_miss``, where a transformed ``jit_p`` compiles, when the rules
    that say which transformation bound it are there too (``transforms.transform_rules``)."""
    from jaxdiag.jax_internals import transforms

    code = transforms.impl_cache_miss_code()
    return code if code is not None and transforms.transform_rules() is not None else None


@functools.cache
def config_states() -> tuple[str, ...] | None:
    """The names of the config states in jit's cache key (JAX 0.9 on names them)."""
    from jaxdiag.jax_internals import transforms

    state = transforms.config_state()
    return tuple(state) if state else None


@functools.cache
def jit_trace_cache() -> Callable[[], Any] | None:
    """``cache_keys`` of jit's trace cache."""
    from jaxdiag.jax_internals import transforms

    return transforms.jit_trace_cache()


def jit_call(frame: types.FrameType) -> tuple[Any, tuple[Any, ...], dict[str, Any], Any]:
    """``(fun, args, kwargs, jit_info)`` of a ``jit_call_frame`` frame."""
    local = frame.f_locals
    return local.get("fun"), tuple(local.get("args", ())), dict(local.get("kwargs", {})), local.get("jit_info")


def jit_info_of(frame: types.FrameType | None) -> Any:
    """The ``PjitInfo`` of a ``jit_call_frame`` frame (``None`` without one)."""
    return frame.f_locals.get("jit_info") if frame is not None else None


def jit_static(jit_info: Any) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """``(static_argnums, static_argnames)`` of a ``PjitInfo``."""
    return (tuple(getattr(jit_info, "static_argnums", ()) or ()), tuple(getattr(jit_info, "static_argnames", ()) or ()))


def jit_shardings(jit_info: Any) -> tuple[list[Any], list[Any]]:
    """The ``in_shardings`` and ``out_shardings`` leaves given to jit (``UnspecifiedValue`` where not)."""
    return (
        list(getattr(jit_info, "in_shardings_leaves", ()) or ()),
        list(getattr(jit_info, "out_shardings_leaves", ()) or ()),
    )


def stage_raised(frames: Iterable[types.FrameType]) -> bool:
    """Whether the compile stage whose duration is being reported ended in an exception.

    JAX reports a stage's duration from the ``__exit__`` of the ``with`` that times
    it, whether or not the stage raised; that frame's ``exc_type`` says which.
    """
    code = stage_exceptions()
    for frame in frames if code is not None else ():
        if frame.f_code is code:
            return frame.f_locals.get("exc_type") is not None
    return False


def pmap_call(frame: types.FrameType) -> tuple[Any, tuple[Any, ...], dict[str, Any], tuple[int, ...]] | None:
    """``(fun, args, kwargs, static_broadcasted_argnums)`` if ``frame`` is ``jax.pmap``'s dispatch.

    pmap jits a ``shard_map`` of its own wrapper of the user's function, so the
    ``cache_miss`` frame shows JAX's function and flat arguments; the user's are here.
    """
    if frame.f_code.co_name != "wrapped" or frame.f_globals.get("__name__") not in _PMAP_MODULES:
        return None
    try:
        local = frame.f_locals
        infer = local["infer_params"]
        cells = dict(zip(infer.__code__.co_freevars, (c.cell_contents for c in infer.__closure__)))
        fun = cells["wrapped_fun"].f if "wrapped_fun" in cells else cells["f"]
        return fun, tuple(local["args"]), dict(local["kwargs"]), tuple(cells["static_broadcasted_tuple"])
    except Exception:  # another JAX: the record keeps JAX's own view of the call
        return None


def hide_frames(filename: str) -> bool:
    """Leave ``filename``'s frames out of JAX's filtered tracebacks and source locations."""
    register = traceback_exclusion()
    if register is None:
        return False
    for fn in register:
        fn(filename)
    return True


def _nested_codes(code: types.CodeType | None) -> Iterable[types.CodeType]:
    for const in code.co_consts if code is not None else ():
        if isinstance(const, types.CodeType):
            yield const
            yield from _nested_codes(const)
