"""What the listener calls for a function it records: the compile's record, written when the compile ends.

A ``Target`` is one function's ``in_flight.CompileHooks``: at the start of a compile it
reads the call's signature and site (and, with ``on_exceed="raise"``, refuses a compile
past the budget); at the end it builds the ``CompileRecord``, explains it against the
function's earlier compiles and adds it to the compile log. ``jaxdiag.jit`` makes one
per function and options (``wrapper``); ``watch`` makes them for plain ``jax.jit``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdiag.config import DEFAULT_THRESHOLDS
from jaxdiag.errors import warn_once
from jaxdiag.recording import budget, call_site, compile_log, signature
from jaxdiag.recording.in_flight import Pending
from jaxdiag.recording.records import (
    JAX_INTERNAL_ORIGIN,
    CompileRecord,
    Explanation,
    history_key,
    history_variant,
)
from jaxdiag.sharding.names import with_user_names


class Target:
    """One ``jaxdiag.jit`` function as the listener sees it (an ``in_flight.CompileHooks``)."""

    __slots__ = (
        "name",
        "qualname",
        "source",
        "function_id",
        "max_compiles",
        "on_exceed",
        "analysis",
        "origin",
        "traced",
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
        self.name = call_site.fun_name(fun)
        self.qualname = call_site.qualname(fun)
        self.source = call_site.source(fun)
        self.function_id = compile_log.function_id(fun)
        self.max_compiles, self.on_exceed, self.analysis = max_compiles, on_exceed, analysis
        self.origin = origin
        #: A weak reference to the ``wrapper._Traced`` that ``jaxdiag.jit`` hands JAX for this
        #: function, set by it; ``None`` for watch's targets, which own whatever they match.
        self.traced: Any = None

    @property
    def key(self) -> tuple[str, str | None]:
        return self.qualname, self.source

    def history_key(self, pending: Pending) -> tuple[str, str | None, str]:
        """A jit object's compiles: this function with these jit options (see ``history_key``)."""
        site = pending.context[2][0] if self.origin == JAX_INTERNAL_ORIGIN else None
        return self.qualname, self.source, history_variant(pending.jit_options, pending.transform, site)

    def owns(self, fun: Any) -> bool:
        """Whether ``fun`` is this target's ``_Traced`` (for ``origin="watch"``, any ``fun``
        the watch factory matched)."""
        return self.traced is None or self.traced() is fun

    def wants_executable(self) -> bool:
        return self.analysis if self.analysis is not None else compile_log.analysis_enabled()

    def begin(self, pending: Pending) -> None:
        max_repr = DEFAULT_THRESHOLDS.max_static_repr
        if pending.static is None:
            args, tree = signature.traced_signature(pending.args, pending.kwargs, max_repr)
        else:
            args, tree = signature.signature_of(
                pending.args, pending.kwargs, *pending.static, max_static_repr=max_repr, batch_axes=pending.batch_axes
            )
        if pending.user_args:
            args = signature.with_labels(args, self._fun())
        pending.context = (args, tree, call_site.call_site_and_function())
        if self.max_compiles is not None and self.on_exceed == "raise":
            index, history = compile_log.LOG.peek(self.history_key(pending))
            budget.enforce(self._record(pending, index, history), self.max_compiles, self.on_exceed, starting=True)

    def _fun(self) -> Any:
        traced = self.traced() if self.traced is not None else None
        return None if traced is None else traced._ref()

    def end(self, pending: Pending) -> None:
        index, history = compile_log.LOG.reserve(self.history_key(pending))
        record = self._record(pending, index, history)
        if pending.executable is not None:
            try:
                cost, memory = analyze_executable(pending.executable)
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

    def _record(self, p: Pending, index: int, history: list[CompileRecord]) -> CompileRecord:
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
    return tuple(dataclasses.replace(a, sharding=None, memory_kind=None, placement=None, committed=None) for a in args)


def _earlier_unseen(p: Pending, record: CompileRecord) -> int | None:
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


def analyze_executable(executable: Any) -> tuple[dict[str, float] | None, dict[str, int] | None]:
    """Cost (flops, bytes accessed) and memory figures of a compiled executable."""
    cost = executable.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost_out = {
        k: float(cost[src])
        for k, src in (("flops", "flops"), ("bytes_accessed", "bytes accessed"))
        if src in (cost or {})
    }
    stats = executable.get_compiled_memory_stats()
    memory = {
        k: int(getattr(stats, src))
        for k, src in (
            ("argument_bytes", "argument_size_in_bytes"),
            ("output_bytes", "output_size_in_bytes"),
            ("temp_bytes", "temp_size_in_bytes"),
            ("generated_code_bytes", "generated_code_size_in_bytes"),
        )
        if hasattr(stats, src)
    }
    return cost_out or None, memory or None
