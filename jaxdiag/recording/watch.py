"""``jaxdiag.watch()``: record every compile in the process, whatever wrapper made it.

    with jaxdiag.watch():          # or jaxdiag.watch(True) ... jaxdiag.watch(False)
        train(model, data)         # nnx.jit, eqx.filter_jit, jax.pmap, plain jax.jit

Each compile becomes a ``CompileRecord`` (``origin="watch"``) in the compile log,
explained against the function's earlier compiles. The listener hands over the
call that missed JAX's cache; this module turns it into the user's view of it:

- ``eqx.filter_jit``, ``nnx.jit`` and ``jax.pmap`` are seen through: the record names
  the user's function and arguments, not the wrapper's internal pytrees. The
  wrappers' frames are read here (JAX's own, pmap's, in ``listener``); with another
  version of a library, the record keeps what ``jax.jit`` saw.
- Arguments and call sites are read as ``jaxdiag.jit`` reads them (``signature``):
  static fields of modules become static leaves at their own path
  (``args[0].activation``), so a changed field is named.
- JAX's own jitted helpers (eager ``jnp`` ops, primitives run outside ``jit``, the
  slicing behind ``device_put``) are recorded with ``origin="jax-internal"``: they
  cost compile time the program pays, and summaries fold them. The rule: the
  function, unwrapped, is defined in the ``jax`` or ``jaxlib`` packages.
- A ``jaxdiag.jit`` function keeps its own records (``origin="jit"``): recorded once.

Without the pjit internals, records carry names, counts and durations only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types
from typing import Any

from jaxdiag import jax_internals
from jaxdiag.errors import ConfigError
from jaxdiag.recording import call_site, compile_log, host_check, listener, signature
from jaxdiag.recording.in_flight import Pending
from jaxdiag.recording.records import (
    JAX_INTERNAL_ORIGIN,
    CompileRecord,
    Explanation,
)
from jaxdiag.recording.signature import signature_of as call_signature
from jaxdiag.recording.target import Target

WATCH_ORIGIN = "watch"
_ADAPTER_DEPTH = 6  # frames searched outward from ``cache_miss`` for a library wrapper
_UNKNOWN_CAUSE = "compiled again; the cause is unknown (this JAX lacks the internals that give argument signatures)"


class watch(contextlib.ContextDecorator):
    """Record every compile of every jitted function in the process.

    ``jaxdiag.watch(True)`` turns recording on for the whole process and
    ``jaxdiag.watch(False)`` turns it off, at once. ``with jaxdiag.watch():`` (or
    ``@jaxdiag.watch()`` on a function) records inside the block only; any form
    used as a context manager restores the earlier state on exit. Recording covers
    every thread. Cache hits cost what they cost without it: JAX's C++ dispatch
    emits no event, so nothing of jaxdiag runs.

    Args:
      enabled: ``True``/``False`` switch now; ``None`` (default) switches on when
        the block is entered.
      jax_internals: also record JAX's own jitted helpers, as
        ``origin="jax-internal"`` records.
      check_hosts: in a ``jax.distributed`` run, compare every compile with the
        other processes' through the distributed key-value store and warn
        (``True``) or raise (``"raise"``) when they differ, before the program
        reaches the collective that would hang (see ``recording.host_check``;
        a ``HostCheck`` sets the bound on waits).

    Attributes:
      records: the records added while the block was open, from every thread and
        every wrapper (``jaxdiag.jit`` ones included).

    Raises:
      ConfigError: ``enabled`` or ``jax_internals`` is not a bool.
      CompileLogError: ``JAXDIAG_LOG_DIR`` names a folder that cannot be written.
    """

    def __init__(self, enabled: bool | None = None, *, jax_internals: bool = True, check_hosts: Any = False) -> None:
        if enabled is not None and not isinstance(enabled, bool):
            raise ConfigError(f"jaxdiag.watch(enabled=...) must be True, False or None, got {enabled!r}")
        if not isinstance(jax_internals, bool):
            raise ConfigError(f"jaxdiag.watch(jax_internals=...) must be True or False, got {jax_internals!r}")
        self.enabled = enabled
        self.jax_internals = jax_internals
        self._before: Any = None
        self._collecting: compile_log.collecting | None = None
        self._records: list[CompileRecord] = []
        self.host_check = host_check.resolve(check_hosts)
        if enabled is not None:
            self._before = _switch(enabled, jax_internals)
            _switch_host_check(self.host_check if enabled else None)

    @property
    def records(self) -> list[CompileRecord]:
        if self._collecting is not None:
            return list(self._collecting.collector.records)
        return list(self._records)

    def __enter__(self) -> "watch":
        if self.enabled is None:
            self._before = _switch(True, self.jax_internals)
        self._records = []
        self._collecting = compile_log.collecting()
        self._collecting.__enter__()
        if self.host_check is not None:
            compile_log.LOG.add_collector(self.host_check)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._collecting is not None:
            self._collecting.__exit__(*exc)
            self._records = self._collecting.collector.records
            self._collecting = None
        if self.host_check is not None:
            compile_log.LOG.remove_collector(self.host_check)
        listener.set_watch(self._before)


_HOST_CHECK: list[Any] = []  # the check ``watch(True, check_hosts=...)`` turned on for the process


def _switch_host_check(check: Any) -> None:
    """Replace the process-wide host check (``None``: none)."""
    while _HOST_CHECK:
        compile_log.LOG.remove_collector(_HOST_CHECK.pop())
    if check is not None:
        compile_log.LOG.add_collector(check)
        _HOST_CHECK.append(check)


def watching() -> bool:
    """Whether ``jaxdiag.watch`` is recording now."""
    return isinstance(listener.get_watch(), _Recorder)


def is_jax_internal(record: CompileRecord) -> bool:
    """Whether ``record`` is of one of JAX's own jitted helpers (see the module docstring)."""
    return record.origin == JAX_INTERNAL_ORIGIN


def _switch(on: bool, jax_internals: bool) -> Any:
    """Turn recording on or off; returns the factory it replaced."""
    listener.install()
    compile_log.apply_env()
    before = listener.get_watch()
    listener.set_watch(_RECORDERS[jax_internals] if on else None)
    return before


# --- the listener's hooks ------------------------------------------------------------


class _Recorder:
    """The factory given to ``listener.set_watch``, and the hooks it gives for every function.

    Nothing is done when a compile starts (nested traces start compiles that never
    finish): the call is read from the stack once the compile is done, while its
    ``cache_miss`` frame is still live.
    """

    name = "<watch>"

    def __init__(self, jax_internals: bool) -> None:
        self.jax_internals = jax_internals

    def __call__(self, fun: Any) -> "_Recorder":
        return self

    def by_name(self, name: str) -> "_ByName":
        return _ByName(name)

    def aot(self, name: str) -> "_AheadOfTime":
        return _AheadOfTime(name)

    def owns(self, fun: Any) -> bool:
        return True

    def wants_executable(self) -> bool:
        return compile_log.analysis_enabled()

    def begin(self, pending: Pending) -> None:
        pass

    def end(self, pending: Pending) -> None:
        if pending.frame is None:
            return
        call = _resolve(pending)
        internal = _defined_in_jax(call.fun)
        if internal and not self.jax_internals:
            return
        target = Target(call.fun, origin=JAX_INTERNAL_ORIGIN if internal else WATCH_ORIGIN)
        target.function_id = None if call.identity is None else compile_log.function_id(call.identity)
        args, tree = call_signature(
            call.args,
            call.kwargs,
            call.static_argnums,
            call.static_argnames,
            static_leaves=call.static_leaves,
            batch_axes=pending.batch_axes,
        )
        if pending.user_args:
            args = signature.with_labels(args, call.fun)
        pending.context = (args, tree, call_site.site_from(pending.frame, column=internal))
        if (
            pending.transform is None
            and not internal  # JAX's cache holds an eager op's calls from every line: not comparable
            and call.fun is p_fun(pending)
            and compile_log.LOG.peek(target.history_key(pending))[0] == 1
        ):
            pending.earlier = _earlier_calls(pending, call)
        target.end(pending)


_RECORDERS = {True: _Recorder(True), False: _Recorder(False)}


def p_fun(pending: Pending) -> Any:
    return pending.fun


def _earlier_calls(pending: Pending, call: "_Call") -> list[tuple[Any, str]]:
    """Signatures of the calls JAX traced before this first compile recording saw."""
    from jaxdiag.jax_internals import transforms as internals_reads

    out = []
    for args, kwargs in internals_reads.cached_calls(pending.fun, pending.jit_info):
        try:
            sigs, tree = call_signature(args, kwargs, call.static_argnums, call.static_argnames)
        except Exception:
            continue
        out.append((signature.with_labels(sigs, call.fun), tree))
    return out


class _AheadOfTime:
    """Hooks for a ``.lower(...).compile()`` seen by ``watch``: known by name and argument types."""

    __slots__ = ("name", "__weakref__", "__dict__")

    def __init__(self, name: str) -> None:
        self.name = name
        # Stands in for the function, which a lowered computation no longer holds.
        self.__dict__.update(__name__=name, __qualname__=name, __module__="<ahead-of-time>")

    owns = _Recorder.owns
    begin = _Recorder.begin

    def wants_executable(self) -> bool:
        return compile_log.analysis_enabled()

    def end(self, pending: Pending) -> None:
        target = Target(self, origin=WATCH_ORIGIN)
        target.function_id = None
        args, tree = call_signature(pending.args, pending.kwargs)
        pending.context = (args, tree, call_site.site_from(pending.frame))
        target.end(pending)


class _ByName:
    """Hooks for a compile known by name only (a JAX without the pjit internals)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    owns = _Recorder.owns
    begin = _Recorder.begin

    def wants_executable(self) -> bool:
        return False

    def end(self, p: Pending) -> None:
        index, _ = compile_log.LOG.reserve((self.name, None, ""))
        compile_log.LOG.append(
            CompileRecord(
                function=self.name,
                qualname=self.name,
                source=None,
                call_site=call_site.site_from(sys._getframe(1))[0],
                call_function=None,
                compile_index=index,
                explanation=None if index == 1 else Explanation(f"{self.name}: {_UNKNOWN_CAUSE}"),
                origin=WATCH_ORIGIN,
                **p.stage_fields(),
            )
        )


# --- whose call it was ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Call:
    """A call that compiled, as its user wrote it.

    Attributes:
      fun: the user's function (names the record).
      identity: the object JAX's caches key on, for ``function_id`` (``None``: unknown).
      static_leaves: every non-array leaf is static (``eqx.filter_jit``'s rule).
    """

    fun: Any
    identity: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    static_leaves: bool = False


def _resolve(p: Pending) -> _Call:
    """The user's call behind the compile: a library wrapper's (nearest first), or JAX's own."""
    base = _Call(p.fun, p.fun, p.args, p.kwargs, *(p.static or ((), ())))
    if p.transform is not None:  # a library's frames hold the untransformed call: JAX's view
        return base
    outer = p.frame.f_back if p.frame is not None else None
    for _ in range(_ADAPTER_DEPTH):
        if outer is None:
            break
        module = outer.f_globals.get("__name__") or ""
        pmapped = listener.pmap_call(outer)
        if pmapped is not None:
            fun, args, kwargs, static = pmapped
            return _Call(fun, fun, args, kwargs, static)
        adapter = _ADAPTERS.get((module, outer.f_code.co_name))
        if adapter is not None:
            try:
                return adapter(outer.f_locals, base) or base
            except Exception:  # another version of the library: JAX's view is still right
                return base
        if module.partition(".")[0] not in ("jax", "jaxlib"):
            break
        outer = outer.f_back
    return base


def _equinox(local: dict[str, Any], base: _Call) -> _Call:
    # JAX sees one shared function per name and the user's function as data; equinox
    # makes every non-array leaf static.
    fun, args, kwargs = jax_internals.equinox_call(local)
    identity = fun if isinstance(fun, types.FunctionType) else None
    return _Call(fun, identity, args, kwargs, static_leaves=True)


def _flax_nnx(local: dict[str, Any], base: _Call) -> _Call | None:
    call = jax_internals.flax_nnx_call(local)
    if call is None:
        return None
    fun, args, kwargs = call
    return dataclasses.replace(base, fun=fun, args=args, kwargs=kwargs)


_ADAPTERS = {
    ("equinox._jit", "_call"): _equinox,
    ("flax.nnx.transforms.compilation", "__call__"): _flax_nnx,
}


def _defined_in_jax(fun: Any) -> bool:
    return call_site.qualname(fun).partition(".")[0] in ("jax", "jaxlib")


__all__ = ["watch", "watching", "is_jax_internal", "call_signature"]
