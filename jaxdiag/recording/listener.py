"""Turn ``jax.monitoring`` compile events into one ``Pending`` compile per jitted call.

JAX reports each stage of a compile as an event: tracing (``fun_name='f'``),
lowering to MLIR and backend compilation (``fun_name='jit(f)'``), each with a
start (a scalar event) and a duration, plus persistent-cache hits. Events carry
a name, not a function, so this module ties them to the function the call was
for by reading the stack: the nearest frame of ``cache_miss`` in
``jax/_src/pjit.py`` (the Python fallback of jit's C++ fast path) holds the
call's concrete ``args``/``kwargs``, the ``fun`` handed to ``jax.jit`` and its
``jit_info``. A sharding-only change, which lowers and compiles again without
tracing, is caught the same way.

Compiles of a transformed call (grad's forward and backward, vmap) and ahead-of-time
compiles under ``watch`` come through other frames, which ``transformed`` turns into
compiles of the user's function through this module's public functions (``hooks_of``,
``aot_hooks``, ``begin_compile``, ``is_jit_call``). ``Pending`` and the hooks' protocol
are ``in_flight``'s.

The private JAX internals it reads are found by ``jaxdiag.jax_internals`` (and, for
transformed calls, jit options and config states, by the small functions of
``jax_internals.transforms``). Without them (another JAX version), it falls back to matching
events by function name, recording only compiles that trace, and says so once;
``jaxdiag.watch()`` then records names, counts and durations only. Both paths live here, beside the internals
they use, which is why this module runs past 400 lines. Cache hits never reach
it: JAX's C++ fast path dispatches without emitting events.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

from jax import monitoring

from jaxdiag import jax_internals
from jaxdiag.errors import CompileBudgetExceeded, CompileBudgetWarning, HostDivergenceError, warn_once
from jaxdiag.jax_internals import transforms as internals_reads
from jaxdiag.recording import signature, transformed
from jaxdiag.recording.in_flight import CompileHooks, Pending
from jaxdiag.recording.record_diff import CONFIG_DEFAULTS
from jaxdiag.sharding.collect import collect as collect_sharding

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
_MAX_NAMED_PENDING = 32
_STAGE_FIELD = {TRACE_EVENT: "trace_s", LOWER_EVENT: "lower_s", COMPILE_EVENT: "backend_compile_s"}


@dataclasses.dataclass(frozen=True, slots=True)
class _Internals:
    cache_miss: types.CodeType | None  # None: fall back to matching by name
    stoppers: frozenset[types.CodeType]  # AOT entry points: .trace/.lower/.compile
    cached_compilation: tuple[str, str] | None  # (name, file) of the frame holding the executable
    timed_exit: types.CodeType | None = None  # the __exit__ that times each stage, sees its exception
    impl_miss: types.CodeType | None = None  # a transformed jit_p compiling (grad, vmap)
    aot_compile: types.CodeType | None = None  # Lowered.compile: recorded only under watch


@dataclasses.dataclass(eq=False, slots=True)
class _OpenTrace:  # name-matching fallback: a trace that started on this thread
    name: str
    start_unix: float
    pending: Pending | None = None


_install_lock = threading.Lock()
_internals: _Internals | None = None
_has_start_events = False
_watch: Any = None  # callable(fun) -> CompileHooks | None, for process-wide recording
_tls = threading.local()


def install() -> None:
    """Register the listeners once per process (idempotent, thread-safe)."""
    global _internals, _has_start_events
    if _internals is not None:
        return
    with _install_lock:
        if _internals is not None:
            return
        found = _find_internals()
        CONFIG_DEFAULTS.update(internals_reads.config_state() or {})
        monitoring.register_event_listener(_on_event)
        monitoring.register_event_duration_secs_listener(_on_duration)
        register_start = getattr(monitoring, "register_scalar_listener", None)
        if register_start is not None:
            register_start(_on_start)
        _has_start_events = register_start is not None
        _hide_wrapper_frames()
        _internals = found
        for lost, capability in (
            (found.cache_miss is None, "jit_call_frame"),
            (not _has_start_events, "stage_start_events"),
            (found.cached_compilation is None, "compiled_executable"),
            (found.timed_exit is None, "stage_exceptions"),
            (jax_internals.pmap_call_frame() is None, "pmap_call_frame"),
            (found.cache_miss is not None and jax_internals.transformed_compiles() is None, "transformed_compiles"),
        ):
            if lost:
                jax_internals.warn_lost(capability)


def mode() -> str:
    """``"frames"`` (full), ``"names"`` (fallback) or ``"off"`` (not installed)."""
    if _internals is None:
        return "off"
    return "frames" if _internals.cache_miss is not None else "names"


def set_watch(factory: Any) -> None:
    """Record compiles of functions that are not ``jaxdiag.jit``'s: ``factory(fun)`` gives hooks.

    Without the pjit internals there is no function, only the name an event carries:
    then ``factory.by_name(name)``, if the factory has it, gives the hooks.
    """
    global _watch
    _watch = factory


def get_watch() -> Any:
    """The factory given to ``set_watch`` (``None`` when nothing but ``jaxdiag.jit`` is recorded)."""
    return _watch


def trace_started(hooks: CompileHooks, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Pending | None:
    """Called by the trace-time wrapper; returns the compile this trace belongs to, if any.

    A trace nested in another function's trace fires no events and belongs to that
    function's compile, so it gets ``None``.
    """
    if _internals is None or getattr(_tls, "busy", False):
        return None
    pending = _pendings()
    if _internals.cache_miss is not None:
        last = pending[-1] if pending else None
        if last is not None and last.hooks is hooks and last.trace_s is None:
            return last
        return None
    opens: list[_OpenTrace] = getattr(_tls, "opens", [])
    if not opens or opens[-1].name != hooks.name or opens[-1].pending is not None:
        return None
    p = Pending(hooks, args, dict(kwargs), None, opens[-1].start_unix, threading.current_thread().name)
    pending[:] = [q for q in pending if q.hooks is not hooks]  # a stale one never compiled
    pending.append(p)
    opens[-1].pending = p
    _call(hooks.begin, p, on_error=lambda: pending.remove(p))
    return p


def trace_failed(p: Pending) -> None:
    """The user's function raised while being traced: forget its compile."""
    pending = _pendings()
    if p in pending:
        pending.remove(p)


# --- for the compiles ``transformed`` ties to a function ----------------------------


def hooks_of(fun: Any) -> CompileHooks | None:
    """The hooks recording ``fun`` (the callable given to ``jax.jit``): its own, else watch's; ``None`` if none."""
    try:
        hooks = getattr(fun, "__jaxdiag_hooks__", None)
    except Exception:
        hooks = None
    if hooks is not None and hooks.owns(fun):
        return hooks
    return None if _watch is None or fun is None else _watch(fun)


def aot_hooks(name: str) -> CompileHooks | None:
    """Watch's hooks for an ahead-of-time compile named ``name`` (``jit(f)`` read as ``f``); ``None`` outside watch."""
    aot = getattr(_watch, "aot", None)
    return None if aot is None else aot(_strip_jit(name))


def begin_compile(p: Pending, replacing: types.FrameType | None = None) -> Pending:
    """Start recording ``p`` on this thread, and return it.

    The jit options and config states of its cache key are read into it, it joins this
    thread's compiles in flight (those whose frames have returned are dropped), and its
    hooks' ``begin`` runs; if that raises, ``p`` leaves the compiles in flight again.
    ``replacing`` is the user's call whose compile ``p`` takes over (the call traced,
    then a transformed program compiled): its trace time and start carry over to ``p``.
    """
    pending = _pendings()
    _drop_dead(pending)
    _add_context(p)
    if replacing is not None:
        for q in list(pending):
            if q.frame is replacing:
                p.trace_s, p.start_unix = q.trace_s, q.start_unix
                pending.remove(q)
    pending.append(p)
    _call(p.hooks.begin, p, on_error=lambda: pending.remove(p))
    return p


def is_jit_call(code: types.CodeType) -> bool:
    """Whether ``code`` is jit's ``cache_miss`` (a jitted call missing the C++ cache); needs the frames mode."""
    assert _internals is not None
    cache_miss = _internals.cache_miss
    # An unpickled jit object carries a copy of cache_miss (cloudpickle sends it by value).
    return code is cache_miss or (code.co_name == "cache_miss" and code == cache_miss)


# --- event handlers ------------------------------------------------------------------


def _on_start(event: str, value: float, **kwargs: Any) -> None:
    if event in _STAGE_FIELD and not getattr(_tls, "busy", False):
        _guard(_start, event, float(value), kwargs.get("fun_name"))


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    if event in _STAGE_FIELD and not getattr(_tls, "busy", False):
        _guard(_stage_done, event, float(duration), kwargs.get("fun_name"))


def _on_event(event: str, **kwargs: Any) -> None:
    if event in (CACHE_HIT_EVENT, CACHE_REQUEST_EVENT) and not getattr(_tls, "busy", False):
        _guard(_cache_event, event)


def _start(event: str, start_unix: float, fun_name: Any) -> None:
    assert _internals is not None
    if _internals.cache_miss is not None:
        frame = _call_frame()
        if frame is not None:
            _pending_for(frame, create=True, start_unix=start_unix)
    elif event == TRACE_EVENT:
        opens = _tls.__dict__.setdefault("opens", [])
        opens.append(_OpenTrace(str(fun_name), start_unix))


def _stage_done(event: str, duration: float, fun_name: Any) -> None:
    assert _internals is not None
    if _internals.cache_miss is not None:
        frame = _call_frame()
        p = (
            None
            if frame is None
            else _pending_for(frame, create=not _has_start_events, start_unix=time.time() - duration)
        )
    elif event == TRACE_EVENT:
        opens: list[_OpenTrace] = getattr(_tls, "opens", [])
        opened = opens.pop() if opens and opens[-1].name == fun_name else None
        p = None if opened is None else opened.pending
        if p is None and not opens and (opened is not None or not _has_start_events):
            # Not jaxdiag.jit's, and not nested in another trace: watch records it by name.
            start = time.time() - duration if opened is None else opened.start_unix
            p = _named_pending(str(fun_name), start)
    else:
        p = _awaiting(_strip_jit(str(fun_name)))
    if p is None:
        return
    if _stage_raised():  # JAX made nothing (a bad compiler option...): like a failed trace, no compile
        trace_failed(p)
        return
    setattr(p, _STAGE_FIELD[event], duration)
    if event == COMPILE_EVENT:
        _finish(p)


def _cache_event(event: str) -> None:
    assert _internals is not None
    if _internals.cache_miss is not None:
        frame = _call_frame()
        p = None if frame is None else _pending_for(frame, create=False, start_unix=0.0)
    else:
        pending = _pendings()
        p = pending[-1] if pending else None
    if p is not None:
        if event == CACHE_HIT_EVENT:
            p.persistent_cache_hit = True
        elif p.persistent_cache_hit is None:
            p.persistent_cache_hit = False


def _named_pending(name: str, start_unix: float) -> Pending | None:
    by_name = getattr(_watch, "by_name", None)
    hooks = None if by_name is None else by_name(name)
    if hooks is None:
        return None
    pending = _pendings()
    p = Pending(hooks, (), {}, None, start_unix, threading.current_thread().name)
    # A trace that never compiles (eval_shape, a failed trace) leaves its compile here.
    del pending[:-_MAX_NAMED_PENDING]
    pending.append(p)
    _call(hooks.begin, p, on_error=lambda: pending.remove(p))
    return p


def _finish(p: Pending) -> None:
    pending = _pendings()
    if p in pending:
        pending.remove(p)
    if _internals is not None and _internals.cached_compilation is not None:
        if p.hooks.wants_executable():
            p.executable = _executable()
        p.sharding = collect_sharding(p, _executable)
        if p.sharding is not None:  # the program's id joins its timeline ops to this compile
            p.program_id = jax_internals.program_id(p.executable if p.executable is not None else _executable())
    try:
        _call(p.hooks.end, p)
    finally:
        p.frame = p.user_frame = p.executable = None  # let the arguments and executable go


# --- frames --------------------------------------------------------------------------


def _pending_for(frame: types.FrameType, *, create: bool, start_unix: float) -> Pending | None:
    pending = _pendings()
    for p in reversed(pending):
        if p.frame is frame:
            return p
    if not create:
        return None
    assert _internals is not None
    if frame.f_code is _internals.impl_miss:
        return transformed.impl_pending(frame, start_unix)
    if frame.f_code is _internals.aot_compile:
        return transformed.aot_pending(frame, start_unix)
    fun, args, kwargs, info = jax_internals.jit_call(frame)
    hooks = hooks_of(fun)
    if hooks is None:
        return None
    transformed.remember_source(info, fun)
    p = Pending(
        hooks,
        args,
        kwargs,
        jax_internals.jit_static(info),
        start_unix,
        threading.current_thread().name,
        frame=frame,
        fun=fun,
        jit_info=info,
    )
    return begin_compile(p)


def _add_context(p: Pending) -> None:
    """The jit options and the config states of the cache key, read as the compile starts."""
    given = internals_reads.jit_option_leaves(p.jit_info)
    p.jit_leaves = {path: signature.describe_sharding(leaf) or repr(leaf) for path, leaf in given.items()} or None
    p.jit_options = internals_reads.jit_options(p.jit_info, p.jit_leaves or {})
    state = internals_reads.config_state()
    if state is not None:
        p.config = {k: v for k, v in state.items() if CONFIG_DEFAULTS.get(k, v) != v or k not in CONFIG_DEFAULTS}


def _drop_dead(pending: list[Pending]) -> None:
    live = {id(f) for f in _stack()}
    pending[:] = [q for q in pending if q.frame is None or id(q.frame) in live]


def _stack() -> Iterator[types.FrameType]:
    frame = sys._getframe(2)
    while frame is not None:
        yield frame
        frame = frame.f_back


def _call_frame() -> types.FrameType | None:
    """The nearest ``cache_miss`` frame, unless an AOT entry point (``.lower()``...) is nearer."""
    assert _internals is not None
    impl_miss = _internals.impl_miss
    for frame in _stack():
        code = frame.f_code
        if code is impl_miss or is_jit_call(code):
            return frame
        if frame.f_code in _internals.stoppers:
            # An ahead-of-time compile is the user's own request: a record only under watch.
            aot = code is _internals.aot_compile and getattr(_watch, "aot", None) is not None
            return frame if aot else None
    return None


pmap_call = jax_internals.pmap_call  # read by watch


def _stage_raised() -> bool:
    """Whether the stage whose duration is being reported ended in an exception.

    JAX reports a stage's duration from the ``__exit__`` of the ``with`` that times
    it, whether or not the stage raised; that frame's ``exc_type`` says which.
    """
    assert _internals is not None
    return _internals.timed_exit is not None and jax_internals.stage_raised(_stack())


def _executable() -> Any:
    """The executable just compiled, from the frame that assigned it (the event fires on exit)."""
    return jax_internals.executable_in(_stack())


def _awaiting(name: str) -> Pending | None:
    for p in reversed(_pendings()):
        if p.hooks.name == name and p.backend_compile_s is None:
            return p
    return None


def _strip_jit(name: str) -> str:
    return name[4:-1] if name.startswith("jit(") and name.endswith(")") else name


def _pendings() -> list[Pending]:
    return _tls.__dict__.setdefault("pending", [])


# --- safety --------------------------------------------------------------------------


def _call(fn: Any, p: Pending, on_error: Any = None) -> None:
    """Run a hook with events ignored (hooks may touch jax), undoing ``p`` if it raises."""
    _tls.busy = True
    try:
        fn(p)
    except BaseException:
        if on_error is not None:
            on_error()
        raise
    finally:
        _tls.busy = False


def _guard(fn: Any, *args: Any) -> None:
    """Run a listener body: a failure becomes one warning, never the user's exception."""
    try:
        fn(*args)
    except (CompileBudgetExceeded, CompileBudgetWarning, HostDivergenceError):
        raise  # meant for the caller: on_exceed="raise", or "warn" under -W error; check_hosts="raise"
    except Exception as exc:
        warn_once("listener", f"jaxdiag stopped recording a compile: {type(exc).__name__}: {exc}")


# --- internals -----------------------------------------------------------------------


def _find_internals() -> _Internals:
    cache_miss = jax_internals.jit_call_frame()
    stoppers = jax_internals.aot_entry_points() or frozenset()
    impl_miss = internals_reads.impl_cache_miss_code() if cache_miss is not None else None
    aot = internals_reads.aot_compile_code() if cache_miss is not None else None
    return _Internals(
        cache_miss, stoppers, jax_internals.compiled_executable(), jax_internals.stage_exceptions(), impl_miss, aot
    )


def _hide_wrapper_frames() -> None:
    """Leave jaxdiag's trace-time wrapper, and its hooks, out of filtered tracebacks and source locations.

    Otherwise its frame would show in the user's tracebacks and in the debug
    locations of the lowered module, where ``jax.jit`` has none; the hooks' frames
    (``target``) would show above a compile refused by ``on_exceed="raise"``.
    """
    from jaxdiag.recording import target, wrapper

    try:
        if not all([jax_internals.hide_frames(wrapper.__file__), jax_internals.hide_frames(target.__file__)]):
            jax_internals.warn_lost("traceback_exclusion")
    except Exception:
        pass
