"""Where a function comes from and where it is called: its names, its source line, the user's call site.

The one call-site rule of ``jaxdiag.jit`` and ``watch`` (``site_from``): the first frame
outward that is not a wrapper's (jax, jaxlib, jaxdiag, functools and the libraries in
``WRAPPER_PACKAGES``).
"""

from __future__ import annotations

import functools
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import jax

#: Packages whose frames are wrappers, never the user's call site.
WRAPPER_PACKAGES = frozenset(
    {
        "jax",
        "jaxlib",
        "jaxdiag",
        "functools",
        "contextlib",
        "equinox",
        "flax",
        "optax",
        "chex",
        "jaxtyping",
        "typeguard",
        "beartype",
    }
)
#: Folders whose frames are never the user's call site, whatever their module is called
#: (``python -m jaxdiag`` runs ``jaxdiag/__main__.py`` as ``__main__``).
_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (
        jax.__file__,
        sys.modules["jaxlib"].__file__ if "jaxlib" in sys.modules else jax.__file__,
        os.path.dirname(__file__),  # jaxdiag/recording -> jaxdiag
    )
    if path is not None  # a module's __file__ may be None; these modules have one
)
_FUNCTOOLS_FILE = os.path.abspath(functools.__file__)


def fun_name(fun: Callable[..., Any]) -> str:
    """The name ``jax.jit`` gives ``fun`` (partials report their function's name)."""
    name = getattr(fun, "__name__", None)
    if isinstance(name, str):
        return name
    if isinstance(fun, functools.partial):
        return fun_name(fun.func)
    return "<unnamed function>"


def qualname(fun: Callable[..., Any]) -> str:
    """``module.qualname`` of ``fun``, looking through partials."""
    inner = _innermost(fun)
    module = getattr(inner, "__module__", None) or "<unknown module>"
    name = getattr(inner, "__qualname__", None) or getattr(type(inner), "__qualname__", None)
    return f"{module}.{name or fun_name(fun)}"


def source(fun: Callable[..., Any]) -> str | None:
    """``file:line`` where ``fun`` (or the function inside a partial or wrapper) is defined."""
    inner = _innermost(fun)
    code = getattr(inner, "__code__", None)
    if code is None:  # a callable instance: point at its __call__
        code = getattr(getattr(type(inner), "__call__", None), "__code__", None)
    if code is None:
        return None
    return f"{code.co_filename}:{code.co_firstlineno}"


def _innermost(fun: Any) -> Any:
    for _ in range(100):  # wrapper chains can loop; give up rather than hang
        if isinstance(fun, functools.partial):
            fun = fun.func
        elif getattr(fun, "__wrapped__", None) is not None:
            fun = fun.__wrapped__
        else:
            break
    return getattr(fun, "__func__", fun)  # bound methods


def call_site(skip: int = 1) -> str | None:
    """``file:line`` of the first frame, ``skip`` frames up and outward, that is the user's."""
    return site_from(sys._getframe(skip + 1))[0]


def call_site_and_function(skip: int = 1) -> tuple[str | None, str | None]:
    """``call_site``, and the name of the function that line is in."""
    return site_from(sys._getframe(skip + 1))


def site_from(frame: types.FrameType | None, *, column: bool = False) -> tuple[str | None, str | None]:
    """``file:line`` of the first frame, from ``frame`` outward, that is the user's, and its function.

    The one call-site rule of ``jaxdiag.jit`` and ``watch``: frames of
    ``WRAPPER_PACKAGES`` (by module name), of jax, jaxlib and jaxdiag's folders and of
    frozen modules are wrappers. ``(None, None)`` when no frame is the user's.
    ``column`` gives ``file:line:column`` of the call being made, where Python knows it:
    two eager ops on one line (``jnp.asarray(x), jnp.asarray(y)``) are two call sites.
    """
    while frame is not None:
        code = frame.f_code
        module = frame.f_globals.get("__name__") or ""
        if not (
            module.partition(".")[0] in WRAPPER_PACKAGES
            or code.co_filename.startswith(_LIBRARY_DIRS)
            or code.co_filename == _FUNCTOOLS_FILE
            or code.co_filename.startswith("<frozen")
        ):
            site = f"{code.co_filename}:{frame.f_lineno}"
            col = _call_column(frame) if column else None
            return (site if col is None else f"{site}:{col}"), code.co_name
        frame = frame.f_back
    return None, None


def _call_column(frame: types.FrameType) -> int | None:
    """The 1-based column of the expression ``frame`` is executing, or ``None``."""
    try:
        positions = list(frame.f_code.co_positions())  # type: ignore[attr-defined]  # Python 3.11+
        column = positions[frame.f_lasti // 2][2]
    except (AttributeError, IndexError, TypeError):
        return None
    return None if column is None else column + 1
