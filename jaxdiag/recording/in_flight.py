"""A compile in flight (``Pending``), and the hooks the listener calls for it (``CompileHooks``).

The listener makes a ``Pending`` when a compile of a recorded function starts and fills
in each stage as JAX reports it; the function's hooks (``target.Target``, or watch's)
see it at the start (``begin``) and at the end (``end``), where it becomes a record.
"""

from __future__ import annotations

import dataclasses
import os
import types
from typing import Any, Protocol


class CompileHooks(Protocol):
    """What the listener calls for a function it records; ``target.Target`` is one."""

    name: str

    def owns(self, fun: Any) -> bool:
        """Whether ``fun`` (the callable given to ``jax.jit``) is this function's."""

    def wants_executable(self) -> bool:
        """Whether ``end`` needs the compiled executable (for cost and memory analysis)."""

    def begin(self, pending: Pending) -> None:
        """A compile starts; may raise ``CompileBudgetExceeded`` to stop it."""

    def end(self, pending: Pending) -> None:
        """A compile finished; ``pending`` holds its stage durations."""


@dataclasses.dataclass(eq=False, slots=True)
class Pending:
    """One compile in flight: the call's arguments and the stage facts gathered so far.

    ``static`` is ``(static_argnums, static_argnames)`` when ``args`` are the call's own
    arguments, ``None`` when they are the tracers seen at trace time.
    """

    hooks: CompileHooks
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    static: tuple[tuple[int, ...], tuple[str, ...]] | None
    start_unix: float
    thread: str
    frame: types.FrameType | None = None
    fun: Any = None  # the callable given to ``jax.jit`` (frames mode only)
    trace_s: float | None = None
    lower_s: float | None = None
    backend_compile_s: float | None = None
    persistent_cache_hit: bool | None = None
    executable: Any = None
    context: Any = None
    sharding: dict[str, Any] | None = None
    #: ``jax_internals.program_id`` of the executable, read where sharding facts are.
    program_id: int | None = None
    #: ``"vmap"``, ``"grad-forward"``, ``"grad-backward"``, ``"jvp"``, ``"transformed"``:
    #: a compile of a transformed ``jit_p`` (``frame`` is then ``call_impl_cache_miss``).
    transform: str | None = None
    #: ``id`` of a flat argument -> its vmapped axis (``transform == "vmap"``).
    batch_axes: dict[int, int] | None = None
    #: The ``cache_miss`` frame of the user's call, when it differs from ``frame``.
    user_frame: types.FrameType | None = None
    #: ``jit_info`` of the call, when known (its options name the cache it fills).
    jit_info: Any = None
    #: ``internals_reads.jit_options`` of ``jit_info``.
    jit_options: str | None = None
    #: Each leaf of the ``in_shardings``/``out_shardings``/layouts the user gave, by path, as text.
    jit_leaves: dict[str, str] | None = None
    #: The jax config states in the jit cache key that differ from ``CONFIG_DEFAULTS``.
    config: dict[str, str] | None = None
    #: ``(args, in_tree)`` signatures of calls JAX traced before recording started (late watch).
    earlier: list[tuple[Any, str]] | None = None
    #: Whether ``args`` are the user's arguments; not for a transformed program's flat inputs
    #: (grad's backward: residuals and cotangents), which the parameters' names would misname.
    user_args: bool = True

    def stage_fields(self) -> dict[str, Any]:
        """The ``CompileRecord`` fields every recorder fills from the compile itself: when, where, each stage."""
        return {
            "time_unix": self.start_unix,
            "lowered": self.lower_s is not None,
            "compiled": self.backend_compile_s is not None,
            "trace_s": self.trace_s,
            "lower_s": self.lower_s,
            "backend_compile_s": self.backend_compile_s,
            "persistent_cache_hit": self.persistent_cache_hit,
            "pid": os.getpid(),
            "thread": self.thread,
            "program_id": self.program_id,
        }
