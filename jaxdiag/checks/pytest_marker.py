"""pytest plugin: ``@pytest.mark.jaxdiag(max_compiles=N)`` fails a test whose jitted code compiles too often.

While a marked test runs, every compile of a jitted function is recorded in the
compile log: ``jaxdiag.jit`` functions as always, and plain ``jax.jit`` ones too
(JAX's own internal jitted helpers, such as those behind eager ``jnp`` calls, are
left out: the test did not write them). The count is bounded with
``jaxdiag.recording.budget.expect_compiles``, so the failure message names each
function, how often it compiled and why (``args[0] shape axis 0: 8 -> 9``).

Marker arguments: ``max_compiles`` (also the first positional argument; default
0), ``function`` (count only this function: name, qualname or the function), and
``watch`` (``False`` counts ``jaxdiag.jit`` functions only).

pytest loads this module in every project that has jaxdiag installed, so it
imports nothing but pytest until a marked test runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

MARKER = "jaxdiag"
_ARGUMENTS = ("max_compiles", "function", "watch")
#: Modules whose jitted functions are JAX's own, not the code under test.
_LIBRARY_PREFIXES = ("jax.", "jaxlib.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(max_compiles=0, function=None, watch=True): fail the test if its jitted "
        "functions (jax.jit and jaxdiag.jit) compile more than max_compiles times; the "
        "message names each function and why it compiled",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    __tracebackhide__ = True
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return (yield)
    max_compiles, function, watch = marker_arguments(marker.args, marker.kwargs)
    from jaxdiag.errors import CompileBudgetExceeded
    from jaxdiag.recording.budget import expect_compiles

    test_returned = False
    try:
        with _watching(watch), expect_compiles(max=max_compiles, function=function):
            result = yield
            test_returned = True
    except CompileBudgetExceeded as exc:
        if not test_returned:  # the test's own guard failed: report it as it is
            raise
        raise CompileBudgetExceeded(f"@pytest.mark.{MARKER}(max_compiles={max_compiles}): {exc}") from None
    return result


def marker_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, Any, bool]:
    """``(max_compiles, function, watch)`` from the marker; ``ConfigError`` on anything else."""
    from jaxdiag.errors import ConfigError
    from jaxdiag.recording.budget import check_max

    unknown = sorted(set(kwargs) - set(_ARGUMENTS))
    if unknown or len(args) > 1 or (args and "max_compiles" in kwargs):
        raise ConfigError(
            f"@pytest.mark.{MARKER} takes max_compiles (or one positional count), function and watch; "
            f"got args={args!r} kwargs={sorted(kwargs)!r}"
        )
    max_compiles = args[0] if args else kwargs.get("max_compiles", 0)
    check_max(f"@pytest.mark.{MARKER}(max_compiles=...)", max_compiles)
    watch = kwargs.get("watch", True)
    if not isinstance(watch, bool):
        raise ConfigError(f"@pytest.mark.{MARKER}(watch=...) must be True or False, got {watch!r}")
    return max_compiles, kwargs.get("function"), watch


class _watching:
    """Record compiles of plain ``jax.jit`` functions while open, as ``origin="watch"`` records."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._previous: Any = None

    def __enter__(self) -> "_watching":
        if self.enabled:
            from jaxdiag.recording import compile_log, listener

            listener.install()
            compile_log.apply_env()
            self._previous = listener.get_watch()
            listener.set_watch(_hooks_for_user_code)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            from jaxdiag.recording import listener

            listener.set_watch(self._previous)


def _hooks_for_user_code(fun: Any) -> Any:
    """Compile hooks for ``fun``, or ``None`` for JAX's own jitted helpers."""
    import inspect

    from jaxdiag.recording.target import Target

    try:
        module = getattr(inspect.unwrap(fun), "__module__", None) or ""
    except ValueError:  # a cycle of __wrapped__
        module = ""
    if module == "jax" or module.startswith(_LIBRARY_PREFIXES):
        return None
    target = Target(fun, None, "warn", None)
    target.origin = "watch"
    return target
