"""Steps of a loop that marks none: the calls of its dominant jitted function.

When no step has begun by the time the first of the program's own functions
compiles, the monitor looks for the jitted object (``jax.jit``, ``nnx.jit``,
``eqx.filter_jit``: anything whose ``__wrapped__`` leads to the function) in the
module globals of the program's frame that called it (``train_step = jax.jit(step)`` at the top of a script: the loop reads
the global on every call) and puts a timing wrapper in its place; each call is
then a step. While the program warms up, a function whose first compile costs
more takes the place (the train step is the largest program a loop compiles
early). A jitted function held in a local variable cannot be replaced from the
outside: the monitor says so once and the stream has no steps until the loop
marks them (``mon.step()``, ``cap.step()`` or ``@jaxdiag.step``).

Only the wrapped function's calls pay for it (a Python call around the jitted
one); other jitted functions, and their cache hits, run as before.
"""

from __future__ import annotations

import functools
import sys
import types
import warnings
from typing import Any

from jaxdiag.monitoring.frames import is_library

_UNWRAP = 4  # ``__wrapped__`` links followed from a module global to the user's function
_warned: list[str] = []


class TimedCall:
    """Calls the jitted function between the monitor's step marks; anything else goes to it."""

    def __init__(self, jitted: Any, monitor: Any, name: str) -> None:
        self.__wrapped__ = jitted
        self._monitor = monitor
        self._name = name
        functools.update_wrapper(self, jitted, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        monitor = self._monitor
        monitor.step_begin(None, self, call=self._name)
        try:
            return self.__wrapped__(*args, **kwargs)
        finally:
            monitor.step_end(None, self)

    def __getattr__(self, name: str) -> Any:  # .lower, .trace, .clear_cache, ...
        return getattr(self.__dict__["__wrapped__"], name)


class CallSteps:
    """The wrapper put in place of one module global, and how to take it back."""

    def __init__(
        self, namespace: dict[str, Any], name: str, original: Any, wrapper: TimedCall, compile_s: float
    ) -> None:
        self.namespace, self.name, self.original, self.wrapper = namespace, name, original, wrapper
        self.compile_s = compile_s
        self.function = wrapper._name

    @classmethod
    def find(cls, monitor: Any, record: Any) -> "CallSteps | None":
        """Wrap the jitted object of ``record``'s function where the caller's module names it."""
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None and is_library(frame.f_code.co_filename):  # jax, jaxdiag, flax, equinox...
            frame = frame.f_back
        if frame is None:
            return None
        namespace = frame.f_globals
        for name, value in list(namespace.items()):
            if _jits(value, record):
                wrapper = TimedCall(value, monitor, record.function)
                namespace[name] = wrapper
                return cls(namespace, name, value, wrapper, record.compile_s)
        if record.function not in _warned:
            _warned.append(record.function)
            try:
                warnings.warn(
                    f"jaxdiag.monitor: `{record.function}` compiled first, but no module global of the code that "
                    "called it names its jitted object, so its calls cannot be timed as steps; mark the steps with mon.step(), cap.step() "
                    "or @jaxdiag.step",
                    RuntimeWarning,
                    stacklevel=2,
                )
            except Exception:  # noqa: BLE001
                pass
        return None

    def wants(self, record: Any) -> bool:
        """Whether ``record`` (a first compile) is of a costlier function, early in the run."""
        monitor = self.wrapper._monitor
        early = monitor.last_step is None or monitor.last_step < monitor.warmup_steps
        return (
            early
            and record.compile_index == 1
            and record.origin != "jax-internal"
            and record.function != self.function
            and record.compile_s > self.compile_s
        )

    def restore(self) -> None:
        if self.namespace.get(self.name) is self.wrapper:
            self.namespace[self.name] = self.original


def _jits(value: Any, record: Any) -> bool:
    """Whether ``value`` wraps (``jax.jit``, ``nnx.jit``, ``eqx.filter_jit``...) the function ``record`` is of."""
    if isinstance(value, TimedCall) or isinstance(value, type) or not callable(value):
        return False
    fun = value
    for _ in range(_UNWRAP):
        try:
            fun = getattr(fun, "__wrapped__", None)
        except Exception:  # noqa: BLE001 - a proxy that raises on attribute access
            return False
        if fun is None:
            return False
        qualname = f"{getattr(fun, '__module__', '')}.{getattr(fun, '__qualname__', '')}"
        if qualname == record.qualname or (
            getattr(fun, "__name__", None) == record.function and _same_source(fun, record)
        ):
            return True
    return False


def _same_source(fun: Any, record: Any) -> bool:
    code = getattr(fun, "__code__", None)
    return code is not None and record.source == f"{code.co_filename}:{code.co_firstlineno}"
