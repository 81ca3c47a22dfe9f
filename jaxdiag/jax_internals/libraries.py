"""The jit frames of equinox and flax nnx, and nnx modules' static fields: calls named after the user's function."""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from typing import Any


@functools.cache
def equinox_jit_frame() -> types.CodeType | None:
    """The code of ``equinox._jit._call``, whose locals hold the user's function and arguments."""
    try:
        from equinox import _jit
    except Exception:
        return None
    code = getattr(getattr(_jit, "_call", None), "__code__", None)
    if code is not None and {"jit_wrapper", "args", "kwargs"} <= set(code.co_varnames):
        return code
    return None


@functools.cache
def flax_nnx_jit_frame() -> frozenset[types.CodeType] | None:
    """The codes of nnx.jit's ``__call__`` methods (flax 0.12 on, modules being pytrees)."""
    try:
        from flax import nnx
        from flax.nnx.transforms import compilation
    except Exception:
        return None
    if not hasattr(nnx, "Pytree"):
        return None
    found = set()
    for value in vars(compilation).values():
        code = getattr(vars(value).get("__call__") if isinstance(value, type) else None, "__code__", None)
        if (
            isinstance(value, type)
            and code is not None
            and code.co_filename == compilation.__file__
            and "args" in code.co_varnames
            and "jitted_fn" in code.co_names
        ):
            found.add(code)
    return frozenset(found) or None


@functools.cache
def flax_nnx_static_fields() -> str | None:
    """The attribute of an nnx module that says which attributes are pytree nodes."""
    try:
        from flax import nnx

        class _Probe(nnx.Module):
            def __init__(self) -> None:
                self.static = "x"

        flags = vars(_Probe()).get("_pytree__nodes")
        return "_pytree__nodes" if isinstance(flags, Mapping) and flags.get("static") is False else None
    except Exception:
        return None


def equinox_call(local: Mapping[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """``(fun, args, kwargs)`` from the locals of ``equinox._jit._call``."""
    return local["jit_wrapper"].__wrapped__, tuple(local["args"]), dict(local["kwargs"])


def flax_nnx_call(local: Mapping[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """``(fun, args, kwargs)`` from the locals of nnx.jit's ``__call__`` (``None``: not readable)."""
    wrapped: Any = local.get("self")
    if getattr(wrapped, "jitted_fn", None) is None or "args" not in local:
        return None
    if flax_nnx_jit_frame() is None:  # modules are pytrees from flax 0.12
        return None
    return wrapped.fun, tuple(local["args"]), dict(local["kwargs"])


def nnx_node_flags(state: Mapping[str, Any]) -> Mapping[str, bool] | None:
    """An nnx module's attribute -> is-a-pytree-node map, from its ``__dict__`` (``None``: not nnx)."""
    flags = state.get("_pytree__nodes")
    return flags if isinstance(flags, Mapping) else None
