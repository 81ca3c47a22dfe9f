"""Where each finding happened (run, host, device, step, time range), and the top-op rows it concerns.

``jaxdiag open TRACE --finding K`` and the HTML report read ``evidence["where"]``
to open XProf's timeline on that host and time range. The place comes from the
finding's own evidence (``host``, ``step``, ``worst_step``, ``sync_steps``,
``module``); a finding with none of these is placed on the run's first host
with no step and no time range (the whole capture), and says so
(``"step": None``). Times are milliseconds on the host's profiler clock, the
clock XProf's trace viewer shows.

Small-op findings link to the top-op rows of their module, exposed-collective
findings to the collective rows, a finding about one collective op (evidence
``op``, e.g. ``implicit_resharding``) to that op's row (``evidence["top_op_rows"]``, ids like ``"op3"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdiag.analyses.base import Finding
from jaxdiag.analyses.top_op_section import OpRow, TopOpsSection
from jaxdiag.trace import frames as F

_COLLECTIVE_KINDS = ("exposed_collective", "collective")


def place_findings(
    findings: Sequence[Finding], frames: Any, top_ops: TopOpsSection | None = None, host: str | None = None
) -> tuple[Finding, ...]:
    """``findings`` with ``evidence["where"]`` (and ``top_op_rows`` where rows match) added."""
    rows = top_ops.rows if top_ops is not None else ()
    run = Path(str(frames.run_dir)).name
    hosts = [host] if host is not None else list(frames.hosts)
    out = []
    for f in findings:
        if f.kind == "loader":
            out.append(f)
            continue
        evidence = dict(f.evidence)
        evidence["where"] = _where(evidence, frames, run, hosts)
        linked = _linked_rows(f.kind, evidence, rows)
        if linked:
            evidence["top_op_rows"] = linked
        out.append(Finding(f.kind, f.severity, f.time_lost_ms, f.message, f.suggestion, evidence))
    return tuple(out)


def _where(evidence: Mapping[str, Any], frames: Any, run: str, hosts: list[str]) -> dict[str, Any]:
    host = evidence.get("host") if isinstance(evidence.get("host"), str) else (hosts[0] if hosts else None)
    step = _step(evidence)
    device = None
    module = evidence.get("module")
    if isinstance(module, str) and module:
        first = _first_op_of(frames, module, host, step)
        if first is not None:
            host, device, op_step = first
            step = step if step is not None else op_step
    start_ms = end_ms = None
    if step is not None and host is not None:
        window = _step_window(frames, host, step)
        if window is not None:
            start_ms, end_ms = window[0] / 1e6, window[1] / 1e6
    return {"run": run, "host": host, "device": device, "step": step, "start_ms": _r(start_ms), "end_ms": _r(end_ms)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _step(evidence: Mapping[str, Any]) -> int | None:
    for key in ("step", "worst_step"):
        value = evidence.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    for key in ("sync_steps", "steps"):
        value = evidence.get(key)
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], int):
            return int(value[0])
    return None


def _first_op_of(frames: Any, module: str, host: str | None, step: int | None) -> tuple[str, int, int | None] | None:
    """Host, device and step of the first device op of ``module`` (in ``step`` when given)."""
    from jaxdiag.analyses.device_work import strings_at

    ev = frames.events
    try:
        keep = ((ev[F.HLO_MODULE] == module) & (ev[F.CATEGORY] == "device")).to_numpy()
    except (KeyError, TypeError, ValueError):
        return None
    if host is not None:
        keep = keep & (ev[F.HOST] == host).to_numpy()
    rows = np.flatnonzero(keep)
    if not len(rows):
        return None
    starts = ev[F.START_NS].to_numpy()[rows]
    hosts, devices = strings_at(ev[F.HOST], rows), ev[F.DEVICE].to_numpy()[rows]
    order = starts.argsort(kind="stable")
    step_at = _step_finder(frames)
    for i in order.tolist():
        h = str(hosts[i])
        s = step_at(h, int(starts[i]))
        if step is None or s == step:
            return h, int(devices[i]), s
    return None


def _step_finder(frames: Any) -> Callable[[str, int], int | None]:
    """``step_at(host, t_ns)``: the first step row of ``host`` holding ``t_ns``, else ``None`` (from arrays:
    a module's first ops may be many before one falls in the step asked for)."""
    st = frames.steps
    if st is None or not len(st):
        return lambda host, t_ns: None
    hosts, steps = st[F.HOST].to_numpy(), st[F.STEP].to_numpy()
    starts, ends = st[F.START_NS].to_numpy(), st["end_ns"].to_numpy()

    def step_at(host: str, t_ns: int) -> int | None:
        mine = np.flatnonzero((hosts == host) & (starts <= t_ns) & (ends > t_ns))
        return int(steps[mine[0]]) if len(mine) else None

    return step_at


def _step_window(frames: Any, host: str, step: int) -> tuple[int, int] | None:
    st = frames.steps
    if st is None or not len(st):
        return None
    mine = np.flatnonzero((st[F.HOST] == host).to_numpy() & (st[F.STEP] == step).to_numpy())
    if not len(mine):
        return None
    return int(st[F.START_NS].to_numpy()[mine].min()), int(st["end_ns"].to_numpy()[mine].max())


def _linked_rows(kind: str, evidence: Mapping[str, Any], rows: Sequence[OpRow]) -> list[str]:
    if kind == "small_ops":
        module = evidence.get("module")
        names = set(evidence.get("top_ops") or ())
        mine = [r for r in rows if r.module == module]
        named = [r for r in mine if r.name in names]
        return [r.id for r in (named or mine)]
    op = evidence.get("op")
    named = [r for r in rows if op and r.name == op and r.kind == "collective"]
    if named:  # a finding about one collective (e.g. implicit_resharding): its row
        return [r.id for r in named]
    if kind in _COLLECTIVE_KINDS:
        return [r.id for r in rows if r.kind == "collective"]
    return []
