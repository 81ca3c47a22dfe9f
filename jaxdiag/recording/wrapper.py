"""``jaxdiag.jit``: ``jax.jit`` that records every compile, at no cost on cache hits.

It returns the real ``jax.jit`` object, jitting a thin wrapper of the user's
function that runs only while JAX traces. Calls that hit JAX's caches never
enter Python, so they cost exactly what they cost under ``jax.jit``; compiles
are seen through ``jax.monitoring`` (see ``listener``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, overload

import jax

from jaxdiag.config import DEFAULT_THRESHOLDS
from jaxdiag.errors import ConfigError, warn_once
from jaxdiag.recording import budget, compile_log, listener, signature
from jaxdiag.recording.records import (
    JAX_INTERNAL_ORIGIN,
    CompileRecord,
    Explanation,
    history_key,
    history_variant,
)
from jaxdiag.sharding.names import with_user_names

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


class _Target:
    """One ``jaxdiag.jit`` function as the listener sees it (a ``listener.CompileHooks``)."""

    __slots__ = (
        "name",
        "qualname",
        "source",
        "function_id",
        "max_compiles",
        "on_exceed",
        "analysis",
        "origin",
        "_traced",
        "__weakref__",
    )

    def __init__(
        self,
        fun: Any,
        max_compiles: int | None = None,
        on_exceed: str = "warn",
        analysis: bool | None = None,
        origin: str = "jit",
    ) -> None:
        self.name = signature.fun_name(fun)
        self.qualname = signature.qualname(fun)
        self.source = signature.source(fun)
        self.function_id = compile_log.function_id(fun)
        self.max_compiles, self.on_exceed, self.analysis = max_compiles, on_exceed, analysis
        self.origin = origin
        self._traced: Any = None

    @property
    def key(self) -> tuple[str, str | None]:
        return self.qualname, self.source

    def history_key(self, pending: listener.Pending) -> tuple[str, str | None, str]:
        """A jit object's compiles: this function with these jit options (see ``history_key``)."""
        site = pending.context[2][0] if self.origin == JAX_INTERNAL_ORIGIN else None
        return self.qualname, self.source, history_variant(pending.jit_options, pending.transform, site)

    def owns(self, fun: Any) -> bool:
        """Whether ``fun`` is this target's ``_Traced`` (for ``origin="watch"``, any ``fun``
        the watch factory matched)."""
        return self._traced is None or self._traced() is fun

    def wants_executable(self) -> bool:
        return self.analysis if self.analysis is not None else compile_log.analysis_enabled()

    def begin(self, pending: listener.Pending) -> None:
        max_repr = DEFAULT_THRESHOLDS.max_static_repr
        if pending.static is None:
            args, tree = signature.traced_signature(pending.args, pending.kwargs, max_repr)
        else:
            args, tree = signature.signature_of(
                pending.args, pending.kwargs, *pending.static, max_static_repr=max_repr, batch_axes=pending.batch_axes
            )
        if pending.user_args:
            args = signature.with_labels(args, self._fun())
        pending.context = (args, tree, signature.call_site_and_function())
        if self.max_compiles is not None and self.on_exceed == "raise":
            index, history = compile_log.LOG.peek(self.history_key(pending))
            budget.enforce(self._record(pending, index, history), self.max_compiles, self.on_exceed, starting=True)

    def _fun(self) -> Any:
        traced = self._traced() if self._traced is not None else None
        return None if traced is None else traced._ref()

    def end(self, pending: listener.Pending) -> None:
        index, history = compile_log.LOG.reserve(self.history_key(pending))
        record = self._record(pending, index, history)
        if pending.executable is not None:
            try:
                cost, memory = listener.analyze_executable(pending.executable)
                record = dataclasses.replace(record, cost=cost, memory=memory)
            except Exception as exc:
                warn_once("analysis", f"jaxdiag: no cost/memory analysis ({exc})")
        elif self.wants_executable():
            warn_once(
                "analysis",
                "jaxdiag: cost/memory analysis needs JAX internals this JAX lacks; records carry no cost or memory",
            )
        compile_log.LOG.append(record)
        budget.enforce(record, self.max_compiles, self.on_exceed, starting=False)

    def _record(self, p: listener.Pending, index: int, history: list[CompileRecord]) -> CompileRecord:
        args, tree, (site, site_function) = p.context
        record = CompileRecord(
            function=self.name,
            qualname=self.qualname,
            source=self.source,
            call_site=site,
            compile_index=index,
            traced=p.trace_s is not None or p.static is None,
            args=args,
            in_tree=tree,
            function_id=self.function_id,
            origin=self.origin,
            sharding=with_user_names(p.sharding, args),
            call_function=site_function,
            transform=p.transform,
            jit_options=p.jit_options,
            jit_leaves=p.jit_leaves,
            config=p.config,
            **p.stage_fields(),
        )
        if index == 1 and p.transform is None and self.origin != "jit":
            record = dataclasses.replace(record, earlier_unseen=_earlier_unseen(p, record))
            if record.earlier_unseen and p.earlier:
                return dataclasses.replace(record, explanation=_explain_unseen(p.earlier, record))
        if index > 1 or p.jit_options is not None:
            record = dataclasses.replace(record, explanation=_explain(history, record))
        return record


def _explain_unseen(earlier: list[tuple[Any, str]], record: CompileRecord) -> Explanation | None:
    """A late watch's first compile, diffed against the calls JAX traced before recording."""
    try:
        from jaxdiag.recording.explain import explain
    except ImportError:
        return None
    stand_ins = [
        dataclasses.replace(
            record, args=args, in_tree=tree, compile_index=0, explanation=None, call_site=None, config=None
        )
        for args, tree in earlier
        if (args, tree) != (_types_only(record.args), record.in_tree)
    ]  # not this trace
    if not stand_ins:
        return None
    try:
        found = explain(stand_ins, record)
    except Exception:
        return None
    if found is None or not found.changes:
        return None
    return dataclasses.replace(
        found,
        compared_to=None,
        summary=f"first compile seen (JAX already held {record.earlier_unseen} trace(s) of this function "
        f"from before recording started); against the closest of them: "
        f"{found.summary.split(': ', 1)[-1]}",
    )


def _types_only(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Signatures without placement: what a trace cache key holds of them."""
    return tuple(dataclasses.replace(a, sharding=None, memory_kind=None, placement=None) for a in args)


def _earlier_unseen(p: listener.Pending, record: CompileRecord) -> int | None:
    """For a first compile seen by a late ``watch``: how many traces JAX already held, if any."""
    if any(r.qualname == record.qualname and r.source == record.source for r in compile_log.LOG.records()):
        return None  # the same function with other jit options: seen, a sibling history
    from jaxdiag.jax_internals import transforms as internals_reads

    held = internals_reads.earlier_traces(p.fun)
    if held is not None and p.trace_s is not None:
        held -= 1  # the trace this compile made
    if p.trace_s is None and p.static is not None:
        held = max(held or 0, 1)  # lowered from a trace made before recording started
    return held


def _explain(history: list[CompileRecord], record: CompileRecord) -> Explanation | None:
    try:
        from jaxdiag.recording.explain import explain
    except ImportError:
        return None
    try:
        if record.compile_index == 1:  # a new history: say what sets it apart from the others
            if record.origin == JAX_INTERNAL_ORIGIN:
                return None  # the first call from this line
            key = history_key(record)
            others = [
                r
                for r in compile_log.LOG.records()
                if (r.qualname, r.source) == (record.qualname, record.source) and history_key(r) != key
            ]
            siblings = [r for r in others if (r.jit_options or "") != (record.jit_options or "")]
            if siblings:  # a new jit object: compared as if of this transformation, options differ
                return explain([dataclasses.replace(r, transform=record.transform) for r in siblings], record)
            return explain(others, record) if others else None  # a transformation's first
        return explain(history, record)
    except Exception as exc:
        warn_once("explain", f"jaxdiag could not explain a recompile: {type(exc).__name__}: {exc}")
        return None


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

    def __init__(self, fun: Any, target: _Target, on_death: Any = None) -> None:
        self._ref = weakref.ref(fun, on_death)
        self._held: Any = None  # the function itself, for a copy made by unpickling
        self._holder: list[Any] | None = None  # [function] while a jit object of it lives
        self._lent_to: dict[int, Any] = {}  # weak references to the live jit objects, by id
        self.__jaxdiag_hooks__ = target
        target._traced = weakref.ref(self)
        name = signature.fun_name(fun)
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
    traced = _Traced(fun, _Target(fun, max_compiles, on_exceed, analysis))
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
        target = _Target(fun, max_compiles, on_exceed, analysis)
        traced = _Traced(fun, target)
        traced._ref = weakref.ref(
            fun, lambda _, key=key, traced=weakref.ref(traced), forget=_forget: forget(key, traced())
        )
        _cache[key] = traced
        return traced
