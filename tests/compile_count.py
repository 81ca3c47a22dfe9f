"""Count, during a test, the backend compiles jaxdiag is recording and the records it makes.

jaxdiag promises that each backend compile it is recording is one record.
``tests/conftest.py`` checks that in every test with the counts kept here. A compile
is "being recorded" when ``jaxdiag.watch()`` records everything (JAX's own helpers
included), or when the function it compiles is a ``jaxdiag.jit`` function: the nearest
jit call on the stack is one (a plain call, or grad's forward and vmap's batched
program under it), or a transformed compile with no call left on the stack (grad's
backward pass) comes from the source of one. It reads JAX's frames, not jaxdiag's
matching, so a compile jaxdiag misses shows. A compile that fails is not counted.
Nothing here imports jax or jaxdiag.
"""

from __future__ import annotations

import collections
import sys
import threading
import types

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_JIT_CALL_FRAMES = ("cache_miss", "call_impl_cache_miss")


class _CompileCount:
    """The backend compiles jaxdiag was recording, and its records, over one test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = False
        self.compiles: list[str] = []
        self.records: list[str] = []
        #: ``jit_info.fun_sourceinfo`` of the ``jaxdiag.jit`` functions seen compiling.
        self.jaxdiag_sources: set[str] = set()


COUNT = _CompileCount()


def recording_everything() -> bool:
    """Whether ``jaxdiag.watch()`` is recording every compile, JAX's own helpers included."""
    listener, watch = sys.modules.get("jaxdiag.recording.listener"), sys.modules.get("jaxdiag.recording.watch")
    if listener is None or watch is None or listener.mode() != "frames":
        return False
    recorders = getattr(watch, "_RECORDERS", {})
    return recorders.get(True) is not None and listener.get_watch() is recorders[True]


def _is_jaxdiag_jit(fun: object) -> bool:
    try:
        return getattr(fun, "__jaxdiag_hooks__", None) is not None
    except Exception:
        return False


def _jaxdiag_function_compiling() -> bool:
    """Whether the compile under way is of a ``jaxdiag.jit`` function, read from JAX's own frames."""
    frame: types.FrameType | None = sys._getframe(2)
    transformed = None
    while frame is not None:
        code = frame.f_code
        if code.co_name in _JIT_CALL_FRAMES and frame.f_globals.get("__name__") == "jax._src.pjit":
            local = frame.f_locals
            if code.co_name == "cache_miss":
                if not _is_jaxdiag_jit(local.get("fun")):
                    return False
                source = getattr(local.get("jit_info"), "fun_sourceinfo", None)
                if isinstance(source, str):
                    COUNT.jaxdiag_sources.add(source)
                return True
            if transformed is None:
                transformed = local
        elif code.co_name == "compile" and frame.f_globals.get("__name__") == "jax._src.stages":
            return False  # ahead of time: the user's own request, recorded only under watch
        frame = frame.f_back
    if transformed is None:
        return False
    info = getattr(getattr(transformed.get("jaxpr"), "jaxpr", None), "debug_info", None)
    return getattr(info, "func_src_info", None) in COUNT.jaxdiag_sources


def _compile_raised() -> bool:
    """Whether the backend compile being reported failed: JAX times it in a ``with`` whose exit sees the error."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__exit__" and frame.f_globals.get("__name__") == "jax._src.dispatch":
            return frame.f_locals.get("exc_type") is not None
        frame = frame.f_back
    return False


def on_duration(event: str, duration: float, **kwargs: object) -> None:
    """A ``jax.monitoring`` duration listener: counts the backend compiles being recorded."""
    if event != COMPILE_EVENT or not COUNT.active:
        return
    if not _compile_raised() and (recording_everything() or _jaxdiag_function_compiling()):
        with COUNT.lock:
            COUNT.compiles.append(str(kwargs.get("fun_name")))


class CountingRecords(list):
    """A collector's record list that counts the records made of compiles being recorded."""

    def append(self, record: object) -> None:
        super().append(record)
        if COUNT.active and (getattr(record, "origin", None) == "jit" or recording_everything()):
            with COUNT.lock:
                COUNT.records.append(str(getattr(record, "function", "?")))


def mismatch(compiles: list[str], records: list[str]) -> str | None:
    """What differs between the compiles counted and the records made, or ``None``."""
    if len(compiles) == len(records):
        return None
    seen, made = collections.Counter(_bare(name) for name in compiles), collections.Counter(records)
    return (
        f"jaxdiag recorded {len(records)} compiles where JAX reported {len(compiles)} backend compiles "
        f"({COMPILE_EVENT}); compiled without a record: {dict(seen - made) or 'none by name'}; "
        f"records without a compile: {dict(made - seen) or 'none by name'}"
    )


def _bare(fun_name: str) -> str:
    return fun_name[4:-1] if fun_name.startswith("jit(") and fun_name.endswith(")") else fun_name
