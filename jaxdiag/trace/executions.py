"""Executions: each run of a compiled program on a host's devices, from its first op to its last.

A device waits for the host only when nothing is in flight; between the ops of one
execution it is the program's own schedule (XLA:CPU's thread pool picking up the
next thunk, a GPU stream between kernels). Steps without annotations are
executions of the dominant program. Where they come from, best first:

- ``run_id``: XLA:CPU puts a ``run_id`` stat on every op event; the ops sharing one
  are one execution (across the host's devices).
- ``launch``: a GPU kernel's run id is its launching execution's (``trace.launch``):
  the kernels sharing one are one execution, as on XLA:CPU.
- ``module_span``: a TPU ``XLA Modules`` line holds one span per execution.
- ``timing``: otherwise (a kernel whose launch is not in the trace) a device's
  consecutive ops of one module, split where another module's op runs between them
  or where the device idles longer than the ``step_gap_us`` setting.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Sequence

from jaxdiag.trace.frames import (
    CATEGORY,
    DEVICE,
    DUR_NS,
    HLO_MODULE,
    HLO_OP,
    HOST,
    LINE_KIND,
    PLANE,
    PROGRAM_ID,
    RUN_ID,
    START_NS,
)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

#: ``(host, step, name, start_ns, end_ns)`` of one step (``trace.steps.Row``).
Row = tuple[str, int, str, int, int]

END_NS = "end_ns"
SOURCE = "source"
#: One row per execution, by host then start.
EXECUTION_COLUMNS = (HOST, DEVICE, HLO_MODULE, PROGRAM_ID, RUN_ID, START_NS, END_NS, SOURCE)
#: Lines of spans that are not ops (their runs of ops are read from the ops).
_NOT_OPS = ("xla_modules", "steps", "async_ops", "markers", "sparsecore")


def executions(events: "pd.DataFrame", step_gap_us: float) -> "pd.DataFrame":
    """Every execution in ``events`` (``EVENT_COLUMNS``), columns ``EXECUTION_COLUMNS``.

    ``device`` is the device the execution ran on, or the lowest of several
    (``run_id`` executions span the host's devices). Where the trace tells executions
    apart by neither run ids nor module spans, a device idle for ``step_gap_us`` (the
    setting) ends one.
    """
    import numpy as np
    import pandas as pd

    parts = []
    if len(events):
        device = (events[CATEGORY] == "device").to_numpy() & (events[HLO_MODULE] != "").to_numpy()
        spans = device & _among(events[LINE_KIND], ("xla_modules",))
        ops = device & ~_among(events[LINE_KIND], _NOT_OPS)
        runs = events[RUN_ID].to_numpy(np.int64) if RUN_ID in events else np.full(len(events), -1, np.int64)
        by_run = ops & (runs >= 0)
        if by_run.any():
            plane = events[PLANE].astype("category")
            on_device = np.asarray(plane.cat.categories.str.startswith("/device:"))[plane.cat.codes.to_numpy()]
            for launched, source in ((False, "run_id"), (True, "launch")):
                mine = by_run & (on_device == launched)
                if mine.any():
                    parts.append(_by_run_id(events.loc[mine], source))
        if spans.any():
            rows = events.loc[spans]
            parts.append(
                pd.DataFrame(
                    {
                        HOST: rows[HOST].astype(object).to_numpy(),
                        DEVICE: rows[DEVICE].to_numpy(np.int64),
                        HLO_MODULE: rows[HLO_MODULE].astype(object).to_numpy(),
                        PROGRAM_ID: rows[PROGRAM_ID].to_numpy(np.int64),
                        RUN_ID: -1,
                        START_NS: rows[START_NS].to_numpy(np.int64),
                        END_NS: (rows[START_NS] + rows[DUR_NS]).to_numpy(np.int64),
                        SOURCE: "module_span",
                    }
                )
            )
        rest = ops & (runs < 0)
        if rest.any() and spans.any():  # ops of a device with module spans are inside those
            covered = set(zip(events.loc[spans, HOST].astype(object), events.loc[spans, DEVICE]))
            keys = zip(events[HOST].astype(object).to_numpy()[rest], events[DEVICE].to_numpy()[rest])
            rest[np.flatnonzero(rest)] = [k not in covered for k in keys]
        if rest.any():
            parts.append(_by_timing(events.loc[rest], int(step_gap_us * 1000)))
    if not parts:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c in (HOST, HLO_MODULE, SOURCE) else np.int64) for c in EXECUTION_COLUMNS}
        )
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values([HOST, START_NS], kind="stable").reset_index(drop=True)[list(EXECUTION_COLUMNS)]


def _among(column: "pd.Series", values: Any) -> "np.ndarray":
    """``column.isin(values)`` as a bool array; a categorical's tested on its few categories."""
    import numpy as np
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        return np.append(column.cat.categories.isin(list(values)), False)[column.cat.codes.to_numpy()]
    return column.isin(values).to_numpy()


def _by_run_id(ops: "pd.DataFrame", source: str) -> "pd.DataFrame":
    """One row per (host, run id), in order of first appearance (as ``groupby(sort=False)``): the least device,
    the first module (not missing) and program, the first start and the last end of its ops."""
    import numpy as np
    import pandas as pd

    host = ops[HOST].astype(object).to_numpy()
    module = ops[HLO_MODULE].astype(object).to_numpy()
    run = ops[RUN_ID].to_numpy(np.int64)
    start = ops[START_NS].to_numpy(np.int64)
    host_code = pd.factorize(host)[0]
    run_code, runs = pd.factorize(run)
    rows = np.flatnonzero(host_code >= 0)  # a missing host is no group's
    group = pd.factorize(host_code[rows].astype(np.int64) * max(len(runs), 1) + run_code[rows])[0]
    sort = np.argsort(group, kind="stable")
    order, by_group = rows[sort], group[sort]  # each group's rows together, in their order
    bounds = np.flatnonzero(np.diff(by_group, prepend=-1))  # where each group begins (codes are >= 0)
    first = order[bounds]
    named = ~pd.isna(module[order])  # "first" skips missing values
    named_group, named_rows = by_group[named], order[named]
    firsts = np.flatnonzero(np.diff(named_group, prepend=-1))
    modules = np.full(len(first), np.nan, dtype=object)
    modules[named_group[firsts]] = module[named_rows[firsts]]
    return pd.DataFrame(
        {
            HOST: host[first],
            RUN_ID: run[first],
            DEVICE: np.minimum.reduceat(ops[DEVICE].to_numpy(np.int64)[order], bounds),
            HLO_MODULE: pd.Series(modules, dtype=object),
            PROGRAM_ID: ops[PROGRAM_ID].to_numpy(np.int64)[first],
            START_NS: np.minimum.reduceat(start[order], bounds),
            END_NS: np.maximum.reduceat((start + ops[DUR_NS].to_numpy(np.int64))[order], bounds),
        }
    ).assign(**{SOURCE: source})


def _by_timing(ops: "pd.DataFrame", gap_ns: int) -> "pd.DataFrame":
    """Runs of one module's ops per device, split on another module's op or a long idle gap."""
    import numpy as np
    import pandas as pd

    host = ops[HOST].astype(object).to_numpy()
    dev = ops[DEVICE].to_numpy(np.int64)
    module = ops[HLO_MODULE].astype(object).to_numpy()
    program = ops[PROGRAM_ID].to_numpy(np.int64)
    start = ops[START_NS].to_numpy(np.int64)
    end = start + ops[DUR_NS].to_numpy(np.int64)
    host_code = pd.factorize(host)[0]
    order = np.lexsort((start, dev, host_code))
    host, dev, module, program, start, end, host_code = (
        a[order] for a in (host, dev, module, program, start, end, host_code)
    )
    reach = end.copy()
    new = np.ones(len(start), dtype=bool)
    if len(start) > 1:
        same_place = (host_code[1:] == host_code[:-1]) & (dev[1:] == dev[:-1])
        # The furthest end so far within each device's run (an op may outlast the next one).
        segment = np.cumsum(np.append(True, ~same_place))
        reach = pd.Series(end).groupby(segment).cummax().to_numpy(np.int64)
        new[1:] = ~same_place | (module[1:] != module[:-1]) | (start[1:] - reach[:-1] > gap_ns)
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(start) - 1)
    ends = np.maximum.reduceat(end, first) if len(first) else end[:0]
    return pd.DataFrame(
        {
            HOST: host[first],
            DEVICE: dev[first],
            HLO_MODULE: module[first],
            PROGRAM_ID: program[first],
            RUN_ID: -1,
            START_NS: start[first],
            END_NS: np.maximum(ends, end[last]),
            SOURCE: "timing",
        }
    )


def find_step_program(events: "pd.DataFrame", execs: "pd.DataFrame") -> str:
    """``step_module`` of the device work in ``events`` (``execs``: their executions), ``""`` without any."""
    rows = device_rows(events)
    return step_module(events, rows, execs) if len(rows) else ""


def device_rows(events: "pd.DataFrame") -> "np.ndarray":
    """Positions of the device events with a module name."""
    import numpy as np

    if not len(events):
        return np.zeros(0, dtype=np.intp)
    return np.flatnonzero(((events[CATEGORY] == "device") & (events[HLO_MODULE] != "")).to_numpy(bool))


def step_module(events: "pd.DataFrame", rows: "np.ndarray", execs: "pd.DataFrame") -> str:
    """The program that defines a step, of the device events at ``rows``: of the programs of more than one
    distinct op (a lone op is an eager ``jnp`` call or a batch's gather, never a training step), those with at
    least a quarter of the busiest one's device time; of these, the one run most often (ties: the busier). An
    evaluation run once an epoch is not the step, however long. Programs in the module column's order (a
    categorical's categories, else sorted), as a ``groupby`` gives them."""
    import numpy as np

    ops_rows = rows[(events[LINE_KIND] != "xla_modules").to_numpy(bool)[rows]]
    work = ops_rows if len(ops_rows) else rows
    codes, names = _codes(events[HLO_MODULE])
    op_codes, op_names = _codes(events[HLO_OP])
    work = work[codes[work] >= 0]  # a missing module is no program
    module, op = codes[work].astype(np.int64), op_codes[work].astype(np.int64)
    time = np.zeros(len(names), dtype=np.int64)
    np.add.at(time, module, events[DUR_NS].to_numpy(np.int64)[work])
    present = np.bincount(module, minlength=len(names)) > 0
    width = len(op_names) + 1
    pairs = np.unique(module[op >= 0] * width + op[op >= 0])  # each distinct op of a program once
    ops = np.bincount(pairs // width, minlength=len(names))
    order = np.flatnonzero(present)
    if not len(execs) or not (time[order] > 0).any():
        return str(names[order[np.argmax(time[order])]])
    counts: dict[str, int] = {}
    per_host: dict[tuple[str, str], int] = {}
    for key in zip(execs[HOST].tolist(), execs[HLO_MODULE].tolist()):
        per_host[key] = per_host.get(key, 0) + 1
    for (_host, name), n in per_host.items():
        counts[str(name)] = max(counts.get(str(name), 0), n)
    several = order[(ops[order] > 1) & (time[order] > 0)]
    programs = several if len(several) else order[time[order] > 0]
    most = int(np.max(time[programs]))
    busy = [k for k in programs.tolist() if time[k] * 4 >= most]
    best = max(busy, key=lambda k: (counts.get(str(names[k]), 0), float(time[k])))
    return str(names[best])


def _codes(column: "pd.Series") -> tuple["np.ndarray", list]:
    """A column as codes and the values they number: a categorical's own, else its sorted distinct values."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), column.cat.categories.tolist()
    codes, uniques = pd.factorize(column, sort=True)
    return codes, list(uniques)


#: The program name ``jax.pmap`` gives every mapped function: JAX 0.9 on runs each through one jitted wrapper
#: (0.8: ``jit_call_wrapped``), so a pmapped training step and a pmapped evaluation share it, told apart
#: in the trace by their program ids alone.
MAPPED_PROGRAM_NAMES = ("jit__fun", "jit_call_wrapped")


def inferred_steps_note(module: str, execs: "pd.DataFrame", sources: set[str], count: int) -> str:
    """The note on ``count`` steps inferred from ``module``'s executions (told apart as ``sources`` say)."""
    how = {
        "run_id": "told apart by their run_id",
        "launch": "told apart by the host call that launched their kernels",
        "module_span": "XLA Modules spans",
        "timing": "runs of its ops",
    }
    return (
        f"no step annotations; steps from executions of {module} (of the busy programs of several ops, the "
        f"one run most often; {', '.join(how[s] for s in sorted(sources))}): each of the {count} executions, with "
        "the gap before it (where its inputs were made and its compile ran), is a step."
        + _shared_name(module, execs)
        + " Wrap each training step in jax.profiler.StepTraceAnnotation('train', step_num=i) for exact steps"
    )


def _shared_name(module: str, execs: "pd.DataFrame") -> str:
    """What steps inferred from ``module`` may hold where it is the shared mapped name and its executions ran
    several programs: recompiles of the step, or another mapped function's (an evaluation)."""
    if module not in MAPPED_PROGRAM_NAMES:
        return ""
    programs = execs.loc[execs[HLO_MODULE] == module, PROGRAM_ID].nunique()
    if programs < 2:
        return ""
    return (
        f" jax.pmap names every mapped function's program {module}, and these executions ran {programs} programs: "
        "recompiles of the step, or another mapped function (an evaluation step), whose executions are then "
        "counted as steps too; the trace does not tell which."
    )


def between_steps_cut(
    tiled: Sequence[Row], marked: dict[tuple[str, int], tuple[int, int]], execs: "pd.DataFrame", module: str
) -> list[Row]:
    """Cut work between steps out of the steps: executions of programs other than the step's that run
    in fewer than half of the steps, between a step's start and its mark (for inferred steps: its
    execution), no longer belong to it. The step then begins where the last of them ends, leaving a
    hole in the tiling that ``analyses.between_steps`` reports on its own row.

    Args:
      tiled: ``tile``'s rows.
      marked: ``(host, step) -> (start, end)`` of each step's mark (annotation span or execution).
      execs: ``trace.executions.executions`` of the events.
      module: the step's program; its executions never move.
    """
    import numpy as np

    out = list(tiled)
    if execs.empty or not out:
        return out
    others = execs[execs[HLO_MODULE] != module]
    by_host: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(out):
        by_host[row[0]].append(i)
    for host, positions in by_host.items():
        mine = others[others[HOST] == host]
        if mine.empty or len(positions) < 2:
            continue
        positions.sort(key=lambda i: out[i][3])
        starts = np.array([out[i][3] for i in positions], dtype=np.int64)
        ends = np.array([out[i][4] for i in positions], dtype=np.int64)
        e_start, e_end = mine[START_NS].to_numpy(np.int64), mine[END_NS].to_numpy(np.int64)
        at = np.searchsorted(starts, e_start, side="right") - 1
        inside = (at >= 0) & (e_start < ends[np.maximum(at, 0)])
        modules = mine[HLO_MODULE].to_numpy(object)
        steps_with: dict[str, set[int]] = defaultdict(set)
        for m, k, ok in zip(modules, at.tolist(), inside.tolist()):
            if ok:
                steps_with[str(m)].add(k)
        rare = np.isin(modules, [m for m, ks in steps_with.items() if 2 * len(ks) < len(positions)])
        rows = [out[i] for i in positions]
        mark_starts = np.array([marked.get((r[0], r[1]), (r[3], r[4]))[0] for r in rows], dtype=np.int64)
        # Each step's lead (step 0's too: work queued before the loop is not its own): the rare executions
        # that start in it before its mark; the step then starts where the last of them ends.
        lead = inside & rare & (e_start < mark_starts[np.maximum(at, 0)])
        none = np.iinfo(np.int64).min
        lead_end = np.full(len(positions), none, dtype=np.int64)
        np.maximum.at(lead_end, at[lead], e_end[lead])
        for k in np.flatnonzero(lead_end > none).tolist():
            row = rows[k]
            cut = min(int(lead_end[k]), int(mark_starts[k]))
            if cut > row[3]:
                out[positions[k]] = (row[0], row[1], row[2], cut, max(row[4], cut))
        last = out[positions[-1]]
        mark_end = marked.get((last[0], last[1]), (last[3], last[4]))[1]
        trail = (at == len(positions) - 1) & inside & (e_start >= mark_end) & rare
        if trail.any():  # work after the last step (a final evaluation) is not the last step's
            steps_own = (at == len(positions) - 1) & inside & ~rare
            end = max([mark_end] + [int(e) for e in e_end[steps_own & (e_start < int(e_start[trail].min()))]])
            out[positions[-1]] = (last[0], last[1], last[2], last[3], max(last[3], min(last[4], end)))
    return out
