"""The compile record: one per trace or compile, the unit of the compile log.

A record is plain data (no jax objects), so it round-trips through JSONL and can
be read by commands that never import jax. ``SCHEMA`` versions the field names;
readers accept records of the same major version and ignore unknown fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any

SCHEMA = "jaxdiag.compile/1"
#: ``CompileRecord.origin`` of JAX's own jitted helpers recorded by ``jaxdiag.watch``.
JAX_INTERNAL_ORIGIN = "jax-internal"

#: The cause of a function's first compile (``compile_log.cause``, and the report's recompile rows).
FIRST_COMPILE = "first compile"
#: How ``unseen_cause`` begins: a first compile seen after the function had compiled unrecorded.
FIRST_SEEN = "first compile seen"


def unseen_cause(earlier: int) -> str:
    """The cause of a first compile seen while JAX's cache already held ``earlier`` traces of the function."""
    return (
        f"{FIRST_SEEN}: JAX already held {earlier} trace(s) of this function, so it compiled before recording started"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ArgSignature:
    """What JAX keys its caches on, for one argument leaf.

    Attributes:
      path: pytree path from the call, e.g. ``args[0]['layers'][2].w`` or ``kwargs['scale']``.
      kind: ``"array"`` for traced leaves, ``"static"`` for static arguments.
      shape: array shape, ``None`` for static leaves.
      dtype: dtype name (``"float32"``), ``None`` for static leaves.
      weak_type: JAX weak type flag (Python scalars are weakly typed).
      sharding: readable sharding (``"PartitionSpec('x', None)"`` on a mesh), when known.
      memory_kind: ``"device"``, ``"pinned_host"``, ... when known.
      value: ``repr`` of a static value, truncated.
      label: the path as the user wrote it, with the parameter's name
        (``batch['ids']`` for ``args[1]['ids']``), when the function's signature gives it.
      batch_axis: the axis ``jax.vmap`` added to this leaf, when the compile is of a
        vmapped call (the shape is then what the compiled program received).
      placement: where the sharding puts the array's pieces, as JAX compares shardings
        for an array of this rank (``Sharding.is_equivalent_to``): the XLA sharding for
        the rank and the devices. ``P('model', None)`` and ``P('model',)`` on one mesh have
        different ``sharding`` text and the same placement, and hit one cache entry.
      committed: whether the array was committed to its devices (``jax.device_put`` with a device or
        sharding, or a program's output on committed inputs: ``True``) or left for JAX to place at the
        call (a NumPy array, a Python number, a jnp array on the default device: ``False``); ``None``
        for a tracer. JAX compiles a call with a committed input apart from one without.
    """

    path: str
    kind: str = "array"
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    weak_type: bool | None = None
    sharding: str | None = None
    memory_kind: str | None = None
    value: str | None = None
    label: str | None = None
    batch_axis: int | None = None
    placement: str | None = None
    committed: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["shape"] is not None:
            d["shape"] = list(d["shape"])
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ArgSignature":
        kw = {k: v for k, v in d.items() if k in _ARG_FIELDS}
        if kw.get("shape") is not None:
            kw["shape"] = tuple(kw["shape"])
        return cls(**kw)


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """One difference between a signature and the closest earlier one.

    Attributes:
      path: argument path that changed (``""`` for the function itself).
      what: ``"shape"``, ``"dtype"``, ``"weak_type"``, ``"static"``, ``"sharding"``,
        ``"committed"`` (``old``/``new`` ``"False"``/``"True"``), ``"memory_kind"``, ``"structure"``, ``"function"`` (a new function object or
        closure) or ``"context"`` (a jax config or mesh context).
      old, new: the two values, as text.
        ``what`` is also ``"jit_options"`` (path: the option) and ``"config"`` (path: the
        flag, e.g. ``jax_enable_x64``), and ``"container"`` (the same leaves in another
        container type, ``old``/``new`` the two types).
      old, new: the two values, as text.
      axis: for ``"shape"``, the axis whose size changed (``None`` for a rank change).
      label: ``path`` as the user wrote it (parameter names), for sentences.
      batch_axis: for ``"shape"``, the changed axis is the one ``jax.vmap`` added.
      of_shape: for ``"weak_type"``, the argument's shape as text (``()``: a scalar): an array made
        from a Python scalar (``jnp.full(shape, 0.1)``) is weakly typed too.
    """

    path: str
    what: str
    old: str | None = None
    new: str | None = None
    axis: int | None = None
    label: str | None = None
    batch_axis: bool | None = None
    of_shape: str | None = None

    @property
    def weak_array(self) -> bool:
        """A ``"weak_type"`` change of an argument with at least one axis, not a scalar."""
        return self.what == "weak_type" and self.of_shape not in (None, "()")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Change":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclasses.dataclass(frozen=True, slots=True)
class Explanation:
    """Why a function compiled again: the diff against its closest earlier signature.

    Attributes:
      summary: one human sentence, e.g. ``"args[2] shape axis 1: 129 -> 193"``.
      changes: the machine-readable differences (empty for a first compile).
      compared_to: ``compile_index`` of the earlier record it was diffed against.
    """

    summary: str
    changes: tuple[Change, ...] = ()
    compared_to: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"summary": self.summary, "changes": [c.to_dict() for c in self.changes]}
        if self.compared_to is not None:
            d["compared_to"] = self.compared_to
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Explanation":
        return cls(
            summary=str(d.get("summary", "")),
            changes=tuple(Change.from_dict(c) for c in d.get("changes", ())),
            compared_to=d.get("compared_to"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class CompileRecord:
    """One trace/lower/compile of one jitted function.

    Attributes:
      function: the function's ``__name__``.
      qualname: its ``__module__.__qualname__``.
      source: ``file:line`` where the function is defined.
      call_site: ``file:line`` of the user's call that caused this trace.
      compile_index: 1 for a function's first compile, 2 for its first recompile, ...
      time_unix: wall-clock start (seconds since the epoch).
      traced, lowered, compiled: which stages ran (a sharding change may lower and
        compile without tracing; a jit nested in another trace only traces).
      trace_s, lower_s, backend_compile_s: durations from ``jax.monitoring`` events.
      persistent_cache_hit: whether the persistent compilation cache served it.
      args: one signature per argument leaf (array and static).
      in_tree: the pytree structure of the arguments, as text.
      function_id: identity of the Python function object (a new id with an equal
        qualname means a new function object or closure).
      explanation: why it compiled again (``None`` for the first compile).
      cost: optional ``{"flops": ..., "bytes_accessed": ...}``.
      memory: optional ``{"argument_bytes", "output_bytes", "temp_bytes", "generated_code_bytes"}``.
      origin: ``"jit"`` for ``jaxdiag.jit``, ``"watch"`` for process-wide recording,
        ``"jax-internal"`` for JAX's own jitted helpers that process-wide recording
        saw (eager ``jnp`` ops, primitives run outside ``jit``), which summaries fold.
      pid, thread: where it happened.
      call_function: the function whose line ``call_site`` is (``train`` for ``train.py:42``).
      transform: a compile JAX made for a transformed call of the function:
        ``"grad-forward"`` (forward pass with residuals), ``"grad-backward"`` (the
        transpose), ``"vmap"``, ``"jvp"`` or ``"transformed"``; ``"aot"`` for a
        ``.lower(...).compile()`` that ``watch`` saw (named by the lowered computation,
        qualname ``<ahead-of-time>.<name>``); ``None`` for the call itself.
        Each is its own history, as each is its own entry in JAX's caches.
      jit_options: the jit options that differ from defaults (``"donate_argnums=(0,)"``),
        when known: two jit objects of one function with different options are two histories.
      jit_leaves: each leaf the user gave of ``in_shardings``, ``out_shardings`` or a
        layout, by its path in that option (``{"in_shardings[1]['x']": "P('data',) on
        mesh(data=2)"}``), so that two jit objects are compared leaf by leaf.
      config: the jax config states in JAX's cache key that are not at their default
        (``{"jax_enable_x64": "True"}``), plus the mesh in context, as text.
      earlier_unseen: for a first compile that ``watch`` recorded, how many traces of the
        function JAX's jit cache already held (earlier compiles recording did not see;
        ``0``: none, a true first compile; ``None``: unknown).
      sharding: optional ``jaxdiag.sharding.ShardingFacts.to_dict()``: the mesh, each
        input and output leaf's spec (the compiler's choice where the user gave
        none), the collectives the compiler inserted and the bytes they move per
        call. Collected for programs on several devices, or with analysis on.
      program_id: the compiled program's id (XLA's ``HloModuleProto.id``), which the
        trace puts on each of its ops as the ``program_id`` stat: it tells which of two
        compiles of one module ran. Read where sharding facts are; ``None``: unknown.
    """

    function: str
    qualname: str
    source: str | None
    call_site: str | None
    compile_index: int
    time_unix: float
    traced: bool = True
    lowered: bool = True
    compiled: bool = True
    trace_s: float | None = None
    lower_s: float | None = None
    backend_compile_s: float | None = None
    persistent_cache_hit: bool | None = None
    args: tuple[ArgSignature, ...] = ()
    in_tree: str | None = None
    function_id: int | None = None
    explanation: Explanation | None = None
    cost: dict[str, float] | None = None
    memory: dict[str, int] | None = None
    origin: str = "jit"
    pid: int | None = None
    thread: str | None = None
    sharding: dict[str, Any] | None = None
    call_function: str | None = None
    transform: str | None = None
    jit_options: str | None = None
    config: dict[str, str] | None = None
    jit_leaves: dict[str, str] | None = None
    earlier_unseen: int | None = None
    program_id: int | None = None

    @property
    def compile_s(self) -> float:
        """Seconds spent tracing, lowering and compiling (known stages only)."""
        total: float = 0  # summed as ``sum`` would, without a generator: tables read it per record
        for x in (self.trace_s, self.lower_s, self.backend_compile_s):
            if x:
                total += x
        return total

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schema": SCHEMA}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "args":
                v = [a.to_dict() for a in v]
            elif f.name == "explanation" and v is not None:
                v = v.to_dict()
            d[f.name] = v
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CompileRecord":
        """Build a record from its dict; raises ``KeyError``/``TypeError`` on bad input."""
        kw = {k: v for k, v in d.items() if k in _RECORD_FIELDS}
        kw["args"] = tuple(ArgSignature.from_dict(a) for a in kw.get("args") or ())
        if kw.get("explanation") is not None:
            kw["explanation"] = Explanation.from_dict(kw["explanation"])
        return cls.from_fields(kw)

    @classmethod
    def from_fields(cls, kw: dict[str, Any]) -> "CompileRecord":
        """Build a record from its fields, ``args`` and ``explanation`` already built (a log
        reader builds each distinct one once); raises ``KeyError``/``TypeError`` on bad input."""
        for required in ("function", "qualname", "compile_index", "time_unix"):
            if required not in kw:
                raise KeyError(required)
        if not kw.keys() <= _RECORD_FIELDS:
            raise TypeError(f"unexpected fields {sorted(kw.keys() - _RECORD_FIELDS)}")
        get = kw.get
        return record_from_row(tuple([get(name, default) for name, default in _FIELD_DEFAULTS]))


def record_row(rec: CompileRecord) -> tuple[Any, ...]:
    """``rec``'s fields in order: a record crosses a process boundary as a plain tuple (cheap to pickle)."""
    return tuple([getattr(rec, n) for n in _FIELD_NAMES])


def record_from_row(row: tuple[Any, ...]) -> CompileRecord:
    """``CompileRecord(*row)``, without the frozen ``__init__``'s ``object.__setattr__`` per field.

    A long run's log holds a million records; building each through ``__init__``
    costs a third of reading it. The fields are set through the class's slots, as
    ``__init__`` would set them; nothing else differs.
    """
    rec = object.__new__(CompileRecord)
    for set_field, value in zip(_SLOT_SETTERS, row, strict=True):
        set_field(rec, value)
    return rec


def history_key(rec: CompileRecord) -> tuple[str, str | None, str]:
    """The compiles of one jit object: a function (qualname, definition site) and its jit options.

    Two ``jax.jit`` objects of one function with different options fill different
    caches, so each has its own compile indices and explanations; so do the programs
    JAX compiles for a transformed call (grad's forward and backward, vmap's batched
    one), which are not recompiles of the call itself. JAX's own helpers
    (eager ops) are one history per calling line: a ``jnp`` op on labels at one line
    and on activations at another are different programs, not a recompile.
    """
    return (
        rec.qualname,
        rec.source,
        history_variant(rec.jit_options, rec.transform, rec.call_site if rec.origin == JAX_INTERNAL_ORIGIN else None),
    )


def history_variant(jit_options: str | None, transform: str | None, eager_site: str | None) -> str:
    """The third part of ``history_key``: jit options, transformation, an eager op's line."""
    text = jit_options or ""
    if transform:
        text += f"|{transform}"
    if eager_site is not None:  # an eager op is compared with calls from its own line
        text += f"@{eager_site}"
    return text


# Field names, computed once: reading a large log calls ``from_dict`` per line.
_ARG_FIELDS = frozenset(f.name for f in dataclasses.fields(ArgSignature))
_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(CompileRecord))
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(CompileRecord))
_FIELD_DEFAULTS = tuple(
    (f.name, None if f.default is dataclasses.MISSING else f.default) for f in dataclasses.fields(CompileRecord)
)
_SLOT_SETTERS = tuple(CompileRecord.__dict__[n].__set__ for n in _FIELD_NAMES)
