"""Which execution each GPU kernel belongs to: the host call that launched it, inside a run of the program.

A GPU kernel carries no run id, but it carries the correlation id (CUPTI's, or
ROCtracer's) of the host call that launched it (``cuGraphLaunch``,
``cuLaunchKernel``, ``hipModuleLaunchKernel``, ...), and that call runs inside the
runtime's execution of the program on the host thread that dispatched it
(``CommonPjRtLoadedExecutable::Execute (jit_f)``, which carries a ``run_id``). So
each kernel gets the run id of the execution whose span on the launching thread
holds its launch, mixed with its program id as an XLA:CPU op's is
(``host_plane.execution_id``): the kernels of one run of a program are one
execution, told apart from the next run however closely the two follow each other.

A kernel whose launch is not in the trace (launched before it began, or from a
thread whose events carry no stats), or not inside an execution (autotuning in a
compile, a transfer), keeps run id -1, and ``trace.executions`` tells its
executions apart by timing, as before.
"""

from __future__ import annotations

from collections import defaultdict

from jaxdiag.trace.columns import HostColumns
from jaxdiag.trace.host_plane import execution_ids


def link_kernels(cols: HostColumns) -> int:
    """Give ``cols``' GPU kernels the run id of the execution that launched them; returns how many got one."""
    if not cols.launches or not cols.executes:
        return 0
    import numpy as np

    spans: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for start, end, line, run in cols.executes:
        spans[line].append((start, end, run))
    found: dict[str, tuple[np.ndarray, np.ndarray, list[int]]] = {}
    for line, mine in spans.items():
        mine.sort()
        found[line] = (np.array([m[0] for m in mine]), np.array([m[1] for m in mine]), [m[2] for m in mine])
    correlation_tuple, at_tuple, line_tuple = zip(*cols.launches)
    correlation_of, at = np.array(correlation_tuple, dtype=np.int64), np.array(at_tuple, dtype=np.float64)
    line_of = np.array(line_tuple, dtype=object)
    run_of = np.full(len(at), -1, dtype=np.int64)  # each launch's execution's run, -1: none holds it
    for line in dict.fromkeys(line_tuple):
        if line not in found:
            continue
        starts, ends, runs = found[line]
        on_line = np.flatnonzero(line_of == line)
        inside = np.searchsorted(starts, at[on_line], side="right") - 1  # the latest execution begun by then
        held = inside >= 0
        held[held] = at[on_line[held]] < ends[inside[held]]
        run_of[on_line[held]] = np.asarray(runs, dtype=np.int64)[inside[held]]
    launched = run_of >= 0
    if not launched.any():
        return 0
    order = np.argsort(correlation_of[launched], kind="stable")
    keys, values = correlation_of[launched][order], run_of[launched][order]
    correlations = cols.numbers("correlation")
    rows = np.flatnonzero(correlations >= 0)  # the kernels: few of a host's events
    slot = np.minimum(np.searchsorted(keys, correlations[rows]), len(keys) - 1)
    matched = keys[slot] == correlations[rows]
    rows, slot = rows[matched], slot[matched]
    if not len(rows):
        return 0
    run_ids = cols.numbers("run_id")
    run_ids[rows] = execution_ids(values[slot], cols.numbers("program_id")[rows])
    cols.replace("run_id", run_ids)
    return len(rows)
