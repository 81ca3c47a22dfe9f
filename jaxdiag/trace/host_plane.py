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

The Python tracer's frames are most of a default capture's events: the reader leaves them
out unless they are asked for (``include_python``), and reads only the stats named here
(``host_line_stats``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable

from jaxdiag.trace.columns import HostColumns

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.contract import LineColumns, PlaneColumns

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
#: The stats read of a Python thread's events (``_top_level_category``).
PYTHON_THREAD_STATS = _SOURCE_STATS | {"step_num", "group_id"}
#: The stats of a Python thread's calls that launch device work and run programs, on a host with accelerators
#: (``launch.link_kernels``).
LAUNCH_STATS = frozenset({"correlation_id", "run_id"})
#: The stats that make a host event an XLA:CPU op, on a host without accelerators (``_add_cpu_op``).
CPU_OP_STATS = frozenset({"hlo_op", "hlo_module", "device_ordinal", "program_id", "run_id"})


def unique_labels(names: Iterable[str]) -> list[str]:
    """Line names made unique in their plane: the second ``python3`` is ``python3 (2)``."""
    seen: dict[str, int] = {}
    labels = []
    for name in names:
        count = seen[name] = seen.get(name, 0) + 1
        labels.append(name if count == 1 else f"{name} ({count})")
    return labels


def host_line_stats(line: str, accelerated: bool) -> frozenset[str]:
    """The stats ``read_host_line`` reads of a host thread's events (``accelerated``: the host has devices)."""
    if is_runtime_thread(line):  # a pool's events are ops or runtime, whatever else they carry
        return frozenset() if accelerated else CPU_OP_STATS
    return PYTHON_THREAD_STATS | (LAUNCH_STATS if accelerated else CPU_OP_STATS)


def read_host_plane(cols: HostColumns, plane: "PlaneColumns", *, cpu_only: bool, include_python: bool) -> None:
    """Append the events of every thread of ``plane`` (``cpu_only``: a host without accelerators)."""
    no_hlo: set[str] = set()  # names seen without hlo stats: not XLA:CPU ops, skip their stats
    labels = unique_labels(line.name for line in plane.lines)
    for label, line in zip(labels, plane.lines):
        read_host_line(cols, line, label, cpu_only=cpu_only, include_python=include_python, no_hlo=no_hlo)


def is_runtime_thread(name: str) -> bool:
    """Whether a host thread is one of the runtime's pools (``tf_*``, ``pjrt*``, ``name/<id>``), not a Python thread."""
    return _POOL_THREAD.search(name) is not None and not _MAIN_THREAD.match(name)


def read_host_line(
    cols: HostColumns, line: "LineColumns", label: str, *, cpu_only: bool, include_python: bool, no_hlo: set[str]
) -> None:
    """Append the events of one thread, as line ``label`` (its name, unique in the plane).

    ``no_hlo`` holds names already seen without XLA:CPU op stats; a plane's threads share it.
    The line's Python frames were left out by the reader (``line.frames``) unless ``include_python``.
    """
    first = len(cols.name)
    names, starts, durs, stats = line.names, line.starts, line.durs, line.stats
    python: list[int] = []
    if include_python:  # the frames are among the events: split them off
        kept = [i for i, name in enumerate(names) if name[:1] != "$"]
        if len(kept) < len(names):
            python = [i for i, name in enumerate(names) if name[:1] == "$"]
            names, starts, durs, stats = (
                [names[i] for i in kept],
                [starts[i] for i in kept],
                [durs[i] for i in kept],
                [stats[i] for i in kept],
            )
    frames = line.frames + len(python)
    cols.python_frames += frames
    if is_runtime_thread(line.name):
        ops = 0
        if cpu_only:
            ops = _read_pool_events(cols, names, starts, durs, stats, no_hlo)
        else:
            cols.add_events(names, starts, durs, "runtime")
        kind = "xla_cpu" if ops else "host"
    else:
        _read_main_events(cols, starts, durs, names, stats, cpu_only, no_hlo)
        if not cpu_only:
            _read_launches(cols, label, starts, durs, stats)
        kind = "python" if frames else "host"
    if python:
        cols.add_events(
            [line.names[i] for i in python], [line.starts[i] for i in python], [line.durs[i] for i in python], "python"
        )
    cols.close_segment(HOST_PLANE, label, kind, first)


def _read_launches(
    cols: HostColumns, label: str, starts: list[float], durs: list[float], stats: list[dict[str, Any]]
) -> None:
    """Note the thread's calls that launched device work (a ``correlation_id``) and its executions of programs
    (a ``run_id``), for ``launch.link_kernels``."""
    for start, dur, event_stats in zip(starts, durs, stats):
        if not event_stats:
            continue
        correlation = int_or(event_stats.get("correlation_id"), -1)
        if correlation >= 0:
            cols.launches.append((correlation, start, label))
        run = event_stats.get("run_id")
        if run is not None and run_id_of(run) >= 0:
            cols.executes.append((start, start + dur, label, run_id_of(run)))


def _read_pool_events(
    cols: HostColumns,
    names: list[str],
    starts: list[float],
    durs: list[float],
    stats: list[dict[str, Any]],
    no_hlo: set[str],
) -> int:
    """A runtime thread's events on a host without accelerators: XLA:CPU ops, else runtime. Returns the op count."""
    is_op = _cpu_ops(names, stats, no_hlo)
    ops = sum(is_op)
    if ops:
        _add_with_op_stats(cols, names, starts, durs, stats, is_op, "runtime")
    else:
        cols.add_events(names, starts, durs, "runtime")
    return ops


def _read_main_events(
    cols: HostColumns,
    starts: list[float],
    durs: list[float],
    names: list[str],
    stats: list[dict[str, Any]],
    cpu_only: bool,
    no_hlo: set[str],
) -> None:
    """A Python thread's events, categorised by what encloses them (see the module docstring)."""
    starts, durs, names, stats = _outer_first(starts, durs, names, stats)
    is_op = _cpu_ops(names, stats, no_hlo) if cpu_only else [False] * len(names)
    open_spans: list[tuple[float, bool]] = []  # (end, inside runtime or framework)
    kinds: dict[str, int] = {}  # by name: 1 a runtime name, 2 a framework span, 0 neither
    categories: list[str] = []
    for start, dur, name, event_stats, op in zip(starts, durs, names, stats, is_op):
        while open_spans and open_spans[-1][0] <= start:
            open_spans.pop()
        opaque = bool(open_spans) and open_spans[-1][1]
        kind = kinds.get(name)
        if kind is None:
            runtime = name in _RUNTIME_NAMES or "::" in name or _CUDA_CALL.match(name)
            kind = kinds[name] = 1 if runtime else 2 if _FRAMEWORK_SPAN.match(name) else 0
        if op:
            category = "device"
        elif opaque or kind == 1:
            category = "runtime"
        elif kind == 2:
            category = "annotation"
        else:
            category = _top_level_category(cols, name, event_stats, start, dur)
        categories.append(category)
        open_spans.append((start + dur, opaque or category != "annotation" or kind == 2))
    if any(is_op):
        _add_with_op_stats(cols, names, starts, durs, stats, is_op, categories)
    else:
        cols.add_events(names, starts, durs, categories)


def _outer_first(
    starts: list[float], durs: list[float], names: list[str], stats: list[dict[str, Any]]
) -> tuple[list[float], list[float], list[str], list[dict[str, Any]]]:
    """The events by start, the longer of two that start together first (an enclosing span before what it
    encloses); events equal in both stay in their order. A line is most often in that order already."""
    import numpy as np

    order = np.lexsort((-np.asarray(durs, dtype=np.float64), np.asarray(starts, dtype=np.float64)))
    if (order[1:] < order[:-1]).any():
        at = order.tolist()
        return [starts[i] for i in at], [durs[i] for i in at], [names[i] for i in at], [stats[i] for i in at]
    return starts, durs, names, stats


def _top_level_category(cols: HostColumns, name: str, stats: dict[str, Any], start: float, dur: float) -> str:
    step = stats.get("step_num", stats.get("group_id"))
    if step is not None:
        cols.step_marks.append((name, int_or(step, -1), start, start + dur))
        return "annotation"
    return "runtime" if _SOURCE_STATS.intersection(stats) else "annotation"


def _cpu_ops(names: list[str], stats: list[dict[str, Any]], no_hlo: set[str]) -> list[bool]:
    """Which events are XLA:CPU ops: both ``hlo_op`` and ``hlo_module`` stats. A name seen without them
    joins ``no_hlo``, and its later events are not looked at (the events in order, as they were read)."""
    is_op = []
    for name, event_stats in zip(names, stats):
        op = name not in no_hlo and "hlo_op" in event_stats and "hlo_module" in event_stats
        if not op:
            no_hlo.add(name)
        is_op.append(op)
    return is_op


def _add_with_op_stats(
    cols: HostColumns,
    names: list[str],
    starts: list[float],
    durs: list[float],
    stats: list[dict[str, Any]],
    is_op: list[bool],
    categories: str | list[str],
) -> None:
    """Append these events: an op with its device, module, program and run from its stats, in category
    ``device``; the others without them, in ``categories``."""
    n = len(names)
    category = [categories] * n if isinstance(categories, str) else categories
    devices, modules, hlo_ops, programs, runs, kinds = [-1] * n, [""] * n, [""] * n, [-1] * n, [-1] * n, list(category)
    for i in [i for i, op in enumerate(is_op) if op]:
        event_stats = stats[i]
        # The stats are ints and strings as the reader decodes them; the conversions are for anything else.
        program, run = event_stats.get("program_id"), event_stats.get("run_id")
        device = event_stats.get("device_ordinal", 0)
        program = (program & _INT63 if program >= 0 else -1) if type(program) is int else program_id_of(program)
        run = run & _INT63 if type(run) is int else run_id_of(run)
        devices[i] = device if type(device) is int else int_or(device, 0)
        modules[i] = str(event_stats["hlo_module"])
        hlo_ops[i] = str(event_stats["hlo_op"])
        programs[i] = program
        runs[i] = run if run < 0 or program < 0 else (run ^ (program * _MIX)) & _INT63  # ``execution_id``
        kinds[i] = "device"
    cols.add_events(
        names, starts, durs, kinds, devices=devices, modules=modules, ops=hlo_ops, programs=programs, runs=runs
    )


def execution_id(run: int, program: int) -> int:
    """One id per execution: XLA:CPU numbers runs per client, and JAX 0.8 starts a recompiled
    program's run ids where the previous program's began, so a run id alone can name two
    executions of two programs. Mixed with the program id (a multiplicative hash), it names one."""
    if run < 0 or program < 0:
        return run
    return (run ^ (program * _MIX)) & _INT63


def execution_ids(runs: Any, programs: Any) -> Any:
    """``execution_id`` of each run id and program id (numpy int64 arrays)."""
    import numpy as np

    mixed = (runs.view(np.uint64) ^ (programs.view(np.uint64) * np.uint64(_MIX))).view(np.int64)
    return np.where((runs < 0) | (programs < 0), runs, mixed & _INT63)


def program_id_of(value: Any) -> int:
    """A program id or fingerprint as a non-negative int64, or -1 when absent or not a number.

    TPU runtimes write program ids and module fingerprints as unsigned 64-bit
    numbers (half of them past the int64 range); those keep their low 63 bits,
    which tells programs apart as well (they are hashes) and leaves -1 for "unknown".
    """
    number = int_or(value, -1)
    return number & _INT63 if number >= 0 else -1


_INT63 = (1 << 63) - 1
#: The multiplier of ``execution_id``'s hash (Fibonacci hashing's 2^64 / golden ratio).
_MIX = 0x9E3779B97F4A7C15


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
