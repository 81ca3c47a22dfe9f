"""Every private JAX read, behind one door: one probe per capability.

jaxdiag reads a few things JAX does not publish: the frame of jit's Python
fallback (which holds a call's arguments), the frame that holds the compiled
executable, pmap's dispatch frame, the profiler's XSpace reader, and the jit
frames of equinox and flax. Each is a *capability* here, with a probe that
looks for what it reads (a code object, a field, a module) without running a
program, and with one line saying what is lost without it. Callers ask
``available(name)`` and, when it is missing, ``warn_lost(name)`` says so once
("compile causes unavailable on this JAX; ...") instead of recording nothing.

Probes decide by what is there, never by version numbers. ``tests/test_jax_internals.py``
has a test per probe that runs the capability on a real program, so a JAX
upgrade that moves something shows as one failing test with the capability's name.

Nothing here imports jax at import time: ``trace`` reads files without jax.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
import re
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jaxdiag.errors import JaxdiagWarning, TraceFormatError, warn_once


@dataclasses.dataclass(frozen=True, slots=True)
class Capability:
    """One thing jaxdiag reads from JAX's internals.

    Attributes:
      name: the capability's name (the probe test is ``test_<name>``).
      reads: what is read, for the maintainer who must find it again.
      lost: what jaxdiag cannot do on a JAX without it (said once, in a warning).
    """

    name: str
    reads: str
    lost: str


CAPABILITIES: dict[str, Capability] = {
    c.name: c
    for c in (
        Capability(
            "stage_start_events",
            "jax.monitoring.register_scalar_listener (stage start times)",
            "compile start times are estimated from their durations",
        ),
        Capability(
            "jit_call_frame",
            "jax._src.pjit._cpp_pjit's cache_miss frame (fun, jit_info, args, kwargs)",
            "compile causes unavailable on this JAX; compiles are matched by function name, "
            "jaxdiag.watch() records only names, counts and durations, and compiles without a "
            "trace (a sharding-only change) go unrecorded",
        ),
        Capability(
            "aot_entry_points",
            "jax._src.pjit.jit_trace/jit_lower/jit_eval_shape, stages.Traced.lower, stages.Lowered.compile",
            "a .lower()/.compile() may be taken for a call",
        ),
        Capability(
            "compiled_executable",
            "jax._src.interpreters.pxla._cached_compilation's xla_executable",
            "cost, memory and sharding facts unavailable on this JAX",
        ),
        Capability(
            "stage_exceptions",
            "jax._src.dispatch.LogElapsedTimeContextManager.__exit__'s exc_type",
            "a compile stage that raised is taken for a finished one",
        ),
        Capability(
            "traceback_exclusion",
            "jax._src.traceback_util/source_info_util.register_exclusion",
            "jaxdiag.jit's wrapper frame shows in filtered tracebacks and source locations",
        ),
        Capability(
            "pmap_call_frame",
            "jax._src.pmap's wrapped frame (infer_params closure, args, kwargs)",
            "pmap compiles are named after JAX's own wrapper and show its flat arguments",
        ),
        Capability(
            "jit_info_fields",
            "PjitInfo.static_argnums/static_argnames/in_shardings_leaves/out_shardings_leaves",
            "whether jit was given shardings is unknown",
        ),
        Capability(
            "output_shardings",
            "jaxlib.xla_client.HloSharding.from_proto (of an executable's get_output_shardings/get_parameter_shardings)",
            "compiled output shardings unknown, and input shardings too from JAX 0.12 (its optimized HLO leaves them out)",
        ),
        Capability(
            "xspace_reader",
            "jaxlib._profile_data.ProfileData.from_serialized_xspace",
            "cannot read .xplane.pb traces on this jaxlib (a .trace.json.gz still reads)",
        ),
        Capability(
            "xspace_reader_raises",
            "a corrupt XSpace given to ProfileData.from_serialized_xspace raises (older jaxlib aborts)",
            "each .xplane.pb is first parsed in a forked child, so that a corrupt one cannot abort the process",
        ),
        Capability(
            "profile_options",
            "jax.profiler.ProfileOptions",
            "the Python tracer and profiler options cannot be set; captures use the profiler's defaults",
        ),
        Capability(
            "equinox_jit_frame",
            "equinox._jit._call's locals (jit_wrapper, args, kwargs)",
            "eqx.filter_jit compiles are named after equinox's wrapper",
        ),
        Capability(
            "flax_nnx_jit_frame",
            "flax.nnx.transforms.compilation's __call__ locals (self.fun, args, kwargs)",
            "nnx.jit compiles are named after flax's wrapper",
        ),
        Capability(
            "distributed_state",
            "jax._src.distributed.global_state.client (the key-value store jax.distributed starts)",
            "the run-time host check (watch(check_hosts=...)) cannot reach the other processes",
        ),
        Capability(
            "transformed_compiles",
            "jax._src.pjit._pjit_call_impl's call_impl_cache_miss frame (args, jaxpr's debug_info) and the jit_p "
            "rules _pjit_linearize/_pjit_transpose_fancy/_pjit_batcher on its stack",
            "compiles made by jax.grad or jax.vmap of a jitted function are not tied to it or labelled with "
            "their transformation",
        ),
        Capability(
            "config_states",
            "jax._src.config.trace_context_names/trace_context (the config states in jit's cache key)",
            "a recompile caused by a jax config change (jax_enable_x64, matmul precision...) is not named",
        ),
        Capability(
            "jit_trace_cache",
            "jax._src.pjit._infer_params_cached.cache_keys() (the traces jit holds)",
            "a watch() entered late cannot say what changed since the traces made before it",
        ),
        Capability(
            "flax_nnx_static_fields",
            "a flax nnx module's _pytree__nodes",
            "static attributes of nnx modules are not named in recompile causes",
        ),
    )
}


def available(name: str) -> bool:
    """Whether capability ``name`` works on the JAX (and libraries) of this process."""
    return _PROBES[name]() is not None


def missing() -> list[str]:
    """The names of the capabilities this process lacks (libraries not installed count as missing)."""
    return [name for name in CAPABILITIES if not available(name)]


def warn_lost(name: str) -> None:
    """Say once per process that capability ``name`` is missing and what that costs.

    Never raises, even under ``-W error``: a problem of jaxdiag's must not fail the call.
    """
    import jax

    cap = CAPABILITIES[name]
    warn_once(f"lost:{name}", f"jaxdiag: {cap.lost} (JAX {jax.__version__} lacks {cap.reads})", stacklevel=3)


# --- probes: each returns what it found, or None -------------------------------------


@functools.cache
def stage_start_events() -> Callable[..., Any] | None:
    """``jax.monitoring.register_scalar_listener``: a compile stage's start (JAX 0.6.1 on)."""
    from jax import monitoring

    return getattr(monitoring, "register_scalar_listener", None)


@functools.cache
def jit_call_frame() -> types.CodeType | None:
    """The code of ``cache_miss``, jit's Python fallback: its frame holds the call being compiled."""
    try:
        from jax._src import pjit

        for const in pjit._cpp_pjit.__code__.co_consts:
            if (
                isinstance(const, types.CodeType)
                and const.co_name == "cache_miss"
                and {"fun", "jit_info"} <= set(const.co_freevars)
                and {"args", "kwargs"} <= set(const.co_varnames)
            ):
                return const
    except Exception:
        pass
    return None


@functools.cache
def aot_entry_points() -> frozenset[types.CodeType] | None:
    """Codes of the AOT entry points (``.trace``, ``.lower``, ``.compile``...): their compiles are no calls'."""
    import inspect

    try:
        from jax._src import pjit, stages
    except Exception:
        return None
    found: set[types.CodeType] = set()
    for owner, name in (
        (pjit, "jit_trace"),
        (pjit, "jit_lower"),
        (pjit, "jit_eval_shape"),
        (stages.Lowered, "compile"),
        (stages.Traced, "lower"),
    ):
        fn = inspect.unwrap(getattr(owner, name, None) or (lambda: None))
        if getattr(fn, "__code__", None) is not None:
            found.add(fn.__code__)
    return frozenset(found) or None


@functools.cache
def compiled_executable() -> tuple[str, str] | None:
    """``(name, file)`` of the function whose frame assigns ``xla_executable`` on a compile."""
    try:
        from jax._src.interpreters import pxla
    except Exception:
        return None
    if not hasattr(pxla, "_cached_compilation"):  # behind a C++ cache: no code object to hold
        return None
    return ("_cached_compilation", pxla.__file__.removesuffix("c"))


@functools.cache
def stage_exceptions() -> types.CodeType | None:
    """The ``__exit__`` that times each compile stage; its ``exc_type`` says whether the stage raised."""
    try:
        from jax._src import dispatch

        return dispatch.LogElapsedTimeContextManager.__exit__.__code__
    except Exception:
        return None


@functools.cache
def traceback_exclusion() -> tuple[Callable[[str], None], Callable[[str], None]] | None:
    """JAX's ``register_exclusion`` of filtered tracebacks and of source locations."""
    try:
        from jax._src import source_info_util, traceback_util

        return traceback_util.register_exclusion, source_info_util.register_exclusion
    except Exception:
        return None


#: Modules whose ``pmap`` jits a ``shard_map`` of the user's function (JAX 0.8: shard_map; 0.9 on: pmap).
_PMAP_MODULES = ("jax._src.pmap", "jax._src.shard_map")


@functools.cache
def pmap_call_frame() -> frozenset[types.CodeType] | None:
    """The codes of ``jax.pmap``'s ``wrapped``: its frame holds the user's function and arguments."""
    import inspect

    found = set()
    for name in _PMAP_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:
            continue
        fn = inspect.unwrap(getattr(module, "pmap", None) or (lambda: None))
        for code in _nested_codes(getattr(fn, "__code__", None)):
            if code.co_name == "wrapped" and "infer_params" in code.co_freevars:
                found.add(code)
    return frozenset(found) or None


@functools.cache
def jit_info_fields() -> tuple[str, ...] | None:
    """The ``PjitInfo`` fields read from a jit call's frame."""
    try:
        from jax._src import pjit
    except Exception:
        return None
    fields = set(getattr(getattr(pjit, "PjitInfo", None), "_fields", ()))
    wanted = ("static_argnums", "static_argnames", "in_shardings_leaves", "out_shardings_leaves")
    return wanted if set(wanted) <= fields else None


@functools.cache
def output_shardings() -> Callable[[Any], Any] | None:
    """``HloSharding.from_proto``, to read a compiled executable's output shardings."""
    try:
        from jaxlib import xla_client

        return xla_client.HloSharding.from_proto
    except Exception:
        return None


@functools.cache
def xspace_reader() -> Callable[[bytes], Any] | None:
    """``ProfileData.from_serialized_xspace`` (jaxlib 0.7 on); imports in milliseconds, without jax."""
    try:
        profile_data = importlib.import_module("jaxlib._profile_data")

        return profile_data.ProfileData.from_serialized_xspace
    except Exception:
        return None


@functools.cache
def xspace_reader_raises() -> bool | None:
    """Whether the XSpace reader raises on corrupt data instead of aborting the process.

    Asked once per process, of a child process: older jaxlib aborts (a failed ``CHECK``).
    """
    reader = xspace_reader()
    if reader is None:
        return None
    return True if _parses_in_child(reader, b"", corrupt=True) else None


#: A plane record, then bytes that are no field: every protobuf parser rejects it.
_CORRUPT_XSPACE = b"\x0a\x05\x12\x03abc\xff\xff"


@functools.cache
def profile_options() -> type | None:
    """``jax.profiler.ProfileOptions`` (Python tracer level, session id...)."""
    import jax

    return getattr(jax.profiler, "ProfileOptions", None)


@functools.cache
def equinox_jit_frame() -> types.CodeType | None:
    """The code of ``equinox._jit._call``, whose locals hold the user's function and arguments."""
    try:
        from equinox import _jit
    except Exception:
        return None
    code = getattr(getattr(_jit, "_call", None), "__code__", None)
    if code is not None and {"jit_wrapper", "args", "kwargs"} <= set(code.co_varnames):
        return code
    return None


@functools.cache
def flax_nnx_jit_frame() -> frozenset[types.CodeType] | None:
    """The codes of nnx.jit's ``__call__`` methods (flax 0.12 on, modules being pytrees)."""
    try:
        from flax import nnx
        from flax.nnx.transforms import compilation
    except Exception:
        return None
    if not hasattr(nnx, "Pytree"):
        return None
    found = set()
    for value in vars(compilation).values():
        code = getattr(vars(value).get("__call__") if isinstance(value, type) else None, "__code__", None)
        if (
            isinstance(value, type)
            and code is not None
            and code.co_filename == compilation.__file__
            and "args" in code.co_varnames
            and "jitted_fn" in code.co_names
        ):
            found.add(code)
    return frozenset(found) or None


@functools.cache
def flax_nnx_static_fields() -> str | None:
    """The attribute of an nnx module that says which attributes are pytree nodes."""
    try:
        from flax import nnx

        class _Probe(nnx.Module):
            def __init__(self) -> None:
                self.static = "x"

        flags = vars(_Probe()).get("_pytree__nodes")
        return "_pytree__nodes" if isinstance(flags, Mapping) and flags.get("static") is False else None
    except Exception:
        return None


@functools.cache
def distributed_state() -> Any:
    """``jax._src.distributed.global_state``: the holder of ``jax.distributed``'s client."""
    try:
        from jax._src import distributed

        state = distributed.global_state
    except Exception:
        return None
    return state if hasattr(state, "client") else None


@functools.cache
def transformed_compiles() -> types.CodeType | None:
    """The code of ``call_impl_cache_miss``, where a transformed ``jit_p`` compiles, when the rules
    that say which transformation bound it are there too (``transforms.transform_rules``)."""
    from jaxdiag.jax_internals import transforms

    code = transforms.impl_cache_miss_code()
    return code if code is not None and transforms.transform_rules() is not None else None


@functools.cache
def config_states() -> tuple[str, ...] | None:
    """The names of the config states in jit's cache key (JAX 0.9 on names them)."""
    from jaxdiag.jax_internals import transforms

    state = transforms.config_state()
    return tuple(state) if state else None


@functools.cache
def jit_trace_cache() -> Callable[[], Any] | None:
    """``cache_keys`` of jit's trace cache."""
    from jaxdiag.jax_internals import transforms

    return transforms.jit_trace_cache()


_PROBES: dict[str, Callable[[], Any]] = {name: globals()[name] for name in CAPABILITIES}


def distributed_client() -> Any:
    """The ``jax.distributed`` key-value client of this process, or ``None`` (not initialized, or no such state)."""
    state = distributed_state()
    return getattr(state, "client", None) if state is not None else None


# --- reads -----------------------------------------------------------------------------


def jit_call(frame: types.FrameType) -> tuple[Any, tuple[Any, ...], dict[str, Any], Any]:
    """``(fun, args, kwargs, jit_info)`` of a ``jit_call_frame`` frame."""
    local = frame.f_locals
    return local.get("fun"), tuple(local.get("args", ())), dict(local.get("kwargs", {})), local.get("jit_info")


def jit_info_of(frame: types.FrameType | None) -> Any:
    """The ``PjitInfo`` of a ``jit_call_frame`` frame (``None`` without one)."""
    return frame.f_locals.get("jit_info") if frame is not None else None


def jit_static(jit_info: Any) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """``(static_argnums, static_argnames)`` of a ``PjitInfo``."""
    return (tuple(getattr(jit_info, "static_argnums", ()) or ()), tuple(getattr(jit_info, "static_argnames", ()) or ()))


def jit_shardings(jit_info: Any) -> tuple[list[Any], list[Any]]:
    """The ``in_shardings`` and ``out_shardings`` leaves given to jit (``UnspecifiedValue`` where not)."""
    return (
        list(getattr(jit_info, "in_shardings_leaves", ()) or ()),
        list(getattr(jit_info, "out_shardings_leaves", ()) or ()),
    )


def executable_in(frames: Iterable[types.FrameType]) -> Any:
    """The executable just compiled, from the frame that assigned it (the event fires on exit)."""
    where = compiled_executable()
    if where is None:
        return None
    name, filename = where
    return next(
        (
            f.f_locals.get("xla_executable")
            for f in frames
            if f.f_code.co_name == name and f.f_code.co_filename == filename
        ),
        None,
    )


def stage_raised(frames: Iterable[types.FrameType]) -> bool:
    """Whether the compile stage whose duration is being reported ended in an exception.

    JAX reports a stage's duration from the ``__exit__`` of the ``with`` that times
    it, whether or not the stage raised; that frame's ``exc_type`` says which.
    """
    code = stage_exceptions()
    for frame in frames if code is not None else ():
        if frame.f_code is code:
            return frame.f_locals.get("exc_type") is not None
    return False


def pmap_call(frame: types.FrameType) -> tuple[Any, tuple[Any, ...], dict[str, Any], tuple[int, ...]] | None:
    """``(fun, args, kwargs, static_broadcasted_argnums)`` if ``frame`` is ``jax.pmap``'s dispatch.

    pmap jits a ``shard_map`` of its own wrapper of the user's function, so the
    ``cache_miss`` frame shows JAX's function and flat arguments; the user's are here.
    """
    if frame.f_code.co_name != "wrapped" or frame.f_globals.get("__name__") not in _PMAP_MODULES:
        return None
    try:
        local = frame.f_locals
        infer = local["infer_params"]
        cells = dict(zip(infer.__code__.co_freevars, (c.cell_contents for c in infer.__closure__)))
        fun = cells["wrapped_fun"].f if "wrapped_fun" in cells else cells["f"]
        return fun, tuple(local["args"]), dict(local["kwargs"]), tuple(cells["static_broadcasted_tuple"])
    except Exception:  # another JAX: the record keeps JAX's own view of the call
        return None


def hide_frames(filename: str) -> bool:
    """Leave ``filename``'s frames out of JAX's filtered tracebacks and source locations."""
    register = traceback_exclusion()
    if register is None:
        return False
    for fn in register:
        fn(filename)
    return True


def read_output_shardings(executable: Any) -> list[str] | None:
    """The text of each output sharding of a compiled executable (``None``: unknown)."""
    protos = executable.get_output_shardings()
    from_proto = output_shardings()
    if not protos or from_proto is None:
        return None
    return [str(from_proto(p)) for p in protos]


def read_parameter_shardings(executable: Any) -> list[str] | None:
    """The text of each entry parameter's sharding of a compiled executable, by parameter number (``None``: unknown)."""
    get = getattr(executable, "get_parameter_shardings", None)
    protos = get() if get is not None else None
    from_proto = output_shardings()
    if not protos or from_proto is None:
        return None
    return [str(from_proto(p)) for p in protos]


#: ``HloModuleProto.id`` in XLA's ``hlo.proto``: the id the profiler puts on each of the
#: program's ops as the ``program_id`` stat.
_HLO_MODULE_ID_FIELD = 5


def program_id(executable: Any) -> int | None:
    """The id of a loaded executable's program, as the trace's ``program_id`` stat gives it (``None``: unknown).

    Read from the first HLO module's serialized proto by walking its top-level fields
    (no generated XLA classes are needed); any failure gives ``None``.
    """
    try:
        data = executable.hlo_modules()[0].as_serialized_hlo_module_proto()
        found = _varint_field(bytes(data), _HLO_MODULE_ID_FIELD)
        return None if found is None else found & (2**63 - 1)  # as the trace reader keeps it
    except Exception:
        return None


def _varint_field(data: bytes, number: int) -> int | None:
    """The value of top-level varint field ``number`` of a serialized protobuf message, if present."""
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
            if field == number:
                return value
        elif wire == 2:
            length = varint()  # read before ``at`` is: the read moves it
            at += length
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:  # groups are not used by this message: stop rather than guess
            return None
    return None


def parse_xspace(data: bytes, source: str) -> list[Any]:
    """The planes of a serialized XSpace (``ProfileData`` planes).

    Raises:
      TraceFormatError: the protobuf parser rejects the data, or this jaxlib has no reader.
    """
    reader = xspace_reader()
    if reader is None:
        raise TraceFormatError(
            f"{source}: {CAPABILITIES['xspace_reader'].lost}: it lacks "
            f"{CAPABILITIES['xspace_reader'].reads}; install jaxlib>=0.8"
        )
    if xspace_reader_raises() is None and not _parses_in_child(reader, data):
        raise TraceFormatError(f"{source}: corrupt XSpace, the protobuf parser rejected it")
    with _parser_log_held() as held:
        try:
            return list(reader(data).planes)
        except RuntimeError as exc:
            held.drop_parser_lines = True
            raise TraceFormatError(f"{source}: corrupt XSpace, the protobuf parser rejected it ({exc})") from None


#: Lines the C++ protobuf parser and absl log to stderr on their own (``E0000 00:00:... wire_format_lite.cc``).
_PARSER_LOG_LINE = re.compile(rb"^(WARNING: All log messages before absl|[EWIF]\d{4} \d\d:\d\d:|\[libprotobuf )")


class _HeldLog:
    drop_parser_lines = False


@contextlib.contextmanager
def _parser_log_held() -> Iterator[_HeldLog]:
    """Hold what is written to file descriptor 2 while the C++ parser runs, then write it out.

    When the parser rejects the data, its own log lines ("String field ... contains
    invalid UTF-8") are dropped: the error raised says it in one line. Anything else
    written meanwhile is written out as it came.
    """
    import tempfile

    held = _HeldLog()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield held
        return
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield held
            finally:
                os.dup2(saved, 2)
                sink.seek(0)
                lines = sink.read().splitlines(keepends=True)
                if held.drop_parser_lines:
                    lines = [line for line in lines if not _PARSER_LOG_LINE.match(line)]
                if lines:
                    os.write(2, b"".join(lines))
    finally:
        os.close(saved)


def _parses_in_child(reader: Callable[[bytes], Any], data: bytes, *, corrupt: bool = False) -> bool:
    """Whether ``reader(data)`` returns in a child process (an aborting reader kills only the child).

    A forked child where jax is not imported (reading a trace); with jax running (it is
    multithreaded, so a fork may deadlock), or where no fork can be had, a fresh
    interpreter given the data on stdin. ``corrupt`` asks instead whether ``reader``
    raises on ``_CORRUPT_XSPACE``.
    """
    import os
    import sys

    if "jax" in sys.modules or not hasattr(os, "fork"):
        return _parses_in_interpreter(data, corrupt=corrupt)
    try:
        pid = os.fork()
    except OSError:
        return _parses_in_interpreter(data, corrupt=corrupt)
    if pid == 0:  # the child
        status = 1
        try:
            # An aborting reader prints its failed CHECK and a stack: the user's one line is ours.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            try:
                reader(_CORRUPT_XSPACE if corrupt else data)
            except RuntimeError:
                if not corrupt:
                    raise
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _parses_in_interpreter(data: bytes, *, corrupt: bool) -> bool:
    import subprocess
    import sys

    parse = "p.ProfileData.from_serialized_xspace(sys.stdin.buffer.read())"
    script = "import sys\nfrom jaxlib import _profile_data as p\n" + (
        f"try: {parse}\nexcept RuntimeError: pass" if corrupt else parse
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], input=_CORRUPT_XSPACE if corrupt else data, capture_output=True
        )
    except OSError:  # no process at all: trust the reader
        return True
    return done.returncode == 0


def equinox_call(local: Mapping[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """``(fun, args, kwargs)`` from the locals of ``equinox._jit._call``."""
    return local["jit_wrapper"].__wrapped__, tuple(local["args"]), dict(local["kwargs"])


def flax_nnx_call(local: Mapping[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """``(fun, args, kwargs)`` from the locals of nnx.jit's ``__call__`` (``None``: not readable)."""
    wrapped: Any = local.get("self")
    if getattr(wrapped, "jitted_fn", None) is None or "args" not in local:
        return None
    if flax_nnx_jit_frame() is None:  # modules are pytrees from flax 0.12
        return None
    return wrapped.fun, tuple(local["args"]), dict(local["kwargs"])


def nnx_node_flags(state: Mapping[str, Any]) -> Mapping[str, bool] | None:
    """An nnx module's attribute -> is-a-pytree-node map, from its ``__dict__`` (``None``: not nnx)."""
    flags = state.get("_pytree__nodes")
    return flags if isinstance(flags, Mapping) else None


def _nested_codes(code: types.CodeType | None) -> Iterable[types.CodeType]:
    for const in code.co_consts if code is not None else ():
        if isinstance(const, types.CodeType):
            yield const
            yield from _nested_codes(const)
