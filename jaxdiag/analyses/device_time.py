"""Device time by jitted module and by op: what regression checks and diffs compare.

``total_ms`` of a module is the sum of its op durations divided by the number of
devices that ran ops on that host, so it reads against the per-step wall times
(eight devices each busy 1 ms in a step count as 1 ms, not 8). Overlapping ops
on one device are summed, not merged: this is a bill of work, not busy time
(``steps.device_busy_ms`` is that). Autotuning kernels inside compiles are left
out, as everywhere else.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxdiag.analyses import device_work as W
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.trace import frames as F

#: Ops listed in ``top_ops``.
TOP_OPS = 20


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceTime:
    """Device time per module (with its per-step split) and the costliest ops."""

    by_module: tuple[dict[str, Any], ...]
    top_ops: tuple[dict[str, Any], ...]
    findings: tuple[Finding, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"by_module": list(self.by_module), "top_ops": list(self.top_ops)}


def analyze(inputs: AnalysisInputs) -> DeviceTime:
    """Sum device op time per module, per step and per op."""
    import pandas as pd

    frames = inputs.frames
    ops = W.device_ops(frames, inputs.host, compile_windows(compile_spans(frames, inputs.host)))
    if ops.empty:
        return DeviceTime((), ())
    step, scale = W.steps_and_device_share(frames, ops, inputs.host, inputs.steps)
    hlo_op = ops[F.HLO_OP].astype(str)
    ops = pd.DataFrame(  # only what is summed and grouped: each group is a frame of these four
        {
            "_step": step,
            "_ms": ops[F.DUR_NS].to_numpy(dtype=np.float64) / 1e6 * scale,
            "_module": ops[F.HLO_MODULE].astype(str).replace("", "(no module)"),
            "_op": np.where(hlo_op != "", hlo_op, ops[F.NAME].astype(str)),
        },
        index=ops.index,
    )
    if inputs.steps is not None:
        ops = ops.loc[ops["_step"] >= 0]
    by_module = []
    for module, g in ops.groupby("_module", observed=True, sort=False):
        per_step = g.groupby("_step")["_ms"].sum()
        by_module.append(
            {
                "module": str(module),
                "count": int(len(g)),
                "total_ms": round(float(g["_ms"].sum()), 4),
                "per_step": [{"step": int(s), "ms": round(float(ms), 4)} for s, ms in per_step.items() if s >= 0],
            }
        )
    by_module.sort(key=lambda m: -m["total_ms"])
    top = ops.groupby(["_op", "_module"], observed=True, sort=False)["_ms"].agg(["count", "sum"])
    top = top.sort_values("sum", ascending=False).head(inputs.thresholds.top_ops)
    top_ops = tuple(
        {"name": str(op), "module": str(module), "count": int(n), "total_ms": round(float(ms), 4)}
        for (op, module), n, ms in zip(top.index, top["count"].tolist(), top["sum"].tolist())
    )
    return DeviceTime(tuple(by_module), top_ops)
