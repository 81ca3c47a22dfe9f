"""Read a host plane (``/host:CPU``): which thread is which, and what each host event is.

How host events are categorised (``CATEGORIES`` in ``frames.py``):

* ``python``: Python-tracer frames, names starting with ``$``; dropped unless asked for.
* ``device``: on a trace without accelerator planes, host events carrying both
  ``hlo_op`` and ``hlo_module`` stats: XLA:CPU executing a program.
* ``runtime``: every event on a runtime thread pool (``tf_*``, ``pjrt_*``,
  ``name/<id>`` lines); on other threads, events nested inside a runtime event or
  a framework span, C++ TraceMe names (``::``, CUDA driver calls, known PjRt/JAX
  names), and events carrying C++ source or flow stats (``_src``, ``_c``, ``_p``, ...).
* ``annotation``: what remains on the Python threads: framework spans such as
  ``PjitFunction(step)``, ``StepTraceAnnotation`` events (``step_num`` stat) and
  user ``TraceAnnotation`` spans.

The Python tracer's frames are most of a default capture's events, so the loops
here touch nothing of an event but its name until they know it is kept.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable

from jaxdiag.trace.columns import HostColumns

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.prepared import PreparedSpace, ThreadEvents

HOST_PLANE = "/host:CPU"
_POOL_THREAD = re.compile(r"^(tf_|pjrt|py_xla|Host Threads|XLA|xla)|/-?\d+$")
#: The Python main thread where the runtime names threads ``name/tid`` (TPU: ``main/3116817``).
_MAIN_THREAD = re.compile(r"^(main|python\d*|MainThread)/-?\d+$")
_FRAMEWORK_SPAN = re.compile(r"^[A-Za-z]+Function\(")
_CUDA_CALL = re.compile(r"^(cu[A-Z]|cuda[A-Z]|nccl|rccl|hip[A-Z])")
_RUNTIME_NAMES = frozenset(
    {
        "Wait for donation holds",
        "Wait for usage holds",
        "MemoryAllocation",
        "MemoryDeallocation",
        "np.asarray(jax.Array)",
        "ParseArguments",
        "DevicePut",
        "DevicePutWithSharding",
        "shard_args",
        "lower_sharding_computation",
        "backend_compile",
        "backend_compile_and_load",
        "ExecuteReplicated.__call__",
        "D2H Copy From Staging Buffer",
        "BUFFER_FLUSH",
        "<UNKNOWN>",
        "",
    }
)
_SOURCE_STATS = frozenset({"_src", "_c", "_ct", "_p", "_pt"})
#: The stats read of a Python thread's events on a host with accelerators (``_top_level_category``).
PYTHON_THREAD_STATS = _SOURCE_STATS | {"step_num", "group_id"}


def line_names(lines: Iterable[Any]) -> Iterable[tuple[str, Any]]:
    """Each line with a name unique in its plane: threads can share a name (two ``python3``)."""
    lines = list(lines)
    return zip(unique_labels([line.name for line in lines]), lines)


def unique_labels(names: Iterable[str]) -> list[str]:
    """Line names made unique in their plane: the second ``python3`` is ``python3 (2)``."""
    seen: dict[str, int] = {}
    labels = []
    for name in names:
        count = seen[name] = seen.get(name, 0) + 1
        labels.append(name if count == 1 else f"{name} ({count})")
    return labels


def stats_of(event: Any) -> dict[str, Any]:
    """An event's stats as a dict, skipping entries whose metadata is missing."""
    return {k: v for k, v in event.stats if k is not None}


def read_host_plane(
    cols: HostColumns, plane: Any, *, cpu_only: bool, include_python: bool, prepared: "PreparedSpace | None" = None
) -> None:
    """Append the events of every thread of ``plane`` (``cpu_only``: a host without accelerators).

    ``prepared``: what ``prepared.prepare`` already read of the plane's threads, by line index.
    """
    no_hlo: set[str] = set()  # names seen without hlo stats: not XLA:CPU ops, skip their stats
    for index, (label, line) in enumerate(line_names(plane.lines)):
        read_host_line(
            cols,
            line,
            label,
            cpu_only=cpu_only,
            include_python=include_python,
            no_hlo=no_hlo,
            dropped=prepared.dropped.get(index, 0) if prepared else 0,
            read=prepared.threads.get(index) if prepared else None,
        )


def is_runtime_thread(name: str) -> bool:
    """Whether a host thread is one of the runtime's pools (``tf_*``, ``pjrt*``, ``name/<id>``), not a Python thread."""
    return _POOL_THREAD.search(name) is not None and not _MAIN_THREAD.match(name)


def read_host_line(
    cols: HostColumns,
    line: Any,
    label: str,
    *,
    cpu_only: bool,
    include_python: bool,
    no_hlo: set[str],
    dropped: int = 0,
    read: "ThreadEvents | None" = None,
) -> None:
    """Append the events of one thread, as line ``label`` (its name, unique in the plane).

    ``no_hlo`` holds names already seen without XLA:CPU op stats; a plane's threads share it.
    ``dropped`` and ``read``: what ``prepared.prepare`` read of the thread (its Python
    frames cut out of the bytes; its events read, and cut out too).
    """
    first = len(cols.name)
    cols.python_frames += dropped
    pool = is_runtime_thread(line.name)
    if pool and not cpu_only and not include_python:
        if read is None:
            _read_runtime_line(cols, line, label, first)
            return
        cols.python_frames += read.frames
        cols.add_host_events(read.names, read.starts, read.durs, "runtime")
        cols.close_segment(HOST_PLANE, label, "host", first)
        return
    if read is not None and read.stats is not None and not pool and not cpu_only and not include_python:
        cols.python_frames += read.frames
        _read_main_events(cols, list(zip(read.starts, read.durs, read.names, read.stats)), cpu_only, no_hlo)
        cols.close_segment(HOST_PLANE, label, "python" if read.frames + dropped else "host", first)
        return
    kept: list[tuple[str, Any]] = []
    keep = kept.append
    python: list[tuple[str, float, float]] = []
    seen = -1
    # The hot loop: a Python-traced run has ~1M frames here, so touch nothing but the name,
    # and keep no frame objects alive (a million live wrappers slow everything down).
    if include_python:
        for seen, e in enumerate(line.events):
            name = e.name
            if name[:1] == "$":
                python.append((name, e.start_ns, e.duration_ns))
            else:
                keep((name, e))
    else:
        for seen, e in enumerate(line.events):
            name = e.name
            if name[:1] != "$":
                keep((name, e))
    frames = seen + 1 - len(kept)
    cols.python_frames += frames
    frames += dropped
    if pool:
        ops = _read_pool_events(cols, kept, cpu_only, no_hlo)
        kind = "xla_cpu" if ops else "host"
    else:
        _read_main_events(cols, [(e.start_ns, e.duration_ns, name, e) for name, e in kept], cpu_only, no_hlo)
        kind = "python" if frames else "host"
    if python:
        names, starts, durs = zip(*python)
        cols.add_host_events(list(names), list(starts), list(durs), "python")
    cols.close_segment(HOST_PLANE, label, kind, first)


def _read_runtime_line(cols: HostColumns, line: Any, label: str, first: int) -> None:
    """A runtime thread of an accelerated host: every event but Python frames is a runtime event.

    One pass, keeping no event objects: these threads hold most of the events kept.
    """
    names: list[str] = []
    starts: list[float] = []
    durs: list[float] = []
    frames = 0
    for e in line.events:
        name = e.name
        if name[:1] != "$":
            names.append(name)
            starts.append(e.start_ns)
            durs.append(e.duration_ns)
        else:
            frames += 1
    cols.python_frames += frames
    cols.add_host_events(names, starts, durs, "runtime")
    cols.close_segment(HOST_PLANE, label, "host", first)


def _read_pool_events(cols: HostColumns, kept: list[tuple[str, Any]], cpu_only: bool, no_hlo: set[str]) -> int:
    """Runtime-thread events: XLA:CPU ops on CPU-only traces, else runtime. Returns the op count."""
    if not cpu_only:
        cols.add_host_events(
            [n for n, _ in kept], [e.start_ns for _, e in kept], [e.duration_ns for _, e in kept], "runtime"
        )
        return 0
    ops = 0
    for name, e in kept:
        if name not in no_hlo and _add_cpu_op(cols, name, e, no_hlo):
            ops += 1
        else:
            cols.add(-1, name, e.start_ns, e.duration_ns)
    return ops


def _read_main_events(
    cols: HostColumns, rows: list[tuple[float, float, str, Any]], cpu_only: bool, no_hlo: set[str]
) -> None:
    """Python-thread events ``(start, duration, name, event)``, categorised by what encloses them (see the module
    docstring); ``event``: the reader's, or its ``PYTHON_THREAD_STATS`` as read from the bytes."""
    rows.sort(key=lambda r: (r[0], -r[1]))
    open_spans: list[tuple[float, bool]] = []  # (end, inside runtime or framework)
    kinds: dict[str, int] = {}  # by name: 1 a runtime name, 2 a framework span, 0 neither
    names: list[str] = []
    starts: list[float] = []
    durs: list[float] = []
    categories: list[str] = []
    for start, dur, name, e in rows:
        while open_spans and open_spans[-1][0] <= start:
            open_spans.pop()
        opaque = bool(open_spans) and open_spans[-1][1]
        kind = kinds.get(name)
        if kind is None:
            runtime = name in _RUNTIME_NAMES or "::" in name or _CUDA_CALL.match(name)
            kind = kinds[name] = 1 if runtime else 2 if _FRAMEWORK_SPAN.match(name) else 0
        if cpu_only and name not in no_hlo:
            cols.add_host_events(names, starts, durs, categories)  # the events before it, in order
            names, starts, durs, categories = [], [], [], []
            is_op = _add_cpu_op(cols, name, e, no_hlo)
        else:
            is_op = False
        if is_op:
            category = "device"
        elif opaque or kind == 1:
            category = "runtime"
        elif kind == 2:
            category = "annotation"
        else:
            category = _top_level_category(cols, name, e, start, dur)
        if not is_op:
            names.append(name)
            starts.append(start)
            durs.append(dur)
            categories.append(category)
        open_spans.append((start + dur, opaque or category != "annotation" or kind == 2))
    cols.add_host_events(names, starts, durs, categories)


def _top_level_category(cols: HostColumns, name: str, e: Any, start: float, dur: float) -> str:
    stats = e if isinstance(e, dict) else stats_of(e)
    step = stats.get("step_num", stats.get("group_id"))
    if step is not None:
        cols.step_marks.append((name, int_or(step, -1), start, start + dur))
        return "annotation"
    return "runtime" if _SOURCE_STATS.intersection(stats) else "annotation"


def _add_cpu_op(cols: HostColumns, name: str, e: Any, no_hlo: set[str]) -> bool:
    """Append ``e`` as an XLA:CPU op if its stats say it is one; remember names that are not."""
    stats = stats_of(e)
    if "hlo_op" not in stats or "hlo_module" not in stats:
        no_hlo.add(name)
        return False
    cols.add(
        int_or(stats.get("device_ordinal", 0), 0),
        name,
        e.start_ns,
        e.duration_ns,
        str(stats["hlo_module"]),
        str(stats["hlo_op"]),
        "",
        program_id_of(stats.get("program_id")),
        "device",
        execution_id(run_id_of(stats.get("run_id")), program_id_of(stats.get("program_id"))),
    )
    return True


def execution_id(run: int, program: int) -> int:
    """One id per execution: XLA:CPU numbers runs per client, and JAX 0.8 starts a recompiled
    program's run ids where the previous program's began, so a run id alone can name two
    executions of two programs. Mixed with the program id (a multiplicative hash), it names one."""
    if run < 0 or program < 0:
        return run
    return (run ^ (program * 0x9E3779B97F4A7C15)) & _INT63


def program_id_of(value: Any) -> int:
    """A program id or fingerprint as a non-negative int64, or -1 when absent or not a number.

    TPU runtimes write program ids and module fingerprints as unsigned 64-bit
    numbers (half of them past the int64 range); those keep their low 63 bits,
    which tells programs apart as well (they are hashes) and leaves -1 for "unknown".
    """
    number = int_or(value, -1)
    return number & _INT63 if number >= 0 else -1


_INT63 = (1 << 63) - 1


def run_id_of(value: Any) -> int:
    """An execution's run id as a non-negative int64, or -1 when absent: XLA:CPU writes them signed
    (half are negative), so each keeps its low 63 bits, which tell the executions of a trace apart."""
    try:
        return int(value) & _INT63
    except (TypeError, ValueError):
        return -1


def int_or(value: Any, default: int) -> int:
    """``int(value)``, or ``default`` when it is not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
