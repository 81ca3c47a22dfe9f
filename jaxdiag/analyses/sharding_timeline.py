"""Collective ops on the timeline, per HLO module and op: the timeline half of the sharding analysis.

Counted as ``collectives`` counts them: device ops that ``device_work`` calls
collectives, inside the analysed steps, with time per device (divided by the
host's devices that ran any op).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.device_work import (
    COLLECTIVE,
    OP_KIND,
    classify_names,
    collective_kind,
    device_ops,
    hosts_of,
    step_of,
    step_windows,
)
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.frames import TraceFrames


def timeline_collectives(
    frames: "TraceFrames", host: str | None = None, steps: Sequence[int] | None = None
) -> tuple[dict[tuple[str, str, int], tuple[str, int, float]], float]:
    """``(module, op, program id) -> (kind, op count, ms per device)`` of collective ops, and the steps' wall ms.

    The op is the HLO op name (``all-gather.3``), else the event name (XLA:CPU
    names its collective thunks after the op). The program id is the ops'
    ``program_id`` stat (-1 unknown): two compiles of one module are two programs.
    """
    if not _has_collectives(frames):
        return {}, 0.0
    windows = step_windows(frames, host, steps)
    out: dict[tuple[str, str, int], list] = {}
    wall_ms = 0.0
    for h in hosts_of(frames, host):
        win = windows.loc[windows[F.HOST] == h]
        if win.empty:
            continue
        wall_ms = max(wall_ms, float((win["end_ns"] - win[F.START_NS]).sum()) / 1e6)
        ops = device_ops(frames, h, compile_windows(compile_spans(frames, h)))
        if ops.empty:
            continue
        n_devices = len(ops[[F.PLANE, F.DEVICE]].drop_duplicates())
        coll = ops.loc[ops[OP_KIND] == "collective"]
        coll = coll.loc[step_of(coll[F.START_NS].to_numpy(np.int64), win) != -1]
        if coll.empty:
            continue
        op = coll[F.HLO_OP].astype(str).where(coll[F.HLO_OP].astype(str) != "", coll[F.NAME].astype(str))
        keyed = coll.assign(_op=op, _module=coll[F.HLO_MODULE].astype(str))
        groups = keyed.groupby(["_module", "_op", F.PROGRAM_ID, COLLECTIVE], sort=True, observed=True)
        for (module, name, program, kind), rows in groups:
            acc = out.setdefault((str(module), str(name), int(program)), [str(kind), 0, 0.0])
            acc[1] += len(rows)
            acc[2] += float(rows[F.DUR_NS].sum()) / 1e6 / max(n_devices, 1)
    return {k: (v[0], int(v[1]), float(v[2])) for k, v in out.items()}, wall_ms


def _has_collectives(frames: "TraceFrames") -> bool:
    """Whether any device row could be a collective: a quick look at distinct names before the full pass."""
    ev = frames.events
    device = np.flatnonzero((ev[F.CATEGORY] == "device").to_numpy())
    if (ev[F.LINE_KIND] == "collective").to_numpy()[device].any():
        return True
    return any(  # each distinct name once per report (see ``classify_names``)
        classify_names(ev[column], collective_kind, key=collective_kind, dtype=bool, rows=device).any()
        for column in (F.NAME, F.HLO_OP)
    )
