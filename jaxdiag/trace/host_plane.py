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

import itertools
import re
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from jaxdiag.trace.columns import HostColumns
from jaxdiag.trace.contract import stat_column
from jaxdiag.trace.nesting import categorize

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
_SOURCE_STATS = ("_src", "_c", "_ct", "_p", "_pt")
#: The stats that number a step, the first given counting.
_STEP_STATS = ("step_num", "group_id")
#: The stats read of a Python thread's events (``_read_main_events``): step marks, and the C++ source or flow
#: stats that make an event the runtime's.
PYTHON_THREAD_STATS = frozenset(_SOURCE_STATS + _STEP_STATS)
#: The stats of a Python thread's calls that launch device work and run programs, on a host with accelerators
#: (``launch.link_kernels``).
LAUNCH_STATS = frozenset({"correlation_id", "run_id"})
#: The stats that make a host event an XLA:CPU op, on a host without accelerators (``_cpu_ops``), and give its
#: device, program and run (``_add_with_op_stats``).
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
    first = len(cols)
    names, stats = line.names, line.stats
    starts: Sequence[float] = line.starts
    durs: Sequence[float] = line.durs
    python: list[int] = []
    if include_python:  # the frames are among the events: split them off
        kept = [i for i, name in enumerate(names) if name[:1] != "$"]
        if len(kept) < len(names):
            python = [i for i, name in enumerate(names) if name[:1] == "$"]
            names, starts, durs = _pick(names, kept), _pick(starts, kept), _pick(durs, kept)
            stats = {key: _pick(column, kept) for key, column in stats.items()}
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
        cols.add_events(_pick(line.names, python), _pick(line.starts, python), _pick(line.durs, python), "python")
    cols.close_segment(HOST_PLANE, label, kind, first)


#: A line's stat columns (``contract.LineColumns.stats``): by name, one value per event, ``None`` where it has none.
Stats = dict[str, list[Any]]


def _pick(values: Sequence[Any], at: Iterable[int]) -> list[Any]:
    return [values[i] for i in at]


def _read_launches(cols: HostColumns, label: str, starts: Sequence[float], durs: Sequence[float], stats: Stats) -> None:
    """Note the thread's calls that launched device work (a ``correlation_id``) and its executions of programs
    (a ``run_id``), for ``launch.link_kernels``."""
    correlations, runs = stats.get("correlation_id", ()), stats.get("run_id", ())
    for i in _given(correlations):
        correlation = int_or(correlations[i], -1)
        if correlation >= 0:
            cols.launches.append((correlation, starts[i], label))
    for i in _given(runs):
        run = run_id_of(runs[i])
        if run >= 0:
            cols.executes.append((starts[i], starts[i] + durs[i], label, run))


def _given(column: Sequence[Any]) -> list[int]:
    """The positions of a stat column's values (``None``: an event without it)."""
    return [i for i, value in enumerate(column) if value is not None]


def _read_pool_events(
    cols: HostColumns, names: list[str], starts: Sequence[float], durs: Sequence[float], stats: Stats, no_hlo: set[str]
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
    starts: Sequence[float],
    durs: Sequence[float],
    names: list[str],
    stats: Stats,
    cpu_only: bool,
    no_hlo: set[str],
) -> None:
    """A Python thread's events, categorised by what encloses them (see the module docstring)."""
    starts, durs, names, stats = _outer_first(starts, durs, names, stats)
    is_op = _cpu_ops(names, stats, no_hlo) if cpu_only else [False] * len(names)
    steps = [stats[key] for key in _STEP_STATS if key in stats]
    categories, marks = categorize(
        starts,
        durs,
        names,
        _name_kind,
        is_op if any(is_op) else None,
        steps,
        [stats[k] for k in _SOURCE_STATS if k in stats],
    )
    for i in marks:
        step = next(column[i] for column in steps if column[i] is not None)
        cols.step_marks.append((names[i], int_or(step, -1), starts[i], starts[i] + durs[i]))
    if any(is_op):
        _add_with_op_stats(cols, names, starts, durs, stats, is_op, categories)
    else:
        cols.add_events(names, starts, durs, categories)


def _name_kind(name: str) -> int:
    """1 a runtime name, 2 a framework span (``PjitFunction(f)``), 0 neither."""
    if name in _RUNTIME_NAMES or "::" in name or _CUDA_CALL.match(name):
        return 1
    return 2 if _FRAMEWORK_SPAN.match(name) else 0


def _outer_first(
    starts: Sequence[float], durs: Sequence[float], names: list[str], stats: Stats
) -> tuple[Sequence[float], Sequence[float], list[str], Stats]:
    """The events by start, the longer of two that start together first (an enclosing span before what it
    encloses); events equal in both stay in their order. A line is most often in that order already."""
    import numpy as np

    s, d = np.asarray(starts, dtype=np.float64), np.asarray(durs, dtype=np.float64)
    if ((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (d[1:] <= d[:-1]))).all():  # in order: a sort would not move them
        return starts, durs, names, stats
    order = np.lexsort((-d, s))
    if (order[1:] < order[:-1]).any():
        at = order.tolist()
        return _pick(starts, at), _pick(durs, at), _pick(names, at), {k: _pick(v, at) for k, v in stats.items()}
    return starts, durs, names, stats


def _cpu_ops(names: list[str], stats: Stats, no_hlo: set[str]) -> list[bool]:
    """Which events are XLA:CPU ops: both ``hlo_op`` and ``hlo_module`` stats. A name seen without them
    joins ``no_hlo``, and its later events are not looked at (the events in order, as they were read)."""
    ops, modules = stats.get("hlo_op"), stats.get("hlo_module")
    if ops is None or modules is None:
        no_hlo.update(names)
        return [False] * len(names)
    has = [op is not None and module is not None for op, module in zip(ops, modules)]
    missed = {name for name, op in zip(names, has) if not op}
    found = set(itertools.compress(names, has))
    if missed.isdisjoint(found) and no_hlo.isdisjoint(found):  # no name is both: the order does not matter
        no_hlo |= missed
        return has
    is_op = []
    for name, op in zip(names, has):
        op = op and name not in no_hlo
        if not op:
            no_hlo.add(name)
        is_op.append(op)
    return is_op


def _add_with_op_stats(
    cols: HostColumns,
    names: list[str],
    starts: Sequence[float],
    durs: Sequence[float],
    stats: Stats,
    is_op: list[bool],
    categories: str | list[str],
) -> None:
    """Append these events: an op with its device, module, program and run from its stats, in category
    ``device``; the others without them, in ``categories``."""
    import numpy as np

    n = len(names)
    at = list(itertools.compress(range(n), is_op))
    kinds = [categories] * n if isinstance(categories, str) else list(categories)
    modules, hlo_ops = [""] * n, [""] * n
    for i, module, op in zip(
        at, itertools.compress(stats["hlo_module"], is_op), itertools.compress(stats["hlo_op"], is_op)
    ):
        modules[i], hlo_ops[i], kinds[i] = str(module), str(op), "device"
    # The stats are ints and strings as the reader decodes them; the conversions are for anything else.
    programs = _low_bits(_of_ops(stat_column(stats, "program_id", n), is_op), negative_is_absent=True)
    runs = _low_bits(_of_ops(stat_column(stats, "run_id", n), is_op), negative_is_absent=False)
    devices, where = np.full(n, -1, dtype=np.int64), np.array(at, dtype=np.intp)  # numpy indexes by an array
    ordinals = _of_ops(stat_column(stats, "device_ordinal", n), is_op)
    ints = set(map(type, ordinals)) <= {int}
    devices[where] = ordinals if ints else [0 if v is None else v if type(v) is int else int_or(v, 0) for v in ordinals]
    program_column, run_column = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    program_column[where], run_column[where] = programs, execution_ids(runs, programs)
    cols.add_events(
        names,
        starts,
        durs,
        kinds,
        devices=devices,
        modules=modules,
        ops=hlo_ops,
        programs=program_column,
        runs=run_column,
    )


def _of_ops(column: list[Any], is_op: list[bool]) -> list[Any]:
    """A stat column's values of the ops."""
    return list(itertools.compress(column, is_op))


def _low_bits(values: list[Any], *, negative_is_absent: bool) -> Any:
    """Ids as int64: each int's low 63 bits (a negative one: -1 where ``negative_is_absent``), -1 for none or
    not a number (``program_id_of``, ``run_id_of``)."""
    import numpy as np

    if set(map(type, values)) <= {int}:
        try:
            numbers = np.array(values, dtype=np.int64)
        except OverflowError:  # past int64: unsigned ones, or a mix the loop below takes
            try:
                numbers = (np.array(values, dtype=np.uint64) & np.uint64(_INT63)).astype(np.int64)
            except OverflowError:
                numbers = None
        if numbers is not None:
            if negative_is_absent:
                return np.where(numbers < 0, -1, numbers)
            return numbers & _INT63
    convert = program_id_of if negative_is_absent else run_id_of
    return np.array([convert(v) for v in values], dtype=np.int64)


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
