"""``jaxdiag.jit``: ``jax.jit`` that records every compile, at no cost on cache hits.

It returns the real ``jax.jit`` object, jitting a thin wrapper of the user's
function that runs only while JAX traces. Calls that hit JAX's caches never
enter Python, so they cost exactly what they cost under ``jax.jit``; compiles
are seen through ``jax.monitoring`` (see ``listener``), and each becomes a record
through the function's ``target.Target``.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, overload

import jax

from jaxdiag.errors import ConfigError
from jaxdiag.recording import budget, call_site, compile_log, listener
from jaxdiag.recording.target import Target

F = TypeVar("F", bound=Callable[..., Any])
_NOT_GIVEN: Any = object()
_ON_EXCEED = ("warn", "raise")


@overload
def jit(
    fun: F,
    /,
    *,
    max_compiles: int | None = None,
    on_exceed: str = "warn",
    analysis: bool | None = None,
    **jax_jit_kwargs: Any,
) -> F: ...
@overload
def jit(
    *, max_compiles: int | None = None, on_exceed: str = "warn", analysis: bool | None = None, **jax_jit_kwargs: Any
) -> Callable[[F], F]: ...
def jit(
    fun: Any = _NOT_GIVEN,
    /,
    *,
    max_compiles: int | None = None,
    on_exceed: str = "warn",
    analysis: bool | None = None,
    **jax_jit_kwargs: Any,
) -> Any:
    """Set up ``fun`` for just-in-time compilation, like ``jax.jit``, recording each compile.

    Takes every argument of ``jax.jit`` and returns what ``jax.jit`` returns, so
    results, errors, donation, ``.lower()`` and the cache-hit path are JAX's own.
    Each compile a call causes adds a ``CompileRecord`` to the compile log
    (``jaxdiag.compiles()``), explained against the function's earlier compiles:
    a retrace, or a lowering and compile without one (a sharding change). Not
    recorded: a call nested in another function's trace (it is part of that
    compile), and ahead-of-time ``.trace()``/``.lower()``/``.compile()``, which the
    user asked for. Used bare (``@jaxdiag.jit``) or with options only
    (``@jaxdiag.jit(static_argnums=1)``). JAX traces a thin wrapper of ``fun``,
    so traces are not shared with ``jax.jit(fun)`` or ``jax.eval_shape(fun, ...)``
    (mixing them traces ``fun`` once more), and a trace is one Python frame deeper.

    Args:
      fun: the function to compile.
      max_compiles: compiles allowed before ``on_exceed`` acts (``None``: no limit).
      on_exceed: ``"warn"`` (``CompileBudgetWarning`` after each compile past the limit)
        or ``"raise"`` (``CompileBudgetExceeded`` from the call, before compiling).
      analysis: add cost and memory figures to this function's records; ``None``
        follows ``jaxdiag.configure(analysis=...)``.
      **jax_jit_kwargs: passed to ``jax.jit`` unchanged.

    Raises:
      ConfigError: ``max_compiles`` or ``on_exceed`` is invalid.
      CompileLogError: ``JAXDIAG_LOG_DIR`` names a folder that cannot be written.
    """
    if max_compiles is not None:
        budget.check_max("max_compiles", max_compiles)
    if on_exceed not in _ON_EXCEED:
        raise ConfigError(f"on_exceed must be one of {_ON_EXCEED}, got {on_exceed!r}")
    if analysis is not None and not isinstance(analysis, bool):
        raise ConfigError(f"analysis must be True, False or None, got {analysis!r}")
    if fun is _NOT_GIVEN:
        return functools.partial(
            jit, max_compiles=max_compiles, on_exceed=on_exceed, analysis=analysis, **jax_jit_kwargs
        )
    if (
        isinstance(fun, staticmethod)
        or not callable(fun)
        or inspect.isgeneratorfunction(fun)
        or not _weakly_referenceable(fun)
    ):
        # JAX's own TypeError, now or (for no weak references) at the first call
        return jax.jit(fun, **jax_jit_kwargs)
    listener.install()
    compile_log.apply_env()
    traced = _traced_for(fun, max_compiles, on_exceed, analysis)
    holder = [fun]  # made before the jit object, as jax.jit's own references to fun are
    jitted = jax.jit(traced, **jax_jit_kwargs)
    try:
        jitted.__wrapped__ = fun  # what jax.jit(fun).__wrapped__ is
    except AttributeError:
        pass
    _lend(traced, jitted, holder)
    return jitted


def _weakly_referenceable(fun: Any) -> bool:
    try:
        weakref.ref(fun)
    except TypeError:
        return False
    return True


class _Traced:
    """The callable handed to ``jax.jit``: calls the user's function; runs only while JAX traces.

    It carries the user's name, docstring, signature and source (``__wrapped__``), so
    JAX names, documents and reports it exactly as it would the user's function. It
    is shared by every jit object of that function, as JAX caches per function, and
    never keeps the function alive on its own: while no jit object of it lives, it
    holds the function weakly and the shared cache holds it; while some do (each
    also holds the function, as ``__wrapped__``), it holds the function strongly,
    in ``_holder``, and the cache holds it weakly (``_lend``). So the garbage
    collector sees, as with ``jax.jit``, a path from the jit object to the function
    (``jax.checking_leaks`` walks it; the jit object's ``__dict__`` is a dead end
    there on Python 3.13), and a jit object in a cycle with its function is freed.
    """

    __slots__ = ("_ref", "_held", "_holder", "_lent_to", "__jaxdiag_hooks__", "__dict__", "__weakref__")

    def __init__(self, fun: Any, target: Target, on_death: Any = None) -> None:
        self._ref = weakref.ref(fun, on_death)
        self._held: Any = None  # the function itself, for a copy made by unpickling
        self._holder: list[Any] | None = None  # [function] while a jit object of it lives
        self._lent_to: dict[int, Any] = {}  # weak references to the live jit objects, by id
        self.__jaxdiag_hooks__ = target
        target.traced = weakref.ref(self)
        name = call_site.fun_name(fun)
        self.__dict__.update(getattr(fun, "__dict__", {}))
        self.__dict__.update(
            __name__=name,
            __qualname__=getattr(fun, "__qualname__", name),
            __module__=getattr(fun, "__module__", "<unknown module>"),
            __doc__=getattr(fun, "__doc__", None),
            __annotations__=getattr(fun, "__annotations__", {}),
        )
        if isinstance(fun, functools.partial):  # JAX reads a partial's signature, func's source
            try:
                self.__dict__["__signature__"] = inspect.signature(fun)
            except (TypeError, ValueError):
                pass

    @property
    def __wrapped__(self) -> Any:
        fun = self._ref()
        while isinstance(fun, functools.partial) and "__signature__" in self.__dict__:
            fun = fun.func
        return fun

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        fun = self._ref()
        pending = listener.trace_started(self.__jaxdiag_hooks__, args, kwargs)
        if pending is None:
            return fun(*args, **kwargs)
        try:
            return fun(*args, **kwargs)
        except BaseException:
            listener.trace_failed(pending)
            raise

    def __repr__(self) -> str:
        return repr(self._ref())  # JAX puts the function's repr in its error messages

    def __reduce__(self) -> Any:
        target = self.__jaxdiag_hooks__
        return _unpickled, (self._ref(), target.max_compiles, target.on_exceed, target.analysis)


def _unpickled(fun: Any, max_compiles: int | None, on_exceed: str, analysis: bool | None) -> _Traced:
    """The ``_Traced`` of an unpickled (or copied) ``jaxdiag.jit`` function.

    When ``fun`` already has a shared ``_Traced`` (a copy in the same process), that
    one is used. Otherwise ``fun`` was rebuilt by the unpickler (cloudpickle sends
    functions by value) and nothing else holds it: like ``jax.jit``'s unpickled
    object, this ``_Traced`` holds it strongly, outside the shared cache.
    """
    key = (id(fun), max_compiles, on_exceed, analysis)
    with _cache_lock:
        traced = _cached(key)
    if traced is not None and traced._ref() is fun:
        return traced
    traced = _Traced(fun, Target(fun, max_compiles, on_exceed, analysis))
    traced._held = fun
    return traced


_Key = tuple[int, int | None, str, bool | None]
_cache_lock = threading.RLock()  # reentrant: a weak reference's callback may run while it is held
_cache: dict[_Key, _Traced] = {}  # the shared _Traced no jit object holds
_lent: dict[_Key, weakref.ref[_Traced]] = {}  # those some jit object holds


def _cached(key: _Key) -> _Traced | None:
    traced = _cache.get(key)
    if traced is None and (ref := _lent.get(key)) is not None:
        traced = ref()
    return traced


def _forget(key: _Key, traced: Any) -> None:
    """Drop ``key``'s entries if they are ``traced``'s (an id may be reused once it is)."""
    if _cache_lock is None or _cache is None or _lent is None:  # interpreter exit cleared this module
        return
    with _cache_lock:
        if traced is not None and _cache.get(key) is traced:
            del _cache[key]
        ref = _lent.get(key)
        if ref is not None and ref() in (traced, None):
            del _lent[key]


def _lend(traced: _Traced, jitted: Any, holder: list[Any]) -> None:
    """Make ``traced`` hold its function strongly while ``jitted`` lives (see ``_Traced``).

    Only a shared ``_Traced`` (in ``_cache`` or ``_lent``) is lent; a jit object that
    takes no weak references leaves it as it was.
    """
    target = traced.__jaxdiag_hooks__
    fun = holder[0]
    key = (id(fun), target.max_compiles, target.on_exceed, target.analysis)
    with _cache_lock:
        if _cached(key) is not traced:
            return
        try:
            lent_to = weakref.ref(jitted, lambda ref, give_back=_give_back: give_back(key, traced, ref))
        except TypeError:
            return
        traced._lent_to[id(lent_to)] = lent_to  # by id: a jit object need not be hashable
        traced._holder = holder  # the newest, so it was made just before the newest jit object
        if _cache.get(key) is traced:
            del _cache[key]
            _lent[key] = weakref.ref(traced, lambda ref, forget=_forget: forget(key, ref))


def _give_back(key: _Key, traced: _Traced, lent_to: Any) -> None:
    """A jit object of ``traced`` died: when it was the last, the cache holds ``traced`` again."""
    if _cache_lock is None or _cache is None or _lent is None:  # interpreter exit cleared this module
        return
    with _cache_lock:
        traced._lent_to.pop(id(lent_to), None)
        if traced._lent_to:
            return
        fun = traced._ref()
        if fun is not None and (ref := _lent.get(key)) is not None and ref() is traced:
            del _lent[key]
            _cache[key] = traced
        traced._holder = None  # after re-caching: the function may die now, and _forget it


def _traced_for(fun: Any, max_compiles: int | None, on_exceed: str, analysis: bool | None) -> _Traced:
    """The ``_Traced`` for ``fun``, shared by every ``jaxdiag.jit`` of it with these options.

    JAX caches traces and executables per function object, so ``jax.jit(f)`` built
    anew in a loop compiles once; sharing the wrapper keeps that true here.
    """
    key = (id(fun), max_compiles, on_exceed, analysis)
    with _cache_lock:
        traced = _cached(key)
        if traced is not None and traced._ref() is fun:
            return traced
        target = Target(fun, max_compiles, on_exceed, analysis)
        traced = _Traced(fun, target)
        traced._ref = weakref.ref(
            fun, lambda _, key=key, traced=weakref.ref(traced), forget=_forget: forget(key, traced())
        )
        _cache[key] = traced
        return traced
