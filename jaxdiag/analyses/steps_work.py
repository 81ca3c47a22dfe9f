"""Which programs are the steps' own work, and which are work between steps (an evaluation, a checkpoint).

A program other than the step's is judged by the steps it was queued in where its executions pair with
their dispatches (``booking.queued_after``): a host that runs ahead queues every step's work long before
the device runs it, so where the device ran it says little. Queued in at least half of the steps (a
learning rate computed eagerly each step), it is the steps' work; otherwise it is work between them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.analyses.booking import UNBOOKED, dispatched_at, queued_after, step_program
from jaxdiag.analyses.categories import column_codes
from jaxdiag.analyses.device_work import executions_of
from jaxdiag.analyses.shared import once
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from jaxdiag.trace.frames import TraceFrames


def between_programs(
    frames: "TraceFrames", modules: "pd.Series", step: np.ndarray, counted: int, rows: np.ndarray | None = None
) -> set[str]:
    """The programs that are work between steps, of ops with ``modules`` (their module column, at positions
    ``rows`` when given) booked to ``step`` (``op_steps``, -1: none) over ``counted`` steps: other than the
    step's, with ops in fewer than half of the steps (as ``trace.steps`` tells them apart), or queued in fewer
    than half of them where their dispatches are known (``queued_in_steps``). Their ops are no step's work,
    wherever they ran. None without steps."""
    if not counted:
        return set()
    main = step_program(frames)
    codes, names = column_codes(modules)
    codes = codes if rows is None else codes[rows]
    inside = (step >= 0) & (codes >= 0)
    # each (program, step) pair once, as one number: sorting pairs of numbers costs ten times more
    width = int(step[inside].max()) + 1 if inside.any() else 1
    pairs = np.unique(codes[inside].astype(np.int64) * width + step[inside].astype(np.int64))
    steps_of = np.bincount(pairs // width, minlength=len(names))
    present = np.bincount(codes[codes >= 0], minlength=len(names)) > 0  # a categorical's values: those used
    queued = queued_in_steps(frames)  # by dispatch where known: a host that ran ahead ran them late
    used = [(m, n) for m, n, here in zip(names, steps_of.tolist(), present.tolist()) if here]
    return {str(m) for m, n in used if m and m != main and 2 * queued.get(str(m), n) < counted}


def queued_in_steps(frames: "TraceFrames") -> dict[str, int]:
    """For each program other than the step's whose executions pair with dispatches (``dispatched_at``), in
    how many steps it was queued (``queued_after``; before the first counts as one), at most over hosts."""
    out: dict[str, int] = {}
    for per_program in _queued_by_host(frames).values():
        for module, n in per_program.items():
            out[module] = max(out.get(module, 0), n)
    return out


def steps_work(frames: "TraceFrames", host: str, counted: int) -> set[str]:
    """The programs whose executions on ``host`` are the steps' own work, wherever the device ran them: the
    step's program, and any queued in at least half of the ``counted`` steps (a learning rate computed
    eagerly each step), its runs queued before the trace began included."""
    queued = _queued_by_host(frames).get(host, {})
    return {step_program(frames)} | {m for m, n in queued.items() if 2 * n >= counted}


def _queued_by_host(frames: "TraceFrames") -> dict[str, dict[str, int]]:
    """``queued_in_steps`` of each host; shared within a report."""
    return once(frames, ("queued_by_host",), lambda: _queued_per_host(frames))


def _queued_per_host(frames: "TraceFrames") -> dict[str, dict[str, int]]:
    import pandas as pd

    main = step_program(frames)
    execs = executions_of(frames)
    out: dict[str, dict[str, int]] = {}
    for host in execs[F.HOST].unique().tolist():
        mine = execs.loc[(execs[F.HOST] == host) & (execs[F.HLO_MODULE] != main)]
        after = queued_after(frames, str(host), dispatched_at(frames, str(host), mine))
        known = after != UNBOOKED
        code, modules = pd.factorize(mine[F.HLO_MODULE].to_numpy(object)[known], use_na_sentinel=False)
        steps = after[known] + 1  # from 0 (-1: queued before the first step)
        width = int(steps.max()) + 1 if len(steps) else 1
        # each (module, step) pair once, as one number; then how many steps each module's pairs hold
        pairs = np.unique(code.astype(np.int64) * width + steps)
        counted = np.bincount(pairs // width, minlength=len(modules))
        out[str(host)] = {str(m): int(n) for m, n in zip(modules.tolist(), counted.tolist()) if n}
    return out
